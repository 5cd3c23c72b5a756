package aggregate_test

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/record"
)

// histOnlyPower selects power_draw, scaled by 1000 (W to mW), as an output
// would ask for a unit of its own.
func histOnlyPower(m catalog.Metric) (float64, bool) {
	return 1000, m.ID == catalog.MetricPowerDraw
}

// TestWindowHistogramEqualsDirectBinning: with Histograms, every window of
// a selected metric carries the histogram of its samples' scaled values —
// each value binned straight at the histogram's final scale gives the same
// buckets — and the other metrics carry none.
func TestWindowHistogramEqualsDirectBinning(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := int64(1_700_000_000) * int64(time.Second)
	interval := int64(time.Second)
	var all []record.Sample
	for i := range 400 {
		tm := base + int64(i)*int64(25*time.Millisecond)
		v := rng.Float64() * 700
		switch i % 37 {
		case 0:
			v = 0 // zeros are counted apart
		case 1:
			v = -rng.Float64() // a negative reading
		case 2:
			v = rng.Float64() * 1e6 // a spike that forces a coarser scale
		}
		all = append(all, record.Sample{TimeNS: tm, Value: v, Device: uint16(i % 2), Metric: catalog.MetricPowerDraw},
			record.Sample{TimeNS: tm, Value: v, Device: uint16(i % 2), Metric: catalog.MetricUtilGPU})
	}
	inner := &collect{}
	now := time.Unix(0, base)
	agg, err := aggregate.New(inner, aggregate.Options{Interval: time.Second, Now: func() time.Time { return now },
		Histograms: histOnlyPower})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(all); i += 13 {
		if err := agg.Write(context.Background(), &record.Batch{Samples: all[i:min(i+13, len(all))]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := agg.Close(); err != nil {
		t.Fatal(err)
	}
	values := map[key][]float64{}
	for _, s := range all {
		k := key{s.Device, s.Metric, s.TimeNS - s.TimeNS%interval}
		values[k] = append(values[k], s.Value*1000)
	}
	var withHist int
	for _, got := range inner.sums {
		if got.Metric != catalog.MetricPowerDraw {
			if got.Hist != nil {
				t.Errorf("%v carries a histogram, not asked for", got.Metric)
			}
			continue
		}
		h := got.Hist
		if h == nil {
			t.Fatalf("window %d dev %d: no histogram", got.StartNS, got.Device)
		}
		withHist++
		vs := values[key{got.Device, got.Metric, got.StartNS}]
		var zeros uint64
		pos, neg := map[int32]uint64{}, map[int32]uint64{}
		for _, v := range vs {
			switch {
			case v == 0:
				zeros++
			case v > 0:
				pos[accum.ExpIndex(v, h.Scale)]++
			default:
				neg[accum.ExpIndex(-v, h.Scale)]++
			}
		}
		if h.ZeroCount != zeros || !sameBuckets(h.PositiveOffset, h.Positive, pos) ||
			!sameBuckets(h.NegativeOffset, h.Negative, neg) {
			t.Errorf("window %d dev %d: histogram %+v, direct binning at scale %d: zeros %d pos %v neg %v",
				got.StartNS, got.Device, *h, h.Scale, zeros, pos, neg)
		}
		if n := count(h); n != uint64(got.Count) || n != uint64(len(vs)) {
			t.Errorf("window %d: histogram counts %d, summary %d, samples %d", got.StartNS, n, got.Count, len(vs))
		}
		if len(h.Positive) > accum.DefaultExpSize || h.Scale > accum.MaxExpScale {
			t.Errorf("window %d: %d buckets at scale %d", got.StartNS, len(h.Positive), h.Scale)
		}
	}
	if withHist == 0 {
		t.Fatal("no window of power_draw")
	}
}

func sameBuckets(off int32, counts []uint64, want map[int32]uint64) bool {
	n := 0
	for i, c := range counts {
		if c != want[off+int32(i)] {
			return false
		}
		if c > 0 {
			n++
		}
	}
	return n == len(want)
}

func count(h *record.ExpHistogram) uint64 {
	n := h.ZeroCount
	for _, c := range h.Positive {
		n += c
	}
	for _, c := range h.Negative {
		n += c
	}
	return n
}

// TestWindowHistogramAcrossCrashAndNonFinite: a window taken up from the
// journal after a crash goes on with its buckets (and its NaN count), so
// its histogram is that of every sample, before and after the crash; a
// NaN or infinite sample is in the summary's count and the histogram's
// NonFinite, in no bucket, and counted (aggregate_unbinned); a window of
// NaN samples only still carries a histogram, without buckets.
func TestWindowHistogramAcrossCrashAndNonFinite(t *testing.T) {
	base := time.Unix(1_800_000_000, 0).UnixNano()
	journal := filepath.Join(t.TempDir(), "aggregate.journal")
	c := &collect{}
	opts := aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal, Histograms: histOnlyPower}
	ag, err := aggregate.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	s := func(ms int64, v float64) record.Sample {
		return record.Sample{TimeNS: base + ms*int64(time.Millisecond), Value: v, Metric: catalog.MetricPowerDraw}
	}
	if err := ag.Write(context.Background(), &record.Batch{Seq: 1, Samples: []record.Sample{s(100, 50), s(600, 60), s(700, math.NaN())}}); err != nil {
		t.Fatal(err)
	}
	// Crash: ag is abandoned with the window [0s, 1s) open.
	opts.LastAppended = func() (uint64, bool) { return uint64(c.writes), true }
	ag2, err := aggregate.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	batch := []record.Sample{s(900, 70), s(1100, 80), s(1500, math.Inf(1)), s(2100, 90), s(3000, 1), s(4100, math.NaN())}
	if err := ag2.Write(context.Background(), &record.Batch{Seq: 2, Samples: batch}); err != nil {
		t.Fatal(err)
	}
	if err := ag2.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ag2.Stats().Unbinned; n != 2 {
		t.Errorf("Unbinned %d, want 2 (the infinite and the NaN sample after the crash)", n)
	}
	want := map[int64]struct {
		values    []float64 // finite, ×1000
		nonFinite uint64
	}{0: {[]float64{50e3, 60e3, 70e3}, 1}, 1: {[]float64{80e3}, 1}, 2: {[]float64{90e3}, 0}, 3: {[]float64{1e3}, 0}, 4: {nil, 1}}
	seen := map[int64]bool{}
	for _, sum := range c.sums {
		w := (sum.StartNS - base) / int64(time.Second)
		seen[w] = true
		exp, ok := want[w]
		h := sum.Hist
		if !ok || h == nil {
			t.Errorf("window %ds: histogram %+v", w, h)
			continue
		}
		pos := map[int32]uint64{}
		for _, v := range exp.values {
			pos[accum.ExpIndex(v, h.Scale)]++
		}
		if h.ZeroCount != 0 || len(h.Negative) != 0 || !sameBuckets(h.PositiveOffset, h.Positive, pos) ||
			h.NonFinite != exp.nonFinite || uint64(sum.Count) != uint64(len(exp.values))+exp.nonFinite {
			t.Errorf("window %ds: count %d, histogram %+v; want buckets %v at scale %d, %d non-finite",
				w, sum.Count, *h, pos, h.Scale, exp.nonFinite)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("windows emitted %v, want %d", seen, len(want))
	}
}
