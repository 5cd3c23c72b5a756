package sim

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/simprofile"
)

// fakeClock is a manually advanced clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newSim(t *testing.T, profile string, clk *fakeClock) *Source {
	t.Helper()
	s, err := New(Options{GPUs: 2, Profile: profile, Seed: 42, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func device(t *testing.T, s *Source, i int) *Device {
	t.Helper()
	devs, err := s.Devices()
	if err != nil {
		t.Fatal(err)
	}
	return devs[i].(*Device)
}

func TestDeterministicForSeed(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	a := device(t, newSim(t, "training", &fakeClock{start}), 1)
	b := device(t, newSim(t, "training", &fakeClock{start}), 1)
	ra, _ := a.Drain(catalog.BufferTotalPower, 0, nil)
	rb, _ := b.Drain(catalog.BufferTotalPower, 0, nil)
	if len(ra) == 0 || len(ra) != len(rb) {
		t.Fatalf("lengths %d, %d", len(ra), len(rb))
	}
	for i := range ra {
		if ra[i] != rb[i] {
			t.Fatalf("sample %d differs: %+v vs %+v", i, ra[i], rb[i])
		}
	}
	ia, _ := a.Identity()
	ib, _ := b.Identity()
	if ia != ib || !ia.Simulated || ia.UUID == "" {
		t.Fatalf("identities %+v / %+v", ia, ib)
	}
	if ia.PersistenceMode != record.ModeEnabled || ia.ECCMode != record.ModeEnabled || ia.MIGMode != record.ModeDisabled {
		t.Fatalf("simulated modes %q/%q/%q, want enabled/enabled/disabled", ia.PersistenceMode, ia.ECCMode, ia.MIGMode)
	}
	i0, _ := device(t, newSim(t, "training", &fakeClock{start}), 0).Identity()
	if i0.UUID == ia.UUID {
		t.Fatal("two devices share a UUID")
	}
}

// The buffer behaves like the driver's: finite depth, strictly newer than
// the cursor, every sample exactly once however often it is drained.
func TestBufferSemantics(t *testing.T) {
	clk := &fakeClock{time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	d := device(t, newSim(t, "training", clk), 0)
	first, err := d.Drain(catalog.BufferGPUUtil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != DefaultDepth {
		t.Fatalf("first drain returned %d, want the full depth %d", len(first), DefaultDepth)
	}
	cursor := first[len(first)-1].TimeUS
	if _, err := d.Drain(catalog.BufferGPUUtil, cursor, nil); !errors.Is(err, sampler.ErrNothingNew) {
		t.Fatalf("immediate re-drain: %v, want ErrNothingNew", err)
	}
	seen := map[uint64]bool{}
	for _, s := range first {
		seen[s.TimeUS] = true
	}
	period := defaultPeriods[catalog.BufferGPUUtil]
	for step := 0; step < 200; step++ {
		clk.t = clk.t.Add(time.Duration(step%7+1) * 37 * time.Millisecond)
		got, err := d.Drain(catalog.BufferGPUUtil, cursor, nil)
		if errors.Is(err, sampler.ErrNothingNew) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range got {
			if s.TimeUS <= cursor {
				t.Fatalf("sample at %d not newer than cursor %d", s.TimeUS, cursor)
			}
			if seen[s.TimeUS] {
				t.Fatalf("sample at %d delivered twice", s.TimeUS)
			}
			seen[s.TimeUS] = true
		}
		cursor = got[len(got)-1].TimeUS
	}
	// no gaps: as many distinct samples as periods elapsed
	n := len(seen)
	elapsed := clk.t.Sub(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	want := DefaultDepth + int(elapsed/period)
	if n < want-1 || n > want+1 {
		t.Fatalf("delivered %d distinct samples over %v, want about %d", n, elapsed, want)
	}
	// a long pause loses the overwritten samples, as a driver would
	clk.t = clk.t.Add(time.Minute)
	got, _ := d.Drain(catalog.BufferGPUUtil, cursor, nil)
	if len(got) != DefaultDepth {
		t.Fatalf("after a pause longer than the span: %d samples, want depth %d", len(got), DefaultDepth)
	}
}

func TestIdleBuffersRunDry(t *testing.T) {
	clk := &fakeClock{time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	d := device(t, newSim(t, "idle", clk), 0)
	if _, err := d.Drain(catalog.BufferGPUUtil, 0, nil); !errors.Is(err, sampler.ErrNothingNew) {
		t.Fatalf("idle utilization drain: %v, want ErrNothingNew", err)
	}
	if _, err := d.Drain(catalog.BufferModulePower, 0, nil); !errors.Is(err, sampler.ErrNotSupported) {
		t.Fatalf("module power: %v, want ErrNotSupported", err)
	}
	out := make([]sampler.Reading, 1)
	d.Read([]catalog.MetricID{catalog.MetricUtilGPU}, out)
	if out[0].Err != nil || out[0].Value != 0 {
		t.Fatalf("idle point read: %+v, want a real 0", out[0])
	}
}

func TestBootClock(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s, _ := New(Options{GPUs: 1, Profile: "training", Now: (&fakeClock{start}).now, BootClock: true})
	got, _ := device(t, s, 0).Drain(catalog.BufferTotalPower, 0, nil)
	newest := time.Duration(got[len(got)-1].TimeUS) * time.Microsecond
	if d := bootOffset - newest; d < 0 || d > time.Second {
		t.Fatalf("newest boot timestamp %v, want just under %v", newest, bootOffset)
	}
}

// readAt reads metric ids at an instant.
func readAt(t *testing.T, d *Device, clk *fakeClock, at time.Duration, ids ...catalog.MetricID) []float64 {
	t.Helper()
	clk.t = d.src.start.Add(at)
	out := make([]sampler.Reading, len(ids))
	if err := d.Read(ids, out); err != nil {
		t.Fatal(err)
	}
	vals := make([]float64, len(ids))
	for i, r := range out {
		if r.Err != nil {
			t.Fatalf("read %v: %v", ids[i], r.Err)
		}
		vals[i] = r.Value
	}
	return vals
}

// Each profile shows the behaviour it is named for.
func TestProfiles(t *testing.T) {
	clk := &fakeClock{time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	t.Run("training", func(t *testing.T) {
		d := device(t, newSim(t, "training", clk), 0)
		v := readAt(t, d, clk, 30*time.Second, catalog.MetricUtilGPU, catalog.MetricPowerInstant, catalog.MetricClocksEventReasons)
		if v[0] < 90 || v[1] < 500 || v[2] != 0 {
			t.Fatalf("util %v power %v reasons %v", v[0], v[1], v[2])
		}
	})
	t.Run("launch-bound", func(t *testing.T) {
		d := device(t, newSim(t, "launch-bound", clk), 0)
		v := readAt(t, d, clk, 30*time.Second, catalog.MetricUtilGPU, catalog.MetricPowerInstant)
		if v[0] < 90 || v[1] > 0.35*powerLimitW {
			t.Fatalf("util %v power %v: want high utilization with low power", v[0], v[1])
		}
	})
	t.Run("data-stall", func(t *testing.T) {
		d := device(t, newSim(t, "data-stall", clk), 0)
		var low, high int
		for ms := 0; ms < 12000; ms += 100 {
			u := readAt(t, d, clk, time.Duration(ms)*time.Millisecond, catalog.MetricUtilGPU)[0]
			if u < 20 {
				low++
			} else if u > 85 {
				high++
			}
		}
		if low < 20 || high < 60 {
			t.Fatalf("low %d high %d of 120 reads: want periodic dips", low, high)
		}
	})
	t.Run("thermal", func(t *testing.T) {
		d := device(t, newSim(t, "thermal", clk), 0)
		early := readAt(t, d, clk, 5*time.Second, catalog.MetricTempGPU, catalog.MetricClockSM, catalog.MetricClocksEventReasons)
		late := readAt(t, d, clk, 90*time.Second, catalog.MetricTempGPU, catalog.MetricClockSM, catalog.MetricClocksEventReasons, catalog.MetricThrottleHWThermal)
		if early[0] >= slowdownTempC || early[2] != 0 {
			t.Fatalf("early: temp %v reasons %v", early[0], early[2])
		}
		if late[0] < slowdownTempC || late[1] >= early[1] || uint64(late[2])&catalog.ReasonThermalAny == 0 || late[3] <= 0 {
			t.Fatalf("late: temp %v clock %v (early %v) reasons %v throttle ns %v", late[0], late[1], early[1], late[2], late[3])
		}
	})
	t.Run("memory-pressure", func(t *testing.T) {
		d := device(t, newSim(t, "memory-pressure", clk), 0)
		v := readAt(t, d, clk, 60*time.Second, catalog.MetricMemoryUsed, catalog.MetricMemoryTotal)
		if v[0]/v[1] < 0.97 {
			t.Fatalf("memory used %v of %v: want near full", v[0], v[1])
		}
	})
	t.Run("idle", func(t *testing.T) {
		d := device(t, newSim(t, "idle", clk), 0)
		v := readAt(t, d, clk, 30*time.Second, catalog.MetricPowerInstant, catalog.MetricClocksEventReasons)
		if v[0] > 100 || uint64(v[1])&catalog.ReasonGPUIdle == 0 {
			t.Fatalf("idle power %v reasons %v", v[0], v[1])
		}
	})
}

func TestEnergyIsMonotonicIntegral(t *testing.T) {
	clk := &fakeClock{time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	d := device(t, newSim(t, "training", clk), 0)
	e0 := readAt(t, d, clk, 0, catalog.MetricEnergy)[0]
	e1 := readAt(t, d, clk, 10*time.Second, catalog.MetricEnergy)[0]
	joules := (e1 - e0) / 1000
	if joules < 10*500 || joules > 10*700 {
		t.Fatalf("energy over 10 s of training: %v J, want 5–7 kJ", joules)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{GPUs: 0}, {GPUs: 65}, {GPUs: 1, Profile: "nope"}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

// GPM needs two snapshots ≥ 100 ms apart; values then follow the profile:
// launch-bound keeps the engine busy (utilization high) while the SMs
// mostly wait; training is tensor-heavy.
func TestGPMProfiles(t *testing.T) {
	ids := []catalog.MetricID{catalog.MetricSMActive, catalog.MetricTensorActive, catalog.MetricUtilGPU,
		catalog.MetricGraphicsActive, catalog.MetricNVLinkTxRate}
	read := func(d *Device) []sampler.Reading {
		out := make([]sampler.Reading, len(ids))
		if err := d.Read(ids, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		profile             string
		smMax, tensorMin    float64
		smMin, utilMin      float64
		nvlinkMin, nvlinkMx float64
	}{
		{profile: "training", smMin: 70, smMax: 100, tensorMin: 60, utilMin: 90, nvlinkMin: 50e9, nvlinkMx: 120e9},
		{profile: "launch-bound", smMin: 0, smMax: 20, tensorMin: 0, utilMin: 90, nvlinkMin: 50e9, nvlinkMx: 120e9},
		{profile: "idle", smMin: 0, smMax: 0, tensorMin: 0, utilMin: 0, nvlinkMin: 0, nvlinkMx: 0},
		// Collectives: links busy, few SMs working, the engine half idle.
		{profile: "comm-bound", smMin: 5, smMax: 30, tensorMin: 0, utilMin: 45, nvlinkMin: 250e9, nvlinkMx: 320e9},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			clk := &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
			d := device(t, newSim(t, tc.profile, clk), 0)
			first := read(d)
			if !errors.Is(first[0].Err, sampler.ErrNothingNew) || first[2].Err != nil {
				t.Fatalf("first read: gpm %v, util %v; want nothing new, a value", first[0].Err, first[2].Err)
			}
			clk.t = clk.t.Add(50 * time.Millisecond)
			if r := read(d); !errors.Is(r[0].Err, sampler.ErrNothingNew) {
				t.Fatalf("read 50 ms after the first snapshot: %v, want nothing new", r[0].Err)
			}
			clk.t = clk.t.Add(time.Second)
			r := read(d)
			for i, x := range r {
				if x.Err != nil {
					t.Fatalf("%s: %v", catalog.Default().Name(ids[i]), x.Err)
				}
			}
			sm, tensor, util, nvl := r[0].Value, r[1].Value, r[2].Value, r[4].Value
			if sm < tc.smMin || sm > tc.smMax || tensor < tc.tensorMin || util < tc.utilMin || nvl < tc.nvlinkMin || nvl > tc.nvlinkMx {
				t.Errorf("sm_active %v, tensor %v, util %v, nvlink tx %v B/s", sm, tensor, util, nvl)
			}
		})
	}
}

// The simulated GPUs sit on two NUMA nodes: even GPUs on the first half of
// the machine's CPUs, odd ones on the second. The machine's CPUs are by
// default the ones this process may run on (a container or taskset may
// allow only some of the host's, numbered anywhere).
func TestCPUAffinity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cpus     []int
		even     []int
		odd      []int
		fromHere bool
	}{
		{name: "allowed CPUs 2,3,5,9", cpus: []int{9, 3, 5, 2, 3}, even: []int{2, 3}, odd: []int{5, 9}},
		{name: "three CPUs", cpus: []int{4, 5, 6}, even: []int{4}, odd: []int{5, 6}},
		{name: "one CPU", cpus: []int{7}, even: []int{7}, odd: []int{7}},
		{name: "this process's CPUs", cpus: allowedCPUs(), fromHere: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{GPUs: 3, Profile: "training", CPUs: tc.cpus}
			if tc.fromHere {
				opts.CPUs = nil // the default
				n := len(tc.cpus)
				tc.even, tc.odd = tc.cpus[:max(n/2, 1)], tc.cpus[min(n/2, n-1):]
			}
			s, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range [][]int{tc.even, tc.odd, tc.even} {
				got, err := device(t, s, i).CPUAffinity()
				if err != nil || !slices.Equal(got, want) {
					t.Errorf("GPU %d: CPUAffinity = %v, %v; want %v", i, got, err, want)
				}
			}
		})
	}
	if runtime.GOOS == "linux" {
		// taskset-like check of the default against the kernel's own list.
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Skip(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				if got := cpuRanges(allowedCPUs()); got != strings.TrimSpace(v) {
					t.Fatalf("allowed CPUs %s, the kernel says %s", got, strings.TrimSpace(v))
				}
				return
			}
		}
		t.Fatal("no Cpus_allowed_list in /proc/self/status")
	}
}

// cpuRanges writes CPU numbers as the kernel does: "0-3,8".
func cpuRanges(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, strconv.Itoa(cpus[i])+"-"+strconv.Itoa(cpus[j]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// The simulator implements every profile that package simprofile names
// (the list the configuration validates against), and no other.
func TestProfilesMatchSimprofile(t *testing.T) {
	for _, p := range simprofile.Names() {
		if _, err := New(Options{GPUs: 1, Profile: p, Seed: 1}); err != nil {
			t.Errorf("profile %q: %v", p, err)
		}
		if _, ok := profileProcesses[p]; !ok {
			t.Errorf("profile %q has no processes", p)
		}
		if _, ok := gpmShapes[p]; !ok && p != "idle" {
			t.Errorf("profile %q has no GPM shape", p)
		}
	}
	for p := range profileProcesses {
		if !simprofile.Valid(p) {
			t.Errorf("processes for %q, which simprofile does not name", p)
		}
	}
	for p := range gpmShapes {
		if !simprofile.Valid(p) {
			t.Errorf("GPM shape for %q, which simprofile does not name", p)
		}
	}
}
