package aggregate

import (
	"encoding/binary"
	"math"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/record"
)

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

// decodeJournalV1 parses the body (after magic and version, before the
// checksum) of a version 1 journal, the format before version 2, so that a
// journal an older release left is taken up once. Its layout
// (little-endian): interval i64 | seq u64 | names: n u32, then (id u16,
// len u16, name) each | pending: n u32, then per summary start i64,
// interval i64, mean, min, max, last f64, count u32, device u16, metric
// u16 | series: n u32, then per series device u16, metric u16, emittedEnd
// i64, windows u32, then per window start i64, count u64, sum, min, max,
// last f64, lastT i64.
func decodeJournalV1(body []byte, cat *catalog.Catalog) (j journalState, unknown int, err error) {
	r := &journalReader{data: body}
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
			w := window{start: r.i64(), noHist: true} // version 1 kept no buckets
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
