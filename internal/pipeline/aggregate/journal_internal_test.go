package aggregate

import (
	"encoding/binary"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/record"
)

// TestJournalRoundTrip: every field of the pending summaries and of the
// open windows with their histograms (buckets, NaN samples only, none:
// the metric has no histogram, or the window came from a journal without
// buckets) and a series with none open, kept for its emittedEnd, comes
// back from the journal as it went in.
func TestJournalRoundTrip(t *testing.T) {
	o, err := New(nil, Options{Interval: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	win := func(start int64, n uint64, sum, lo, hi, last float64, lastT int64) window {
		return window{start: start, acc: accum.Window{Stats: accum.Stats{Count: n, Sum: sum, Min: lo, Max: hi}, Last: last, LastT: lastT}}
	}
	var h accum.ExpHistogram
	h.Restore(-3, 2, accum.ExpBuckets{Offset: -7, Counts: []uint64{1, 0, 4}}, accum.ExpBuckets{Offset: 12, Counts: []uint64{9}})
	withHist := win(1_800_000_000_000_000_000, 3, 7.5, -1, 5.5, 3, 1_800_000_000_900_000_000)
	withHist.hist, withHist.nonFinite = h, 1
	nanOnly := win(1_800_000_003_000_000_000, math.MaxUint64, math.MaxFloat64, -math.MaxFloat64, 1e-300, -0.0, -1)
	nanOnly.nonFinite = 2
	noHist := win(-9, 1, 2, 2, 2, 2, -8)
	noHist.noHist = true
	want := journalState{interval: int64(3 * time.Second), seq: 1<<40 + 7,
		pending: []record.Summary{
			{StartNS: -5, IntervalNS: 11, Mean: 1.25, Min: -2.5, Max: 9e300, Last: math.Inf(-1), Count: math.MaxUint32, Device: math.MaxUint16, Metric: 81},
			{StartNS: 1 << 62, IntervalNS: 3, Mean: -0.1, Min: -0.2, Max: 0.3, Last: 0.4, Count: 1, Device: 0, Metric: 1},
			{StartNS: 7, IntervalNS: 3, Mean: 1.5, Min: 1, Max: 2, Last: 2, Count: 3, Device: 2, Metric: 6,
				Hist: &record.ExpHistogram{Scale: 2, ZeroCount: 1, PositiveOffset: 3, Positive: []uint64{1}, NonFinite: 1}},
		},
		series: []journalSeries{
			{key: seriesKey{0, 6}, emittedEnd: 1_800_000_000_000_000_000,
				windows: []window{withHist, nanOnly}},
			{key: seriesKey{7, 22}, emittedEnd: -1 << 63, windows: []window{noHist}},
			{key: seriesKey{math.MaxUint16, 81}, emittedEnd: 42}, // nothing open
		}}
	for _, js := range want.series {
		sr := &series{emittedEnd: js.emittedEnd}
		for i := range js.windows {
			sr.open = append(sr.open, &js.windows[i])
		}
		o.series[js.key] = sr
	}
	data, err := o.encodeJournal(nil, want.seq, want.pending)
	if err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint32(data[4:]); v != journalVersion {
		t.Fatalf("journal written as version %d, want %d", v, journalVersion)
	}
	got, unknown, err := decodeJournal(data, catalog.Default())
	if err != nil || unknown != 0 {
		t.Fatalf("decode: unknown %d, err %v", unknown, err)
	}
	if len(got.series) == 3 && len(got.series[2].windows) == 0 {
		got.series[2].windows = nil // decoded as empty, not nil
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
}
