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

	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/internal/atomicfile"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
)

// The journal keeps what a process crash would otherwise lose: the open
// windows (whose samples the pump has handed on and will not send again),
// the summaries being handed to the wrapped output with the Seq of the
// batch that carries them (pending), and the summaries of windows that
// closed while that batch waited to be offered again (closed). It is rewritten (a new file renamed over the
// old, one rename: a process crash leaves the old or the new one whole)
// before every write to the wrapped output, and removed when Close has
// handed on every window.
//
// A new wrapper on the same file takes the open windows up and hands the
// pending summaries on again unless Options.LastAppended says that the
// batch with that Seq reached the wrapped output before the crash, and the
// closed ones in any case; its batches go on from that Seq. The metric of every entry is mapped by name (the names of
// the writer's metrics are in the journal), so that a catalog that renumbers metrics
// never relabels a journaled window.
//
// A window's histogram (Options.Histograms) is kept with it, so that the
// windows taken up go on with their buckets; a journal written before
// they were kept has none (its windows then carry no histogram).
//
// Format: "GSAJ" | version u32 (little-endian) | body | CRC32C u32
// (little-endian) of all before. Version 2's body is one
// recordpb.AggregateJournal (record/recordpb/records.proto). Version 1
// (a hand-written layout, see journal_v1.go) is still read, so that a
// journal left by an older release is taken up once; the next write is
// version 2.
const (
	journalMagic   = "GSAJ"
	journalVersion = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// journalState is a journal's content.
type journalState struct {
	interval int64
	seq      uint64
	pending  []record.Summary
	closed   []record.Summary
	series   []journalSeries
}

type journalSeries struct {
	key        seriesKey
	emittedEnd int64
	windows    []window
}

var errJournalCorrupt = errors.New("aggregate: journal corrupt")

// journalMarshal is deterministic so that equal states encode to equal
// bytes.
var journalMarshal = proto.MarshalOptions{Deterministic: true}

// encodeJournal appends the journal of o's state (the open windows and the
// closed summaries) with pending and seq to dst.
func (o *Output) encodeJournal(dst []byte, seq uint64, pending []record.Summary) ([]byte, error) {
	keys := make([]seriesKey, 0, len(o.series))
	for k, sr := range o.series {
		if len(sr.open) > 0 || sr.emittedEnd != -1<<63 {
			keys = append(keys, k)
		}
	}
	// metric_names as recordpb.MetricNames has them, but only the names of
	// the metrics used: "" (which names no metric) for the rest keeps the
	// file small.
	names := o.jNames[:0]
	use := func(id catalog.MetricID) {
		for len(names) < int(id) {
			names = append(names, "")
		}
		if id > 0 && names[id-1] == "" {
			if mt, ok := o.opts.Catalog.Get(id); ok {
				names[id-1] = mt.Name
			}
		}
	}
	for _, s := range pending {
		use(s.Metric)
	}
	for _, s := range o.closed {
		use(s.Metric)
	}
	for _, k := range keys {
		use(k.metric)
	}
	o.jNames = names
	m := &recordpb.AggregateJournal{IntervalNs: o.interval, Seq: seq, MetricNames: names,
		Pending: recordpb.FromSummaries(pending), Closed: recordpb.FromSummaries(o.closed)}
	slices.SortFunc(keys, func(a, b seriesKey) int {
		if a.dev != b.dev {
			return int(a.dev) - int(b.dev)
		}
		return int(a.metric) - int(b.metric)
	})
	m.Series = make([]*recordpb.AggregateSeries, len(keys))
	for i, k := range keys {
		sr := o.series[k]
		n := len(sr.open)
		ps := &recordpb.AggregateSeries{Device: uint32(k.dev), Metric: uint32(k.metric), EmittedEndNs: sr.emittedEnd,
			StartNs: make([]int64, n), Count: make([]uint64, n), Sum: make([]float64, n), Min: make([]float64, n),
			Max: make([]float64, n), Last: make([]float64, n), LastNs: make([]int64, n)}
		var hs []*record.ExpHistogram
		for j, w := range sr.open {
			ps.StartNs[j], ps.Count[j], ps.Sum[j], ps.Min[j] = w.start, w.acc.Count, w.acc.Sum, w.acc.Min
			ps.Max[j], ps.Last[j], ps.LastNs[j] = w.acc.Max, w.acc.Last, w.acc.LastT
			if h := w.histogram(); h != nil {
				if hs == nil {
					hs = make([]*record.ExpHistogram, n)
				}
				hs[j] = h
			}
		}
		if hs != nil {
			ps.SetHists(hs)
		}
		m.Series[i] = ps
	}
	le := binary.LittleEndian
	dst = append(dst, journalMagic...)
	dst = le.AppendUint32(dst, journalVersion)
	dst, err := journalMarshal.MarshalAppend(dst, m)
	if err != nil {
		return dst, fmt.Errorf("encode journal: %w", err)
	}
	return le.AppendUint32(dst, crc32.Checksum(dst, castagnoli)), nil
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
	body = body[len(journalMagic):]
	switch v := binary.LittleEndian.Uint32(body); v {
	case 1:
		return decodeJournalV1(body[4:], cat)
	case journalVersion:
		j, unknown, err = decodeJournalPB(body[4:], cat)
		if err != nil {
			return journalState{}, 0, fmt.Errorf("%w: %w", errJournalCorrupt, err)
		}
		return j, unknown, nil
	default:
		return j, 0, fmt.Errorf("aggregate: journal version %d: this version reads 1 and %d", v, journalVersion)
	}
}

// decodeJournalPB parses a version 2 body.
func decodeJournalPB(body []byte, cat *catalog.Catalog) (j journalState, unknown int, err error) {
	var m recordpb.AggregateJournal
	if err := proto.Unmarshal(body, &m); err != nil {
		return j, 0, err
	}
	j.interval, j.seq = m.GetIntervalNs(), m.GetSeq()
	ids, _ := recordpb.MetricMap(m.GetMetricNames(), cat)
	mapID := func(id uint32) (catalog.MetricID, bool) {
		if int64(id) >= int64(len(ids)) || ids[id] == 0 {
			return 0, false
		}
		return ids[id], true
	}
	pending, err := m.GetPending().AppendTo(nil)
	if err != nil {
		return j, 0, err
	}
	for _, s := range pending {
		id, ok := mapID(uint32(s.Metric))
		if !ok {
			unknown++
			continue
		}
		s.Metric = id
		j.pending = append(j.pending, s)
	}
	closed, err := m.GetClosed().AppendTo(nil)
	if err != nil {
		return j, 0, err
	}
	for _, s := range closed {
		id, ok := mapID(uint32(s.Metric))
		if !ok {
			unknown++
			continue
		}
		s.Metric = id
		j.closed = append(j.closed, s)
	}
	for i, ps := range m.GetSeries() {
		n := len(ps.GetStartNs())
		if len(ps.GetCount()) != n || len(ps.GetSum()) != n || len(ps.GetMin()) != n || len(ps.GetMax()) != n ||
			len(ps.GetLast()) != n || len(ps.GetLastNs()) != n {
			return journalState{}, 0, fmt.Errorf("series %d: window columns differ in length", i)
		}
		if ps.GetDevice() > math.MaxUint16 {
			return journalState{}, 0, fmt.Errorf("series %d: device %d out of range (max 65535)", i, ps.GetDevice())
		}
		hs, err := ps.Hists()
		if err != nil {
			return journalState{}, 0, fmt.Errorf("series %d: %w", i, err)
		}
		id, known := mapID(ps.GetMetric())
		if !known {
			unknown += n
			continue
		}
		sr := journalSeries{key: seriesKey{uint16(ps.GetDevice()), id}, emittedEnd: ps.GetEmittedEndNs(),
			windows: make([]window, n)}
		for w := range n {
			sr.windows[w] = window{start: ps.StartNs[w], acc: accum.Window{Stats: accum.Stats{Count: ps.Count[w],
				Sum: ps.Sum[w], Min: ps.Min[w], Max: ps.Max[w]}, Last: ps.Last[w], LastT: ps.LastNs[w]}, noHist: true}
			if hs != nil && hs[w] != nil {
				h := hs[w]
				sr.windows[w].noHist, sr.windows[w].nonFinite = false, h.NonFinite
				sr.windows[w].hist.Restore(h.Scale, h.ZeroCount, accum.ExpBuckets{Offset: h.PositiveOffset, Counts: h.Positive},
					accum.ExpBuckets{Offset: h.NegativeOffset, Counts: h.Negative})
			}
		}
		j.series = append(j.series, sr)
	}
	return j, unknown, nil
}

// saveJournal rewrites the journal: the open windows, the closed
// summaries, pending (the summaries of the batch about to be written) and
// that batch's seq. It does nothing without a journal, or when neither the
// windows nor pending changed since the last one.
func (o *Output) saveJournal(seq uint64, pending []record.Summary) {
	if o.opts.Journal == "" || (!o.jDirty && len(pending) == 0 && !o.jPending) {
		return
	}
	var err error
	if o.jBuf, err = o.encodeJournal(o.jBuf[:0], seq, pending); err == nil {
		err = atomicfile.WriteFile(o.opts.Journal, o.jBuf, 0o600)
	}
	if err != nil {
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
	o.closed = append(o.closed, j.closed...)
	o.recovered.Add(uint64(len(j.closed)))
	for _, js := range j.series {
		if j.interval != o.interval {
			// Another interval: the windows go on as they are, closed.
			for _, w := range js.windows {
				sum := summaryOf(&w.acc, w.start, j.interval, js.key)
				sum.Hist = w.histogram()
				o.closed = append(o.closed, sum)
				o.recovered.Add(1)
			}
			continue
		}
		sr := &series{emittedEnd: js.emittedEnd}
		for _, w := range js.windows {
			nw := o.newWindow(w.start)
			nw.acc, nw.hist, nw.nonFinite, nw.noHist = w.acc, w.hist, w.nonFinite, w.noHist
			if !o.histOf(js.key.metric).ok {
				// the output no longer asks for this metric's histogram
				nw.hist, nw.nonFinite, nw.noHist = accum.ExpHistogram{}, 0, true
			}
			sr.open = append(sr.open, nw)
		}
		o.series[js.key] = sr
		o.recovered.Add(uint64(len(js.windows)))
	}
	o.jDirty = true
	return nil
}
