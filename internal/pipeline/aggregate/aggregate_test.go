package aggregate_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/record"
)

// collect is an inner output that keeps copies of what it is given.
type collect struct {
	sums   []record.Summary
	devs   []record.Device
	events []record.Event
	writes int
	closed bool
}

func (c *collect) Write(_ context.Context, b *record.Batch) error {
	c.writes++
	c.sums = append(c.sums, b.Summaries...)
	c.devs = append(c.devs, b.Devices...)
	for _, e := range b.Events {
		c.events = append(c.events, e.Clone())
	}
	return nil
}

func (c *collect) Close() error { c.closed = true; return nil }

type key struct {
	dev    uint16
	metric catalog.MetricID
	start  int64
}

// direct computes the summaries straight from the samples.
func direct(samples []record.Sample, interval int64) map[key]record.Summary {
	out := map[key]record.Summary{}
	for _, s := range samples {
		start := s.TimeNS - ((s.TimeNS%interval)+interval)%interval
		k := key{s.Device, s.Metric, start}
		sum, ok := out[k]
		if !ok {
			sum = record.Summary{StartNS: start, IntervalNS: interval, Min: math.Inf(1), Max: math.Inf(-1),
				Device: s.Device, Metric: s.Metric}
		}
		sum.Mean += s.Value // running sum; divided below
		sum.Min, sum.Max = min(sum.Min, s.Value), max(sum.Max, s.Value)
		sum.Last = s.Value // samples are in time order per series
		sum.Count++
		out[k] = sum
	}
	for k, s := range out {
		s.Mean /= float64(s.Count)
		out[k] = s
	}
	return out
}

func TestWindowsMatchDirectComputation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
		period   time.Duration // per-series sample spacing (jittered)
		batch    int
	}{
		{"1s windows, 10Hz, small batches", time.Second, 100 * time.Millisecond, 7},
		{"250ms windows, 50ms, one big batch", 250 * time.Millisecond, 50 * time.Millisecond, 100000},
		{"window smaller than spacing", 10 * time.Millisecond, 35 * time.Millisecond, 3},
		{"negative-free edges exactly on boundary", time.Second, 250 * time.Millisecond, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.interval)))
			base := int64(1_700_000_000) * int64(time.Second)
			var all []record.Sample
			// Two devices × two metrics, each series in time order; series
			// interleave in publish order like device loops' batches.
			for dev := uint16(0); dev < 2; dev++ {
				for _, m := range []catalog.MetricID{catalog.MetricPowerDraw, catalog.MetricUtilGPU} {
					tm := base
					for range 200 {
						jit := int64(0)
						if tc.name != "negative-free edges exactly on boundary" {
							jit = rng.Int64N(int64(tc.period) / 2)
						}
						tm += int64(tc.period) + jit - int64(tc.period)/4
						all = append(all, record.Sample{TimeNS: tm, Value: rng.Float64() * 700, Device: dev, Metric: m})
					}
				}
			}
			// Publish order: per series stable, series interleaved by time.
			slices.SortStableFunc(all, func(a, b record.Sample) int {
				if a.TimeNS < b.TimeNS {
					return -1
				} else if a.TimeNS > b.TimeNS {
					return 1
				}
				return 0
			})
			inner := &collect{}
			now := time.Unix(0, base) // wall clock never passes MaxDelay
			agg, err := aggregate.New(inner, aggregate.Options{Interval: tc.interval, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; i < len(all); i += tc.batch {
				b := &record.Batch{Samples: slices.Clone(all[i:min(i+tc.batch, len(all))])}
				if err := agg.Write(ctx, b); err != nil {
					t.Fatal(err)
				}
				clear(b.Samples) // the wrapper must not retain the batch
			}
			if err := agg.Close(); err != nil {
				t.Fatal(err)
			}
			if !inner.closed {
				t.Error("inner output not closed")
			}
			want := direct(all, int64(tc.interval))
			if len(inner.sums) != len(want) {
				t.Fatalf("%d summaries, want %d", len(inner.sums), len(want))
			}
			var total uint32
			for _, got := range inner.sums {
				k := key{got.Device, got.Metric, got.StartNS}
				w, ok := want[k]
				if !ok {
					t.Fatalf("unexpected summary %+v", got)
				}
				delete(want, k)
				if got.StartNS%int64(tc.interval) != 0 {
					t.Errorf("window start %d not aligned", got.StartNS)
				}
				if got.Count != w.Count || got.Min != w.Min || got.Max != w.Max || got.Last != w.Last ||
					math.Abs(got.Mean-w.Mean) > 1e-9 || got.IntervalNS != int64(tc.interval) {
					t.Errorf("summary %+v\nwant    %+v", got, w)
				}
				total += got.Count
			}
			if int(total) != len(all) {
				t.Errorf("summaries count %d samples, fed %d", total, len(all))
			}
			if st := agg.Stats(); st.Late != 0 || st.Summarized != uint64(len(all)) {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestEdgeSampleBelongsToItsOwnWindow(t *testing.T) {
	inner := &collect{}
	agg, _ := aggregate.New(inner, aggregate.Options{Interval: time.Second, Now: func() time.Time { return time.Unix(0, 0) }})
	s := func(sec float64, v float64) record.Sample {
		return record.Sample{TimeNS: int64(sec * 1e9), Value: v, Metric: catalog.MetricPowerDraw}
	}
	// 0.999 belongs to [0,1); 1.000 exactly opens [1,2).
	_ = agg.Write(context.Background(), &record.Batch{Samples: []record.Sample{s(0.5, 10), s(0.999, 20), s(1.0, 30), s(1.5, 50)}})
	if len(inner.sums) != 1 {
		t.Fatalf("after the first sample of window 2: %d summaries, want 1", len(inner.sums))
	}
	_ = agg.Close()
	want := []record.Summary{
		{StartNS: 0, IntervalNS: 1e9, Mean: 15, Min: 10, Max: 20, Last: 20, Count: 2, Metric: catalog.MetricPowerDraw},
		{StartNS: 1e9, IntervalNS: 1e9, Mean: 40, Min: 30, Max: 50, Last: 50, Count: 2, Metric: catalog.MetricPowerDraw},
	}
	if !slices.Equal(inner.sums, want) {
		t.Errorf("summaries\n got %+v\nwant %+v", inner.sums, want)
	}
}

func TestLateSampleCountedNotMerged(t *testing.T) {
	inner := &collect{}
	agg, _ := aggregate.New(inner, aggregate.Options{Interval: time.Second, Now: func() time.Time { return time.Unix(0, 0) }})
	ctx := context.Background()
	_ = agg.Write(ctx, &record.Batch{Samples: []record.Sample{{TimeNS: 5e8, Value: 1}, {TimeNS: 15e8, Value: 2}}})
	_ = agg.Write(ctx, &record.Batch{Samples: []record.Sample{{TimeNS: 6e8, Value: 100}}}) // window 0 already out
	_ = agg.Close()
	if st := agg.Stats(); st.Late != 1 {
		t.Errorf("late = %d, want 1", st.Late)
	}
	if len(inner.sums) != 2 || inner.sums[0].Max != 1 || inner.sums[1].Max != 2 {
		t.Errorf("summaries %+v", inner.sums)
	}
}

func TestQuietSeriesClosedByWallClock(t *testing.T) {
	inner := &collect{}
	now := time.Unix(10, 0)
	agg, _ := aggregate.New(inner, aggregate.Options{Interval: time.Second, MaxDelay: time.Second,
		Now: func() time.Time { return now }})
	ctx := context.Background()
	_ = agg.Write(ctx, &record.Batch{Samples: []record.Sample{{TimeNS: 10e9 + 1, Value: 1}}})
	if len(inner.sums) != 0 {
		t.Fatal("window closed early")
	}
	now = time.Unix(12, 0) // window [10,11) ended 1s ago
	_ = agg.Write(ctx, &record.Batch{Devices: []record.Device{{Index: 0, UUID: "GPU-x"}},
		Events: []record.Event{{Kind: record.EventXID}}})
	if len(inner.sums) != 1 || inner.sums[0].StartNS != 10e9 {
		t.Fatalf("summaries %+v", inner.sums)
	}
	if len(inner.devs) != 1 || len(inner.events) != 1 {
		t.Errorf("devices/events not passed through: %v %v", inner.devs, inner.events)
	}
}

func TestWriteAfterClose(t *testing.T) {
	agg, _ := aggregate.New(&collect{}, aggregate.Options{Interval: time.Second})
	if err := agg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := agg.Write(context.Background(), &record.Batch{}); err != record.ErrClosed {
		t.Errorf("write after close = %v", err)
	}
	if err := agg.Close(); err != nil {
		t.Errorf("second close = %v", err)
	}
	if _, err := aggregate.New(&collect{}, aggregate.Options{}); err == nil {
		t.Error("zero interval accepted")
	}
}

// flaky refuses its first n writes with ErrUnavailable, then records.
type flaky struct {
	refuse int
	sums   []record.Summary
}

func (f *flaky) Write(_ context.Context, b *record.Batch) error {
	if f.refuse > 0 {
		f.refuse--
		return fmt.Errorf("plugin restarting: %w", record.ErrUnavailable)
	}
	f.sums = append(f.sums, b.Summaries...)
	return nil
}
func (f *flaky) Close() error { return nil }

// A batch the pump offers again after ErrUnavailable (same Seq) is not
// counted twice, and summaries the inner output refused are sent later.
func TestRetriedBatchNotDoubleCounted(t *testing.T) {
	inner := &flaky{refuse: 2}
	now := time.Unix(100, 0)
	o, err := aggregate.New(inner, aggregate.Options{Interval: time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mk := func(seq uint64, ts ...int64) *record.Batch {
		b := &record.Batch{Seq: seq}
		for _, x := range ts {
			b.Samples = append(b.Samples, record.Sample{TimeNS: x, Value: float64(x), Metric: catalog.MetricPowerDraw})
		}
		return b
	}
	// window [0,1s): two samples; the sample at 1.5 s closes it
	if err := o.Write(ctx, mk(1, 100e6, 200e6, 1500e6)); !errors.Is(err, record.ErrUnavailable) {
		t.Fatalf("first write: %v", err)
	}
	if err := o.Write(ctx, mk(1, 100e6, 200e6, 1500e6)); !errors.Is(err, record.ErrUnavailable) {
		t.Fatalf("retry: %v", err)
	}
	if err := o.Write(ctx, mk(1, 100e6, 200e6, 1500e6)); err != nil {
		t.Fatalf("second retry: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if len(inner.sums) != 2 {
		t.Fatalf("summaries %+v, want the two windows once each", inner.sums)
	}
	if s := inner.sums[0]; s.Count != 2 || s.StartNS != 0 || s.Min != 100e6 || s.Max != 200e6 {
		t.Fatalf("first window %+v, want count 2 of [100ms, 200ms]", s)
	}
	if s := inner.sums[1]; s.Count != 1 || s.StartNS != 1e9 {
		t.Fatalf("second window %+v, want the 1.5 s sample once", s)
	}
}

// refuser refuses its next writes with errs (one per write, in order),
// then records.
type refuser struct {
	errs []error
	sums []record.Summary
}

func (r *refuser) Write(_ context.Context, b *record.Batch) error {
	if len(r.errs) > 0 {
		err := r.errs[0]
		r.errs = r.errs[1:]
		return err
	}
	r.sums = append(r.sums, b.Summaries...)
	return nil
}
func (r *refuser) Close() error { return nil }

// The wrapper honours the inner output's error kind: summaries refused as
// permanent are dropped and counted at once, retryable ones are kept for
// RetryableOffers attempts and then dropped and counted; until the drop the
// kind reaches the pump unchanged (it offers the batch again), the drop
// itself is reported as taken (nil: counted here, not by the pump too), and
// later windows still arrive.
func TestErrorKindsHonoured(t *testing.T) {
	refused := errors.New("400: field type conflict")
	for _, tc := range []struct {
		name    string
		errs    []error
		dropped bool
	}{
		{"permanent", []error{record.Permanent(refused)}, true},
		{"retryable then accepted", []error{refused}, false},
		{"retryable every offer", slices.Repeat([]error{refused}, record.RetryableOffers), true},
		{"unavailable", slices.Repeat([]error{record.Unavailable(refused)}, record.RetryableOffers+2), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &refuser{errs: slices.Clone(tc.errs)}
			o, err := aggregate.New(inner, aggregate.Options{Interval: time.Second, Now: func() time.Time { return time.Unix(100, 0) }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			sample := func(ts int64) record.Sample {
				return record.Sample{TimeNS: ts, Value: float64(ts), Metric: catalog.MetricPowerDraw}
			}
			// the clock is far past both windows: the first write closes
			// them; the pump offers the batch again (same Seq) while it is
			// refused
			first := &record.Batch{Seq: 1, Samples: []record.Sample{sample(100e6), sample(1500e6)}}
			for i, want := range tc.errs {
				err := o.Write(ctx, first)
				if tc.dropped && i == len(tc.errs)-1 {
					// dropped and counted here: the pump must not count
					// the batch's samples as failed as well
					if err != nil {
						t.Fatalf("offer %d: %v, want nil once the summaries are dropped", i+1, err)
					}
					break
				}
				if record.Classify(err) != record.Classify(want) || !errors.Is(err, refused) {
					t.Fatalf("offer %d: %v, want %v", i+1, err, want)
				}
			}
			// the next batch's window goes through
			if err := o.Write(ctx, &record.Batch{Seq: 2, Samples: []record.Sample{sample(2500e6)}}); err != nil {
				t.Fatalf("next batch: %v", err)
			}
			want := []record.Summary{
				{StartNS: 0, IntervalNS: 1e9, Mean: 100e6, Min: 100e6, Max: 100e6, Last: 100e6, Count: 1, Metric: catalog.MetricPowerDraw},
				{StartNS: 1e9, IntervalNS: 1e9, Mean: 1500e6, Min: 1500e6, Max: 1500e6, Last: 1500e6, Count: 1, Metric: catalog.MetricPowerDraw},
				{StartNS: 2e9, IntervalNS: 1e9, Mean: 2500e6, Min: 2500e6, Max: 2500e6, Last: 2500e6, Count: 1, Metric: catalog.MetricPowerDraw},
			}
			var wantDropped uint64
			if tc.dropped {
				want, wantDropped = want[2:], 2
			}
			if !slices.Equal(inner.sums, want) {
				t.Fatalf("delivered %+v\nwant      %+v", inner.sums, want)
			}
			if st := o.Stats(); st.Dropped != wantDropped || st.Emitted != uint64(len(want)) || st.EventsDropped != 0 {
				t.Fatalf("stats %+v, want dropped %d emitted %d", st, wantDropped, len(want))
			}
		})
	}
}

// downUntil refuses every Write as unavailable until up is set, then
// collects.
type downUntil struct {
	collect
	up bool
}

func (d *downUntil) Write(ctx context.Context, b *record.Batch) error {
	if !d.up {
		return fmt.Errorf("sink down: %w", record.ErrUnavailable)
	}
	return d.collect.Write(ctx, b)
}

// Samples absorbed after a refused Write (what a stopping pump had not
// offered yet) are summarized with the written ones: Close emits every
// window they fall in, each exactly as computed from all the samples.
func TestAbsorbedSamplesSummarized(t *testing.T) {
	sec := int64(time.Second)
	base := int64(1_700_000_000) * sec
	var samples []record.Sample
	for i := range 40 {
		samples = append(samples, record.Sample{TimeNS: base + int64(i)*sec/10, Value: float64(i % 7),
			Device: uint16(i % 2), Metric: catalog.MetricPowerDraw})
	}
	inner := &downUntil{}
	ag, err := aggregate.New(inner, aggregate.Options{Interval: time.Second,
		Now: func() time.Time { return time.Unix(0, base) }})
	if err != nil {
		t.Fatal(err)
	}
	b := &record.Batch{Seq: 1, Samples: slices.Clone(samples[:15])}
	if err := ag.Write(context.Background(), b); err == nil {
		// The samples at 1s closed the first windows: their summaries were refused.
		t.Fatal("Write with the sink down: want an unavailable error")
	}
	var _ record.Absorber = ag
	ag.Absorb(slices.Clone(samples[15:]))
	inner.up = true
	if err := ag.Close(); err != nil {
		t.Fatal(err)
	}
	want := direct(samples, sec)
	got := map[key]record.Summary{}
	for _, s := range inner.sums {
		k := key{s.Device, s.Metric, s.StartNS}
		if _, dup := got[k]; dup {
			t.Fatalf("window %+v emitted twice", k)
		}
		got[k] = s
	}
	if len(got) != len(want) {
		t.Fatalf("%d summaries, want %d: %+v", len(got), len(want), inner.sums)
	}
	for k, w := range want {
		g := got[k]
		if g.Count != w.Count || g.Min != w.Min || g.Max != w.Max || g.Last != w.Last || math.Abs(g.Mean-w.Mean) > 1e-9 ||
			g.IntervalNS != w.IntervalNS {
			t.Errorf("window %+v: got %+v, want %+v", k, g, w)
		}
	}
	if st := ag.Stats(); st.Dropped != 0 || st.Summarized != uint64(len(samples)) || st.Emitted != uint64(len(want)) {
		t.Errorf("stats %+v", st)
	}
	// After Close nothing is taken.
	ag.Absorb(samples[:1])
	if st := ag.Stats(); st.Summarized != uint64(len(samples)) {
		t.Errorf("absorbed after Close: %+v", st)
	}
}
