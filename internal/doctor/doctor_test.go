package doctor_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/doctor"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// stepClock advances by step on every call, so each timed call takes
// exactly step.
func stepClock(start time.Time, step time.Duration) func() time.Time {
	t := start
	return func() time.Time {
		now := t
		t = t.Add(step)
		return now
	}
}

func runSim(t *testing.T, profile string, gpus int) *doctor.Report {
	t.Helper()
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	src, err := sim.New(sim.Options{GPUs: gpus, Profile: profile, Seed: 7, Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	r, err := doctor.Run(src, doctor.Options{LatencyCalls: 200, Now: stepClock(start, 40*time.Microsecond),
		Boottime: func() (time.Duration, bool) { return 0, false }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", name, got)
	}
}

func TestDoctorSimulatorGolden(t *testing.T) {
	r := runSim(t, "training", 2)
	var buf bytes.Buffer
	if err := doctor.WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	golden(t, "training.golden", buf.Bytes())
}

func TestDoctorSimulatorOutcomes(t *testing.T) {
	r := runSim(t, "training", 1)
	if !r.Simulated || r.Backend != "sim" {
		t.Errorf("backend %q simulated %v, want sim, true", r.Backend, r.Simulated)
	}
	d := r.Devices[0]
	for _, b := range d.Buffers {
		switch b.Type {
		case "module_power":
			if b.Supported {
				t.Errorf("module power buffer supported on a simulated H200")
			}
		case "total_power":
			if b.Depth != sim.DefaultDepth || b.Period != 50*time.Millisecond || b.Clock != "realtime" {
				t.Errorf("total_power probe %+v, want depth %d, period 50ms, realtime", b, sim.DefaultDepth)
			}
		}
	}
	if d.Clock != "realtime" {
		t.Errorf("clock %s, want realtime", d.Clock)
	}
	if d.Latency.Calls != 200 || d.Latency.P50 != 40*time.Microsecond || d.Latency.P99 != 40*time.Microsecond {
		t.Errorf("latency %+v, want 200 calls of 40µs", d.Latency)
	}
	// Power buffer: 120 × 50 ms = 6 s span → drain at most every 3 s, so
	// the 1 s default stands.
	if r.Recommend.DrainInterval != time.Second {
		t.Errorf("drain interval %v, want 1s", r.Recommend.DrainInterval)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Errorf("report does not marshal: %v", err)
	}
}

func TestDoctorShortBufferShortensDrain(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var periods [catalog.NumBufferTypes]time.Duration
	periods[catalog.BufferTotalPower] = 10 * time.Millisecond
	src, err := sim.New(sim.Options{GPUs: 1, Depth: 40, Periods: periods, Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	r, err := doctor.Run(src, doctor.Options{LatencyCalls: 10, Now: stepClock(start, time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	// 40 × 10 ms = 400 ms span → 200 ms.
	if r.Recommend.DrainInterval != 200*time.Millisecond {
		t.Errorf("drain interval %v, want 200ms (%v)", r.Recommend.DrainInterval, r.Recommend.Why)
	}
	// 1 ms per call at p99 → fields no more often than every 100 ms, but
	// not more often than the 1 s default either.
	if r.Recommend.FieldInterval != time.Second {
		t.Errorf("field interval %v, want 1s", r.Recommend.FieldInterval)
	}
}

func TestDoctorIdleSaysBuffersEmpty(t *testing.T) {
	r := runSim(t, "idle", 1)
	var buf bytes.Buffer
	if err := doctor.WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{`(?m)^\s+gpu_util\s+empty \(idle engine`, `(?m)^\s+total_power\s+depth 120`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("idle report lacks %q:\n%s", want, out)
		}
	}
}

// permDevice answers NO_PERMISSION for one metric.
type permDevice struct{ sampler.DeviceSource }

func (p permDevice) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	err := p.DeviceSource.Read(ids, out)
	for i, id := range ids {
		if id == catalog.MetricPowerLimit {
			out[i].Err = errors.Join(errors.New("get enforced power limit"), sampler.ErrNoPermission)
		}
	}
	return err
}

type permSource struct{ *sim.Source }

func (s permSource) Devices() ([]sampler.DeviceSource, error) {
	devs, err := s.Source.Devices()
	for i := range devs {
		devs[i] = permDevice{devs[i]}
	}
	return devs, err
}

func TestDoctorCountsNoPermission(t *testing.T) {
	src, err := sim.New(sim.Options{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := doctor.Run(permSource{src}, doctor.Options{LatencyCalls: 5})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Devices[0]; d.NoPermission != 1 {
		t.Errorf("no-permission count %d, want 1", d.NoPermission)
	}
	var buf bytes.Buffer
	doctor.WriteText(&buf, r)
	if !strings.Contains(buf.String(), "no permission: power_limit") {
		t.Errorf("report does not name the refused metric:\n%s", buf.String())
	}
}

// oldDriverSource is a simulator whose driver lacks the GPM functions (or,
// with deviceNS, whose devices decline GPM), and which says so in a notice.
type oldDriverSource struct {
	sampler.Source
	deviceNS bool
}

type oldDriverDevice struct {
	sampler.DeviceSource
	deviceNS bool
}

type absentErr struct{}

func (absentErr) Error() string {
	return "gpm: nvmlGpmSampleGet is absent from this driver (needs NVML 12.0, driver R525 or newer)"
}
func (absentErr) Unwrap() []error { return []error{sampler.ErrNotSupported, sampler.ErrOldDriver} }

func (s oldDriverSource) Devices() ([]sampler.DeviceSource, error) {
	devs, err := s.Source.Devices()
	out := make([]sampler.DeviceSource, len(devs))
	for i, d := range devs {
		out[i] = oldDriverDevice{d, s.deviceNS}
	}
	return out, err
}

func (s oldDriverSource) Notices() []string { return []string{"driver 520.61.05 is older than R535"} }

func (d oldDriverDevice) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	err := d.DeviceSource.Read(ids, out)
	for i, id := range ids {
		if m, _ := catalog.Default().Get(id); m.Src.Kind == catalog.FromGPM {
			out[i] = sampler.Reading{Err: absentErr{}}
			if d.deviceNS {
				out[i].Err = errors.Join(sampler.ErrNotSupported, errors.New("gpm: device does not support GPM"))
			}
		}
	}
	return err
}

// TestCauseOldDriver: GPM absent from the driver is reported as the
// driver's lack, naming the function and the driver that has it, with the
// backend's notice; GPM declined by the device as the device's.
func TestCauseOldDriver(t *testing.T) {
	for _, deviceNS := range []bool{false, true} {
		src, err := sim.New(sim.Options{GPUs: 1, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		r, err := doctor.Run(oldDriverSource{src, deviceNS}, doctor.Options{LatencyCalls: 5})
		if err != nil {
			t.Fatal(err)
		}
		var prof doctor.GroupSupport
		for _, g := range r.Devices[0].Groups {
			if g.Group == catalog.GroupProfiling {
				prof = g
			}
		}
		var gpmWhy string
		for _, w := range r.Recommend.Why {
			if strings.HasPrefix(w, "profiling (GPM)") {
				gpmWhy = w
			}
		}
		// GPM unsupported: its calls are not in the cost.
		for _, c := range r.Recommend.Cost {
			if strings.HasPrefix(c.Kind, "profiling") {
				t.Errorf("cost %+v counts GPM calls", r.Recommend.Cost)
			}
		}
		var buf bytes.Buffer
		if err := doctor.WriteText(&buf, r); err != nil {
			t.Fatal(err)
		}
		text := buf.String()
		if !regexp.MustCompile(`(?m)^notice:\s+driver 520\.61\.05 is older than R535$`).MatchString(text) {
			t.Errorf("text lacks the notice:\n%s", text)
		}
		if deviceNS {
			// The simulated GPUs are Hopper: their generation is not why.
			if len(prof.OldDriver) != 0 || len(prof.Unsupported) != prof.Total || !strings.Contains(gpmWhy, "not offered here although the GPUs are Hopper") ||
				strings.Contains(gpmWhy, "needs Hopper") {
				t.Errorf("device declines GPM: group %+v, advice %q", prof, gpmWhy)
			}
			continue
		}
		if len(prof.Unsupported) != 0 || len(prof.OldDriver) != prof.Total || prof.OldDriverWhy != (absentErr{}).Error() {
			t.Errorf("driver lacks GPM: group %+v", prof)
		}
		if want := "profiling (GPM): this driver lacks it, not the GPU: " + (absentErr{}).Error() + "; update the driver"; gpmWhy != want {
			t.Errorf("advice %q, want %q", gpmWhy, want)
		}
		if !strings.Contains(text, "absent from this driver: graphics_active, sm_active") || strings.Contains(text, "needs Hopper") {
			t.Errorf("text does not give the driver as the cause:\n%s", text)
		}
	}
}
