package prometheus

import (
	"context"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// staleRig drives an output with the injected clock: tick writes one read
// of each metric given at the clock's time, then exposed says whether a
// device-0 series of family is on /metrics.
type staleRig struct {
	t   *testing.T
	o   *Output
	clk *clock
}

func newStaleRig(t *testing.T) *staleRig {
	o, clk := newTest(t, Options{Stale: 10 * time.Second})
	r := &staleRig{t: t, o: o, clk: clk}
	if err := o.Write(context.Background(), &record.Batch{Devices: devices(1)}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *staleRig) tick(ids ...catalog.MetricID) {
	r.t.Helper()
	b := &record.Batch{}
	for _, id := range ids {
		b.Samples = append(b.Samples, record.Sample{TimeNS: r.clk.Now().UnixNano(), Value: 1, Metric: id})
	}
	if err := r.o.Write(context.Background(), b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *staleRig) exposed(family string) bool {
	r.t.Helper()
	fams, err := r.o.Gatherer().Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == family {
			return len(f.Metric) > 0
		}
	}
	return false
}

// A metric read every rare_interval (30 s) beside one read every second
// stays exposed at every second of every cycle (it vanished for 20 s of
// each 30 s under one global stale = 10 s); once the engine stops reading
// it, it goes after twice its interval; once the device stops, everything
// goes after stale.
func TestRareMetricStaysTwiceItsInterval(t *testing.T) {
	r := newStaleRig(t)
	const limit = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"
	for sec := 0; sec < 150; sec++ {
		if sec%30 == 0 {
			r.tick(catalog.MetricTempGPU, catalog.MetricPowerLimit)
		} else {
			r.tick(catalog.MetricTempGPU)
		}
		if !r.exposed(limit) {
			t.Fatalf("second %d: %s missing while read every 30 s", sec, limit)
		}
		r.clk.Add(time.Second)
	}
	// The last read was at second 120; the clock is at 150. The engine
	// reads only the temperature from now on.
	for sec := 150; sec <= 180; sec++ {
		if !r.exposed(limit) {
			t.Fatalf("second %d: %s gone before twice its interval after its last read (120)", sec, limit)
		}
		r.tick(catalog.MetricTempGPU)
		r.clk.Add(time.Second)
	}
	r.tick(catalog.MetricTempGPU)
	if r.exposed(limit) {
		t.Fatalf("%s still exposed 61 s after its last read (interval 30 s)", limit)
	}
	if !r.exposed("DCGM_FI_DEV_GPU_TEMP") {
		t.Fatal("temperature, read every second, missing")
	}
	// The device stops: stale (10 s) bounds every series.
	r.clk.Add(11 * time.Second)
	if r.exposed("DCGM_FI_DEV_GPU_TEMP") || r.exposed("DCGM_FI_DEV_GPU_UTIL") {
		t.Fatal("series of a device silent for more than stale still exposed")
	}
	if m := find(scrape(t, r.o), nameUp, gpu(0)); m == nil || valueOf(m) != 0 {
		t.Fatalf("device_up = %v, want 0", m)
	}
}

// The interval is learned from the reads, not assumed: a metric the catalog
// does not mark Rare, read every 25 s, is bounded by stale until its second
// read shows its interval, then stays; a rare_interval set shorter than the
// engine's default is learned too.
func TestReadIntervalLearned(t *testing.T) {
	r := newStaleRig(t)
	const temp = "DCGM_FI_DEV_GPU_TEMP"
	r.tick(catalog.MetricTempGPU, catalog.MetricUtilGPU)
	r.clk.Add(11 * time.Second)
	r.tick(catalog.MetricUtilGPU)
	if r.exposed(temp) {
		t.Fatal("before its second read a metric not marked Rare is bounded by stale")
	}
	r.clk.Add(14 * time.Second) // second read, 25 s after the first
	for sec := 25; sec <= 100; sec++ {
		if sec%25 == 0 {
			r.tick(catalog.MetricTempGPU, catalog.MetricUtilGPU)
		} else {
			r.tick(catalog.MetricUtilGPU)
		}
		if !r.exposed(temp) {
			t.Fatalf("second %d: temperature read every 25 s missing", sec)
		}
		r.clk.Add(time.Second)
	}
	// Last read at 100, now 101: gone after 150.
	r.clk.Add(49 * time.Second)
	r.tick(catalog.MetricUtilGPU)
	if !r.exposed(temp) {
		t.Fatal("gone at 2x its interval after its last read")
	}
	r.clk.Add(time.Second)
	r.tick(catalog.MetricUtilGPU)
	if r.exposed(temp) {
		t.Fatal("still exposed past twice its interval")
	}

	// A Rare metric read every 6 s (rare_interval = "6s") is kept twice
	// 6 s after its newest read, not twice RarePrior.
	r.tick(catalog.MetricPowerLimit, catalog.MetricUtilGPU)
	r.clk.Add(6 * time.Second)
	r.tick(catalog.MetricPowerLimit, catalog.MetricUtilGPU)
	r.clk.Add(6 * time.Second)
	r.tick(catalog.MetricPowerLimit, catalog.MetricUtilGPU)
	r.clk.Add(10 * time.Second)
	r.tick(catalog.MetricUtilGPU)
	if !r.exposed("DCGM_FI_DEV_ENFORCED_POWER_LIMIT") {
		t.Fatal("power limit read every 6 s gone 10 s after its last read")
	}
	r.clk.Add(3 * time.Second)
	r.tick(catalog.MetricUtilGPU)
	if r.exposed("DCGM_FI_DEV_ENFORCED_POWER_LIMIT") {
		t.Fatal("power limit read every 6 s still exposed 13 s after its last read")
	}
}

// Two reads close together (a read right after a device came back) do not
// make a 30-s metric vanish for its next cycle.
func TestShortPairDoesNotHide(t *testing.T) {
	r := newStaleRig(t)
	const limit = "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"
	reads := map[int]bool{0: true, 30: true, 31: true, 61: true, 91: true}
	for sec := 0; sec <= 120; sec++ {
		if reads[sec] {
			r.tick(catalog.MetricTempGPU, catalog.MetricPowerLimit)
		} else {
			r.tick(catalog.MetricTempGPU)
		}
		if !r.exposed(limit) {
			t.Fatalf("second %d: %s missing", sec, limit)
		}
		r.clk.Add(time.Second)
	}
}

// Summaries of an aggregating wrapper: the first is kept for twice its
// window before the second shows the spacing.
func TestSummaryIntervalIsPrior(t *testing.T) {
	r := newStaleRig(t)
	win := int64(time.Minute)
	write := func(start int64) {
		b := &record.Batch{Summaries: []record.Summary{{StartNS: start, IntervalNS: win, Mean: 50, Min: 40, Max: 60, Last: 50, Count: 600, Metric: catalog.MetricTempGPU}},
			Samples: []record.Sample{{TimeNS: r.clk.Now().UnixNano(), Value: 1, Metric: catalog.MetricUtilGPU}}}
		if err := r.o.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	write(r.clk.Now().UnixNano() - win)
	for sec := 1; sec <= 120; sec++ {
		r.clk.Add(time.Second)
		r.tick(catalog.MetricUtilGPU)
		if !r.exposed("DCGM_FI_DEV_GPU_TEMP") {
			t.Fatalf("second %d: a 60-s summary's metric missing", sec)
		}
	}
	r.clk.Add(time.Second)
	r.tick(catalog.MetricUtilGPU)
	if r.exposed("DCGM_FI_DEV_GPU_TEMP") {
		t.Fatal("a 60-s summary's metric still exposed 121 s after it arrived")
	}
}

// RarePrior is the engine's default rare_interval.
func TestRarePriorIsEngineDefault(t *testing.T) {
	if RarePrior != sampler.DefaultRareInterval {
		t.Fatalf("RarePrior %v, engine's DefaultRareInterval %v", RarePrior, sampler.DefaultRareInterval)
	}
}
