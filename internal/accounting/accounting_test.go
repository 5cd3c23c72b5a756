package accounting

import (
	"math"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

var (
	podA = record.Attribution{Pod: "a", Namespace: "ns", Container: "c"}
	podB = record.Attribution{Pod: "b", Namespace: "ns", Container: "c"}
)

const sec = int64(time.Second)

// feed drives an accountant like the engine: every second a drain
// publishes that second's power (50 ms) and utilization (100 ms) samples,
// after the energy counter's reading at the drain. powerW and util give
// the script; lost says which instants the GPU did not answer.
type feed struct {
	a      *Accountant
	dev    record.Device
	t      int64 // next sample time
	mj     float64
	powerW func(t int64) float64
	util   func(t int64) float64
	lost   func(t int64) bool
	events []record.Event
}

func newFeed(t *testing.T, powerW, util func(int64) float64) *feed {
	f := &feed{powerW: powerW, util: util, lost: func(int64) bool { return false }, mj: 5e6}
	f.a = New(Options{Emit: func(ev record.Event) { f.events = append(f.events, ev) }})
	return f
}

// setOwner attributes the device, as the resolver does through the
// engine: the accountant hears it, the identity carries it.
func (f *feed) setOwner(a record.Attribution, at int64) {
	f.a.SetOwner(0, a, at)
	f.dev.Attribution = a
}

// run feeds samples up to (and including) end.
func (f *feed) run(end int64) {
	for f.t < end {
		drainEnd := f.t + sec
		var batch []record.Sample
		for t := f.t + 50*int64(time.Millisecond); t <= drainEnd; t += 50 * int64(time.Millisecond) {
			// the counter integrates the script exactly
			f.mj += f.powerW(t) * 50
			if f.lost(t) {
				continue
			}
			batch = append(batch, record.Sample{TimeNS: t, Value: f.powerW(t), Metric: catalog.MetricPowerDraw})
		}
		for t := f.t + 100*int64(time.Millisecond); t <= drainEnd; t += 100 * int64(time.Millisecond) {
			if !f.lost(t) {
				batch = append(batch, record.Sample{TimeNS: t, Value: f.util(t), Metric: catalog.MetricUtilGPU})
			}
		}
		if !f.lost(drainEnd) {
			f.a.Observe(&f.dev, []record.Sample{{TimeNS: drainEnd, Value: f.mj, Metric: catalog.MetricEnergy, Flags: record.FlagPointRead}})
		}
		f.a.Observe(&f.dev, batch)
		f.t = drainEnd
	}
}

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.4f, want %.4f ± %.4f", what, got, want, tol)
	}
}

// last returns the newest record of kind for owner.
func (f *feed) last(kind record.EventKind, owner record.Attribution) (record.Event, int) {
	var ev record.Event
	n := 0
	for _, e := range f.events {
		a, _ := record.ProcessAttribution(e)
		if e.Kind == kind && a == owner {
			ev, n = e, n+1
		}
	}
	return ev, n
}

func TestTakingTurns(t *testing.T) {
	f := newFeed(t, func(t int64) float64 { return 300 }, func(t int64) float64 {
		if t > 15*sec && t <= 20*sec {
			return 0 // pod b idles its last 5 s
		}
		return 100
	})
	f.setOwner(podA, 0)
	f.run(10 * sec)
	f.setOwner(podB, 10*sec)
	f.run(20 * sec)
	f.setOwner(record.Attribution{}, 20*sec)
	f.run(22 * sec)

	endA, n := f.last(record.EventJobEnd, podA)
	if n != 1 {
		t.Fatalf("pod a: %d job-end records, want 1 (events %v)", n, f.events)
	}
	a := TotalsOf(endA.Fields)
	// The first power sample is at 50 ms: a holds the GPU 9.95 s of the timeline.
	near(t, "a energy_j", a.EnergyJ, 300*9.95, 1e-6)
	near(t, "a busy_s", a.BusyS, 9.9, 0.11)
	near(t, "a idle_allocated_s", a.IdleAllocatedS, 0, 0)
	near(t, "a exactness", a.Exactness(), 1, 0)
	endB, n := f.last(record.EventJobEnd, podB)
	if n != 1 {
		t.Fatalf("pod b: %d job-end records, want 1", n)
	}
	b := TotalsOf(endB.Fields)
	near(t, "b energy_j", b.EnergyJ, 3000, 1e-6)
	near(t, "b busy_s", b.BusyS, 5, 0.1)
	near(t, "b idle_allocated_s", b.IdleAllocatedS, 5, 0.1)
	near(t, "b energy_counter_j", b.EnergyCounterJ, 3000, 1e-6)
	if endB.StartNS != 20*sec {
		t.Errorf("b's job-end record is as of %d, want the end %d", endB.StartNS, 20*sec)
	}
	// The job-end totals equal the counters' last values.
	for _, owner := range []record.Attribution{podA, podB} {
		job, _ := f.last(record.EventJob, owner)
		end, _ := f.last(record.EventJobEnd, owner)
		if TotalsOf(job.Fields) != TotalsOf(end.Fields) {
			t.Errorf("%v: last job record %v, job end %v", owner, TotalsOf(job.Fields), TotalsOf(end.Fields))
		}
	}
	// Every owner's energy sums to the counter's delta.
	f.a.Flush()
	sum, sumCounter := 0.0, 0.0
	for _, owner := range []record.Attribution{podA, podB, {}} {
		ev, _ := f.last(record.EventJob, owner)
		sum += TotalsOf(ev.Fields).EnergyJ
		sumCounter += TotalsOf(ev.Fields).EnergyCounterJ
	}
	near(t, "counter delta split", sumCounter, 300*21, 1e-6) // the first reading is at 1 s
	near(t, "energy", sum, 300*21.95, 1e-6)
}

func TestSharedGPU(t *testing.T) {
	f := newFeed(t, func(t int64) float64 { return 400 }, func(t int64) float64 { return 80 })
	procs := func(at int64, smA, smB float64) {
		f.a.ObserveEvent(&record.Event{Kind: record.EventProcess, Device: 0, StartNS: at, EndNS: at,
			Attrs:  podA.Attrs(),
			Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 10}, {Key: record.ProcessFieldSMUtil, Value: smA}, {Key: record.ProcessFieldUsedMemory, Value: 1000}}})
		f.a.ObserveEvent(&record.Event{Kind: record.EventProcess, Device: 0, StartNS: at, EndNS: at,
			Attrs:  podB.Attrs(),
			Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 20}, {Key: record.ProcessFieldSMUtil, Value: smB}, {Key: record.ProcessFieldUsedMemory, Value: 3000}}})
		f.a.ObserveProcesses(&f.dev, []uint32{10, 20}, at)
	}
	procs(0, 60, 20)
	f.run(10 * sec)
	procs(10*sec, 60, 0) // b stops using the GPU
	f.run(20 * sec)
	f.a.Flush()
	ja, _ := f.last(record.EventJob, podA)
	jb, _ := f.last(record.EventJob, podB)
	a, b := TotalsOf(ja.Fields), TotalsOf(jb.Fields)
	near(t, "a energy_j", a.EnergyJ, 400*(9.95*0.75+10), 1e-6)
	near(t, "b energy_j", b.EnergyJ, 400*9.95*0.25, 1e-6)
	near(t, "a+b energy_counter_j", a.EnergyCounterJ+b.EnergyCounterJ, 400*19, 1e-6)
	near(t, "a busy_s", a.BusyS, 19.9, 0.11)
	near(t, "b busy_s", b.BusyS, 9.9, 0.11)
	near(t, "b idle_allocated_s", b.IdleAllocatedS, 10, 0.11)
	near(t, "a memory_peak_mib", a.MemoryPeakMiB, 1000, 0)
	near(t, "b memory_peak_mib", b.MemoryPeakMiB, 3000, 0)
	near(t, "a allocated_s", a.AllocatedS, 19.95, 1e-9)
	near(t, "b allocated_s", b.AllocatedS, 19.95, 1e-9)
}

func TestLostGPUIsExactnessNotLessEnergy(t *testing.T) {
	f := newFeed(t, func(t int64) float64 { return 500 }, func(t int64) float64 { return 100 })
	f.lost = func(t int64) bool { return t > 5*sec && t < 10*sec } // 5 s without an answer
	f.setOwner(podA, 0)
	f.run(15 * sec)
	f.a.Flush()
	ev, _ := f.last(record.EventJob, podA)
	a := TotalsOf(ev.Fields)
	near(t, "allocated_s", a.AllocatedS, 14.95, 1e-9)
	near(t, "lost_s", a.LostS, 5, 1e-9)
	near(t, "exactness", a.Exactness(), 1-5/14.95, 1e-9)
	near(t, "energy_j", a.EnergyJ, 500*9.95, 1e-6)
	// The counter kept counting through the gap.
	near(t, "energy_counter_j", a.EnergyCounterJ, 500*14, 1e-6)
	near(t, "energy_diff_j", record.FieldValue(ev.Fields, record.JobFieldEnergyDiff), 500*14-500*9.95, 1e-6)
}

func TestPointReadsLowerExactness(t *testing.T) {
	f := newFeed(t, func(t int64) float64 { return 80 }, func(t int64) float64 { return 0 })
	f.setOwner(podA, 0)
	f.run(2 * sec)
	// An idle GPU: the utilization buffer ran dry, one point read a second.
	for s := int64(3); s <= 6; s++ {
		f.a.Observe(&f.dev, []record.Sample{{TimeNS: s * sec, Value: 0, Metric: catalog.MetricUtilGPU, Flags: record.FlagPointRead}})
	}
	f.run(6 * sec)
	f.a.Flush()
	ev, _ := f.last(record.EventJob, podA)
	a := TotalsOf(ev.Fields)
	near(t, "point_read_s", a.PointReadS, 4, 1e-9)
	near(t, "idle_allocated_s", a.IdleAllocatedS, 1.9+4, 1e-9)
	near(t, "exactness", a.Exactness(), 1-4/5.95, 1e-9)
}

// A device without power samples keeps one energy-counter reading, not
// every one it ever made.
func TestCounterWithoutPowerStaysSmall(t *testing.T) {
	a := New(Options{})
	dev := record.Device{Index: 0}
	for s := int64(1); s <= 1000; s++ {
		a.Observe(&dev, []record.Sample{{TimeNS: s * sec, Value: float64(s) * 1000, Metric: catalog.MetricEnergy}})
	}
	if n := len(a.devs[0].counters); n != 1 {
		t.Fatalf("%d counter readings kept", n)
	}
	// The power timeline starts: the counter's delta from then on is
	// the owner's.
	a.Observe(&dev, []record.Sample{{TimeNS: 1000 * sec, Value: 100, Metric: catalog.MetricPowerDraw},
		{TimeNS: 1001 * sec, Value: 100, Metric: catalog.MetricPowerDraw}, {TimeNS: 1001 * sec, Value: 1001 * 1000, Metric: catalog.MetricEnergy}})
	acs := a.Accounts()
	if len(acs) != 1 || acs[0].EnergyCounterJ != 1 || acs[0].EnergyJ != 100 {
		t.Fatalf("accounts %+v", acs)
	}
}

// The resolver sets A and then B before any batch carries A: a batch
// published between SetOwner(B) and the engine taking B carries identity A.
// SetOwner already placed both changes on the timeline, so that late
// identity must not hand the device back to A after B's start.
func TestLateIdentityKeepsNewerOwner(t *testing.T) {
	f := newFeed(t, func(t int64) float64 { return 200 }, func(t int64) float64 { return 100 })
	f.run(5 * sec)
	f.a.SetOwner(0, podA, 5*sec)
	f.dev.Attribution = podA // the engine took A
	f.a.SetOwner(0, podB, 5*sec+500*int64(time.Millisecond))
	f.run(6 * sec) // published before the engine took B: identity A
	f.dev.Attribution = podB
	f.run(10 * sec)
	f.setOwner(record.Attribution{}, 10*sec)
	f.run(12 * sec)

	endA, n := f.last(record.EventJobEnd, podA)
	if n != 1 {
		t.Fatalf("pod a: %d job-end records, want 1", n)
	}
	near(t, "a allocated_s", TotalsOf(endA.Fields).AllocatedS, 0.5, 1e-9)
	near(t, "a energy_j", TotalsOf(endA.Fields).EnergyJ, 100, 1e-6)
	if endA.StartNS != 5*sec+500*int64(time.Millisecond) {
		t.Errorf("a's job ends at %d, want B's start", endA.StartNS)
	}
	endB, n := f.last(record.EventJobEnd, podB)
	if n != 1 {
		t.Fatalf("pod b: %d job-end records, want 1", n)
	}
	near(t, "b allocated_s", TotalsOf(endB.Fields).AllocatedS, 4.5, 1e-9)
}

// A device without power samples (a MIG instance: NVML has no per-instance
// power, and no utilization buffers) still gets its accounts: allocated
// time along its memory reads and process polls, all of it lost_s (no
// power sample covers it), so energy_j is 0 with exactness 0; memory peak;
// job records every interval and a job end when the owner leaves. Its
// state stays bounded however long it runs and however many owners pass.
func TestDeviceWithoutPower(t *testing.T) {
	var events []record.Event
	a := New(Options{Emit: func(ev record.Event) { events = append(events, ev) }})
	dev := record.Device{Index: 4, MIG: true}
	owners := []record.Attribution{podA, podB}
	for i := range 100 {
		owners = append(owners, record.Attribution{Namespace: "ns", Pod: "p" + string(rune('a'+i%26)) + string(rune('a'+i/26))})
	}
	// Each owner holds the instance 30 s: memory read every 3 s, a process
	// poll every 5 s whose memory changes every time.
	var t0 int64
	for k, owner := range owners {
		a.SetOwner(4, owner, t0)
		dev.Attribution = owner
		for s := int64(1); s <= 30; s++ {
			now := t0 + s*sec
			if s%3 == 0 {
				a.Observe(&dev, []record.Sample{{TimeNS: now, Value: float64(1000*(k+1)) + float64(s), Metric: catalog.MetricMemoryUsed}})
			}
			if s%5 == 0 {
				a.ObserveEvent(&record.Event{Kind: record.EventProcess, Device: 4, StartNS: now, EndNS: now, Attrs: owner.Attrs(),
					Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 7}, {Key: record.ProcessFieldUsedMemory, Value: float64(s)}}})
				a.ObserveProcesses(&dev, []uint32{7}, now)
			}
		}
		t0 += 30 * sec
		if n := len(a.devs[4].states); n > 8 {
			t.Fatalf("after %d owners: %d states kept", k+1, n)
		}
		if n := len(a.devs[4].accts); n > 3 {
			t.Fatalf("after %d owners: %d accounts kept", k+1, n)
		}
	}
	var endA, endB []record.Event
	jobs := 0
	for _, ev := range events {
		o, _ := record.ProcessAttribution(ev)
		switch {
		case ev.Kind == record.EventJobEnd && o == podA:
			endA = append(endA, ev)
		case ev.Kind == record.EventJobEnd && o == podB:
			endB = append(endB, ev)
		case ev.Kind == record.EventJob && o == podA:
			jobs++
		}
	}
	if len(endA) != 1 || len(endB) != 1 {
		t.Fatalf("job ends: a %d, b %d, want 1 each", len(endA), len(endB))
	}
	if jobs < 3 {
		t.Errorf("pod a: %d job records in 30 s, want one every 10 s and one at its end", jobs)
	}
	for _, c := range []struct {
		name  string
		ev    record.Event
		alloc float64
		peak  float64
		end   int64
	}{
		// a's account starts at the instance's first read (3 s).
		{"a", endA[0], 27, 1030, 30 * sec},
		{"b", endB[0], 30, 2030, 60 * sec},
	} {
		tot := TotalsOf(c.ev.Fields)
		near(t, c.name+" allocated_s", tot.AllocatedS, c.alloc, 1e-9)
		near(t, c.name+" lost_s", tot.LostS, c.alloc, 1e-9)
		near(t, c.name+" exactness", tot.Exactness(), 0, 0)
		near(t, c.name+" energy_j", tot.EnergyJ, 0, 0)
		near(t, c.name+" memory_peak_mib", tot.MemoryPeakMiB, c.peak, 0)
		if c.ev.StartNS != c.end {
			t.Errorf("%s's job end is as of %d, want %d", c.name, c.ev.StartNS, c.end)
		}
	}
}

// Power samples that start on a device accounted by its clock take over
// where the clock stopped: no second counting of the same time.
func TestPowerTakesOverFromClock(t *testing.T) {
	a := New(Options{})
	dev := record.Device{Index: 0}
	a.SetOwner(0, podA, 0)
	a.Observe(&dev, []record.Sample{{TimeNS: 1 * sec, Value: 10, Metric: catalog.MetricMemoryUsed}})
	a.Observe(&dev, []record.Sample{{TimeNS: 5 * sec, Value: 10, Metric: catalog.MetricMemoryUsed}})
	if acs := a.Accounts(); len(acs) != 1 || acs[0].AllocatedS != 0 {
		t.Fatalf("accounted before NoPowerAfter passed: %+v", acs)
	}
	a.Observe(&dev, []record.Sample{{TimeNS: 12 * sec, Value: 10, Metric: catalog.MetricMemoryUsed}})
	a.Observe(&dev, []record.Sample{{TimeNS: 11 * sec, Value: 100, Metric: catalog.MetricPowerDraw}, {TimeNS: 12 * sec, Value: 100, Metric: catalog.MetricPowerDraw},
		{TimeNS: 13 * sec, Value: 100, Metric: catalog.MetricPowerDraw}, {TimeNS: 14 * sec, Value: 100, Metric: catalog.MetricPowerDraw}})
	acs := a.Accounts()
	if len(acs) != 1 {
		t.Fatalf("accounts %+v", acs)
	}
	// 11 s on the clock (1→12 s, lost), then 12→14 s on power (the
	// sample at 11 s is the clock's time already).
	near(t, "allocated_s", acs[0].AllocatedS, 13, 1e-9)
	near(t, "lost_s", acs[0].LostS, 11, 1e-9)
	near(t, "energy_j", acs[0].EnergyJ, 200, 1e-9)
}
