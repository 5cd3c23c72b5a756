package sourcetest_test

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
	"github.com/gpusampler/gpusampler/sampler/sourcetest"
)

func simSource(t *testing.T, gpus int) (*sim.Source, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	src, err := sim.New(sim.Options{GPUs: gpus, Seed: 7, Profile: "training", Now: clk.Now, CPUs: []int{0, 1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	return src, clk
}

// The simulator conforms.
func TestSim(t *testing.T) {
	src, clk := simSource(t, 2)
	sourcetest.Run(t, src, sourcetest.Options{Advance: clk.Advance})
}

// recorder is a testing.TB that records what the suite reports instead of
// failing the test; Fatal ends the calling goroutine, as testing's does.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	fatal  bool
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.mu.Lock()
	r.fatal = true
	r.mu.Unlock()
	runtime.Goexit()
}

// verify runs the suite on a recorder and returns what it reported.
func verify(src sampler.Source, opts sourcetest.Options) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sourcetest.Verify(r, src, opts)
	}()
	<-done
	return r
}

// broken is the simulator with one rule of the Source contract broken.
type broken struct {
	*sim.Source
	fault string
}

func (b *broken) Devices() ([]sampler.DeviceSource, error) {
	devs, err := b.Source.Devices()
	out := make([]sampler.DeviceSource, len(devs))
	for i, d := range devs {
		out[i] = &brokenDevice{Device: d.(*sim.Device), fault: b.fault}
	}
	return out, err
}

type brokenDevice struct {
	*sim.Device
	fault string
}

func (d *brokenDevice) Identity() (rec record.Device, err error) {
	rec, err = d.Device.Identity()
	if d.fault == "same-uuid" {
		rec.UUID = "GPU-same"
	}
	return rec, err
}

func (d *brokenDevice) Drain(t catalog.BufferType, cursor uint64, dst []sampler.RawSample) ([]sampler.RawSample, error) {
	switch d.fault {
	case "drain-redelivers": // ignores the cursor
		return d.Device.Drain(t, 0, dst)
	case "drain-overwrites": // does not append
		return d.Device.Drain(t, cursor, dst[:0])
	case "drain-empty-nil": // nothing new, but no ErrNothingNew
		out, err := d.Device.Drain(t, cursor, dst)
		if errors.Is(err, sampler.ErrNothingNew) {
			err = nil
		}
		return out, err
	}
	return d.Device.Drain(t, cursor, dst)
}

func (d *brokenDevice) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	if d.fault == "read-skips" && len(ids) > 1 { // leaves the last entry as it was
		return d.Device.Read(ids[:len(ids)-1], out[:len(out)-1])
	}
	err := d.Device.Read(ids, out)
	switch d.fault {
	case "read-raw-error": // a driver error not mapped onto the sentinels
		for i := range out {
			if out[i].Err != nil {
				out[i].Err = errors.New("nvmlDeviceGetFieldValues: 3")
			}
		}
	}
	return err
}

func (d *brokenDevice) Processes(q sampler.ProcessQuery, dst []sampler.Process) ([]sampler.Process, error) {
	out, err := d.Device.Processes(q, dst)
	if d.fault == "cmdline-leak" {
		for i := range out[len(dst):] {
			out[len(dst)+i].Cmdline = "python train.py --token=secret"
		}
	}
	return out, err
}

func (d *brokenDevice) CPUAffinity() ([]int, error) {
	cpus, err := d.Device.CPUAffinity()
	if d.fault == "affinity-unsorted" {
		slices.Reverse(cpus)
	}
	return cpus, err
}

func (d *brokenDevice) CallStats() sampler.CallStats {
	st := d.Device.CallStats()
	if d.fault == "calls-zero" {
		st.Calls = 0
	}
	return st
}

// Each broken rule makes the suite fail, in the check that owns the rule
// (and the unbroken simulator passes it: TestSim).
func TestBrokenSourceFails(t *testing.T) {
	cases := map[string]string{
		"same-uuid":         "identity",
		"drain-redelivers":  "drain",
		"drain-overwrites":  "drain",
		"drain-empty-nil":   "drain",
		"read-skips":        "read",
		"read-raw-error":    "read",
		"cmdline-leak":      "processes",
		"affinity-unsorted": "affinity",
		"calls-zero":        "calls",
	}
	for fault, check := range cases {
		t.Run(fault, func(t *testing.T) {
			src, clk := simSource(t, 2)
			// processes run in the training profile only after a while
			clk.Advance(time.Minute)
			r := verify(&broken{Source: src, fault: fault}, sourcetest.Options{Advance: clk.Advance})
			if len(r.errors) == 0 {
				t.Fatalf("the suite passed a source with %s", fault)
			}
			for _, e := range r.errors {
				if !strings.HasPrefix(e, check+": ") {
					t.Errorf("reported by another check than %s: %s", check, e)
				}
			}
			t.Logf("%s: %d errors, first: %s", fault, len(r.errors), r.errors[0])
		})
	}
	t.Run("no-devices", func(t *testing.T) {
		src, clk := simSource(t, 1)
		r := verify(noDevices{src}, sourcetest.Options{Advance: clk.Advance})
		if !r.fatal {
			t.Fatalf("no devices: not fatal: %v", r.errors)
		}
	})
}

type noDevices struct{ *sim.Source }

func (noDevices) Devices() ([]sampler.DeviceSource, error) { return nil, nil }
