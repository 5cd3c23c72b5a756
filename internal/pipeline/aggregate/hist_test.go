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

// TestWindowHistogramNotRestoredOrPartial: a window taken up from the
// journal after a crash, and a window with a NaN sample, carry no
// histogram (their buckets would not hold every sample); the others do.
func TestWindowHistogramNotRestoredOrPartial(t *testing.T) {
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
	if err := ag.Write(context.Background(), &record.Batch{Seq: 1, Samples: []record.Sample{s(100, 50), s(600, 60)}}); err != nil {
		t.Fatal(err)
	}
	// Crash: ag is abandoned with the window [0s, 1s) open.
	opts.LastAppended = func() (uint64, bool) { return uint64(c.writes), true }
	ag2, err := aggregate.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	batch := []record.Sample{s(900, 70), s(1100, 80), s(1500, math.NaN()), s(2100, 90), s(3000, 1)}
	if err := ag2.Write(context.Background(), &record.Batch{Seq: 2, Samples: batch}); err != nil {
		t.Fatal(err)
	}
	if err := ag2.Close(); err != nil {
		t.Fatal(err)
	}
	hists := map[int64]bool{}
	for _, sum := range c.sums {
		hists[(sum.StartNS-base)/int64(time.Second)] = sum.Hist != nil
	}
	want := map[int64]bool{0: false, 1: false, 2: true, 3: true}
	for w, has := range want {
		if got, ok := hists[w]; !ok || got != has {
			t.Errorf("window %ds: histogram %v (emitted %v), want %v", w, got, ok, has)
		}
	}
}
