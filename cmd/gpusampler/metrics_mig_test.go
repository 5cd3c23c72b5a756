package main

import (
	"bytes"
	"fmt"
	"regexp"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// migSource wraps a simulated source so that its second device presents
// itself as a MIG instance of the first, answering as NVML does under MIG.
type migSource struct{ sampler.Source }

type migDevice struct{ sampler.DeviceSource }

func (m migSource) Devices() ([]sampler.DeviceSource, error) {
	devs, err := m.Source.Devices()
	if err != nil {
		return nil, err
	}
	devs[1] = migDevice{devs[1]}
	return devs, nil
}

func (m migDevice) Identity() (record.Device, error) {
	id, err := m.DeviceSource.Identity()
	id.MIG, id.Parent, id.GPUInstanceID, id.MIGProfile = true, 0, 7, "1g.18gb"
	return id, err
}

func (migDevice) Drain(t catalog.BufferType, _ uint64, dst []sampler.RawSample) ([]sampler.RawSample, error) {
	return dst, fmt.Errorf("get samples %s: %w", t, sampler.ErrNotSupported)
}

// Read answers utilization point reads as NVML does on a MIG instance
// (GetUtilizationRates: not supported), so utilization has neither buffers
// nor point reads there.
func (m migDevice) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	err := m.DeviceSource.Read(ids, out)
	for i, id := range ids {
		if id == catalog.MetricUtilGPU || id == catalog.MetricUtilMemory {
			out[i] = sampler.Reading{Err: fmt.Errorf("get utilization rates: %w", sampler.ErrNotSupported)}
		}
	}
	return err
}

func (migDevice) Processes(sampler.ProcessQuery, []sampler.Process) ([]sampler.Process, error) {
	return nil, nil // listed without utilization
}

func TestPrintSupportSaysWhatMIGCannot(t *testing.T) {
	src, err := sim.New(sim.Options{GPUs: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := printSupport(&buf, migSource{src}, catalog.Default()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, re := range []string{
		`(?m)^utilization_gpu\s.*\syes\s+no$`,
		`(?m)^processes\s+process\s+per-process\s+yes\s+yes$`,
		`(?m)^gpu 1 \(MIG instance 1g\.18gb of gpu 0\): utilization buffers and per-process utilization are not available under MIG$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %s:\n%s", re, out)
		}
	}
}
