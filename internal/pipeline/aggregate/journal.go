package aggregate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"slices"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/internal/atomicfile"
	"github.com/gpusampler/gpusampler/record"
)

// The journal keeps what a process crash would otherwise lose: the open
// windows (whose samples the pump has handed on and will not send again)
// and the summaries being handed to the wrapped output with the Seq of the
// batch that carries them. It is rewritten (a new file renamed over the
// old, one rename: a process crash leaves the old or the new one whole)
// before every write to the wrapped output, and removed when Close has
// handed on every window.
//
// A new wrapper on the same file takes the open windows up and hands the
// summaries on again unless Options.LastAppended says that the batch with
// that Seq reached the wrapped output before the crash; its batches go on
// from that Seq. The metric of every entry is recorded by name, so that a
// catalog that renumbers metrics never relabels a journaled window.
//
// Format (little-endian): "GSAJ" | version u32 | interval i64 | seq u64 |
// names: n u32, then (id u16, len u16, name) each | pending: n u32, then
// per summary start i64, interval i64, mean, min, max, last f64, count u32,
// device u16, metric u16 | series: n u32, then per series device u16,
// metric u16, emittedEnd i64, windows u32, then per window start i64,
// count u64, sum, min, max, last f64, lastT i64 | CRC32C u32 of all before.
const (
	journalMagic   = "GSAJ"
	journalVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journalState is a journal's content.
type journalState struct {
	interval int64
	seq      uint64
	pending  []record.Summary
	series   []journalSeries
}

type journalSeries struct {
	key        seriesKey
	emittedEnd int64
	windows    []window
}

var errJournalCorrupt = errors.New("aggregate: journal corrupt")

// encodeJournal appends the journal of o's state (the open windows) with
// pending and seq to dst.
func (o *Output) encodeJournal(dst []byte, seq uint64, pending []record.Summary) []byte {
	le := binary.LittleEndian
	dst = append(dst, journalMagic...)
	dst = le.AppendUint32(dst, journalVersion)
	dst = le.AppendUint64(dst, uint64(o.interval))
	dst = le.AppendUint64(dst, seq)
	// The metric names used, by ID.
	var ids []catalog.MetricID
	for _, s := range pending {
		ids = append(ids, s.Metric)
	}
	keys := make([]seriesKey, 0, len(o.series))
	for k, sr := range o.series {
		if len(sr.open) > 0 || sr.emittedEnd != -1<<63 {
			keys = append(keys, k)
			ids = append(ids, k.metric)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	dst = le.AppendUint32(dst, uint32(len(ids)))
	for _, id := range ids {
		name := ""
		if m, ok := o.opts.Catalog.Get(id); ok {
			name = m.Name
		}
		dst = le.AppendUint16(dst, uint16(id))
		dst = le.AppendUint16(dst, uint16(len(name)))
		dst = append(dst, name...)
	}
	dst = le.AppendUint32(dst, uint32(len(pending)))
	for _, s := range pending {
		dst = le.AppendUint64(dst, uint64(s.StartNS))
		dst = le.AppendUint64(dst, uint64(s.IntervalNS))
		for _, f := range []float64{s.Mean, s.Min, s.Max, s.Last} {
			dst = le.AppendUint64(dst, math.Float64bits(f))
		}
		dst = le.AppendUint32(dst, s.Count)
		dst = le.AppendUint16(dst, s.Device)
		dst = le.AppendUint16(dst, uint16(s.Metric))
	}
	slices.SortFunc(keys, func(a, b seriesKey) int {
		if a.dev != b.dev {
			return int(a.dev) - int(b.dev)
		}
		return int(a.metric) - int(b.metric)
	})
	dst = le.AppendUint32(dst, uint32(len(keys)))
	for _, k := range keys {
		sr := o.series[k]
		dst = le.AppendUint16(dst, k.dev)
		dst = le.AppendUint16(dst, uint16(k.metric))
		dst = le.AppendUint64(dst, uint64(sr.emittedEnd))
		dst = le.AppendUint32(dst, uint32(len(sr.open)))
		for _, w := range sr.open {
			dst = le.AppendUint64(dst, uint64(w.start))
			dst = le.AppendUint64(dst, w.acc.Count)
			for _, f := range []float64{w.acc.Sum, w.acc.Min, w.acc.Max, w.acc.Last} {
				dst = le.AppendUint64(dst, math.Float64bits(f))
			}
			dst = le.AppendUint64(dst, uint64(w.acc.LastT))
		}
	}
	return le.AppendUint32(dst, crc32.Checksum(dst, castagnoli))
}

// journalReader reads a journal's fields; a read past the end marks it
// short.
type journalReader struct {
	data  []byte
	short bool
}

func (r *journalReader) next(n int) []byte {
	if r.short || len(r.data) < n {
		r.short = true
		return make([]byte, n)
	}
	b := r.data[:n]
	r.data = r.data[n:]
	return b
}

func (r *journalReader) u16() uint16  { return binary.LittleEndian.Uint16(r.next(2)) }
func (r *journalReader) u32() uint32  { return binary.LittleEndian.Uint32(r.next(4)) }
func (r *journalReader) u64() uint64  { return binary.LittleEndian.Uint64(r.next(8)) }
func (r *journalReader) i64() int64   { return int64(r.u64()) }
func (r *journalReader) f64() float64 { return math.Float64frombits(r.u64()) }

// count reads a count of entries at least size bytes each, refusing one
// the rest of the data cannot hold.
func (r *journalReader) count(size int) int {
	n := int(r.u32())
	if n*size > len(r.data) {
		r.short = true
		return 0
	}
	return n
}

// decodeJournal parses a journal, mapping its metric names onto cat;
// unknown counts the entries (pending summaries and open windows) of
// metrics cat does not have, which are left out.
func decodeJournal(data []byte, cat *catalog.Catalog) (j journalState, unknown int, err error) {
	if len(data) < len(journalMagic)+8 || string(data[:len(journalMagic)]) != journalMagic {
		return j, 0, errJournalCorrupt
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return j, 0, errJournalCorrupt
	}
	r := &journalReader{data: body[len(journalMagic):]}
	if v := r.u32(); v != journalVersion {
		return j, 0, fmt.Errorf("aggregate: journal version %d: this version reads %d", v, journalVersion)
	}
	j.interval, j.seq = r.i64(), r.u64()
	ids := map[uint16]catalog.MetricID{}
	for range r.count(4) {
		id, n := r.u16(), int(r.u16())
		if m, ok := cat.Lookup(string(r.next(n))); ok {
			ids[id] = m.ID
		}
	}
	for range r.count(52) {
		s := record.Summary{StartNS: r.i64(), IntervalNS: r.i64(), Mean: r.f64(), Min: r.f64(), Max: r.f64(), Last: r.f64(),
			Count: r.u32(), Device: r.u16()}
		id, ok := ids[r.u16()]
		if !ok {
			unknown++
			continue
		}
		s.Metric = id
		j.pending = append(j.pending, s)
	}
	for range r.count(16) {
		dev, mid, end := r.u16(), r.u16(), r.i64()
		id, known := ids[mid]
		sr := journalSeries{key: seriesKey{dev, id}, emittedEnd: end}
		for range r.count(56) {
			w := window{start: r.i64()}
			w.acc = accum.Window{Stats: accum.Stats{Count: r.u64(), Sum: r.f64(), Min: r.f64(), Max: r.f64()}, Last: r.f64(), LastT: r.i64()}
			sr.windows = append(sr.windows, w)
		}
		if !known {
			unknown += len(sr.windows)
			continue
		}
		j.series = append(j.series, sr)
	}
	if r.short || len(r.data) != 0 {
		return journalState{}, 0, errJournalCorrupt
	}
	return j, unknown, nil
}

// saveJournal rewrites the journal: the open windows, pending (the
// summaries of the batch about to be written) and that batch's seq. It does
// nothing without a journal, or when neither the windows nor pending
// changed since the last one.
func (o *Output) saveJournal(seq uint64, pending []record.Summary) {
	if o.opts.Journal == "" || (!o.jDirty && len(pending) == 0 && !o.jPending) {
		return
	}
	o.jBuf = o.encodeJournal(o.jBuf[:0], seq, pending)
	if err := atomicfile.WriteFile(o.opts.Journal, o.jBuf, 0o600); err != nil {
		o.journalErrors.Add(1)
		if now := o.opts.Now(); o.lastJournalLog.IsZero() || now.Sub(o.lastJournalLog) >= time.Minute {
			o.lastJournalLog = now
			o.opts.Logger.Error("aggregate journal not written: a crash now would lose the open windows uncounted",
				"file", o.opts.Journal, "err", err)
		}
		return
	}
	o.jDirty, o.jPending = false, len(pending) > 0
}

// loadJournal takes up what the journal of an earlier process holds. Entries
// it cannot take up (a corrupt journal, metrics the catalog lacks) are
// logged; their number is counted as dropped where it is known.
func (o *Output) loadJournal() error {
	data, err := os.ReadFile(o.opts.Journal)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("aggregate: read journal: %w", err)
	}
	j, unknown, err := decodeJournal(data, o.opts.Catalog)
	if err != nil {
		o.opts.Logger.Error("aggregate journal unreadable; the windows open at the last crash are lost",
			"file", o.opts.Journal, "err", err)
		return os.Remove(o.opts.Journal)
	}
	if unknown > 0 {
		o.dropped.Add(uint64(unknown))
		o.opts.Logger.Warn("aggregate journal holds windows of metrics this catalog does not have; dropped",
			"file", o.opts.Journal, "windows", unknown)
	}
	o.seq = j.seq
	if len(j.pending) > 0 {
		appended := false
		if o.opts.LastAppended != nil {
			seq, ok := o.opts.LastAppended()
			appended = ok && seq == j.seq
		}
		if !appended {
			o.closed = append(o.closed, j.pending...)
			o.recovered.Add(uint64(len(j.pending)))
		}
	}
	for _, js := range j.series {
		if j.interval != o.interval {
			// Another interval: the windows go on as they are, closed.
			for _, w := range js.windows {
				o.closed = append(o.closed, summaryOf(&w.acc, w.start, j.interval, js.key))
				o.recovered.Add(1)
			}
			continue
		}
		sr := &series{emittedEnd: js.emittedEnd}
		for _, w := range js.windows {
			nw := o.newWindow(w.start)
			nw.acc = w.acc
			nw.noHist = true // the journal keeps no buckets
			sr.open = append(sr.open, nw)
		}
		o.series[js.key] = sr
		o.recovered.Add(uint64(len(js.windows)))
	}
	o.jDirty = true
	return nil
}
