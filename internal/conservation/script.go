package conservation

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// Script is a deterministic sampler.Source. Each device's power and GPU
// utilization buffers hold a fixed series of samples, evenly spaced, in
// phases of PerPhase samples per buffer spanning Phase each; the test
// releases phases one by one (Release) and the engine drains what is
// released. Every other metric answers ErrNotSupported, so the engine
// publishes exactly the released samples. The first process poll of each
// device returns its scripted processes, later polls none.
//
// Timestamps start at Start (aligned to Phase) and lie within the
// engine's realtime tolerance, so they reach outputs unchanged (µs × 1000).
type Script struct {
	// Start is the first sample's time; Phase the span of one phase;
	// PerPhase the samples per buffer per phase.
	Start    time.Time
	Phase    time.Duration
	PerPhase int
	// First is the first phase the buffers hold (StartAt): a restarted
	// process goes on where the previous one stopped.
	First    int
	released atomic.Int64
	devs     []*scriptDevice
}

// NewScript returns a script whose first phase starts at the first
// multiple of phase after now+lead.
func NewScript(now time.Time, lead, phase time.Duration, perPhase int) *Script {
	start := now.Add(lead).Truncate(phase).Add(phase)
	s := &Script{Start: start, Phase: phase, PerPhase: perPhase}
	for _, id := range ScriptDevices() {
		s.devs = append(s.devs, &scriptDevice{s: s, id: id})
	}
	return s
}

// ScriptDevices returns the script's device identities: a GPU and a MIG
// instance on it, every field filled.
func ScriptDevices() []record.Device {
	return []record.Device{
		{Index: 0, UUID: "GPU-5c1e7a2d-0000-4000-8000-00000000c0de", Name: "Scripted H200", PCIBusID: "00000000:17:00.0",
			Serial: "1650924061234", MemoryTotalMiB: 143771, DriverVersion: "570.86.15", Backend: "script", Simulated: true,
			CUDAVersion: "12.8", VBIOSVersion: "96.00.89.00.01",
			SlowdownTempC: 87, ShutdownTempC: 92, MaxOperatingTempC: 85, MemoryMaxTempC: 95,
			PersistenceMode: record.ModeEnabled, ECCMode: record.ModeEnabled, MIGMode: record.ModeEnabled, Generation: 1},
		{Index: 1, UUID: "MIG-9a1b2c3d-0000-4000-8000-00000000beef", Name: "Scripted H200 MIG 1g.18gb", PCIBusID: "00000000:17:00.0",
			Serial: "1650924061234", MemoryTotalMiB: 16384, DriverVersion: "570.86.15", Backend: "script", Simulated: true,
			CUDAVersion: "12.8", VBIOSVersion: "96.00.89.00.01",
			SlowdownTempC: 87, ShutdownTempC: 92, MaxOperatingTempC: 85, MemoryMaxTempC: 95,
			MIG: true, Parent: 0, GPUInstanceID: 3, ComputeInstanceID: 1, MIGProfile: "1g.18gb",
			PersistenceMode: record.ModeEnabled, ECCMode: record.ModeDisabled, MIGMode: record.ModeUnsupported, Generation: 1},
	}
}

// scriptBuffers are the buffer types the script fills.
var scriptBuffers = []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferGPUUtil}

// StartAt makes phase the first one the buffers hold, as if the phases
// before it were drained by an earlier process. Call it before the engine
// runs.
func (s *Script) StartAt(phase int) {
	s.First = phase
	s.released.Store(int64(phase))
}

// Release makes the next phase visible to the engine's drains and returns
// how many phases are released.
func (s *Script) Release() int { return int(s.released.Add(1)) }

// Released returns how many phases are released.
func (s *Script) Released() int { return int(s.released.Load()) }

func (s *Script) stepUS() uint64 { return uint64(s.Phase/time.Microsecond) / uint64(s.PerPhase) }

func (s *Script) timeUS(k int) uint64 { return uint64(s.Start.UnixMicro()) + uint64(k)*s.stepUS() }

func scriptValue(t catalog.BufferType, dev, k int) float64 {
	if t == catalog.BufferTotalPower {
		return 100 + float64(dev)*10 + float64(k%37)*0.25 + 0.125
	}
	return float64((k*7 + dev*3) % 101)
}

// Samples returns, in publish order per device and buffer, every sample of
// phases [from, to) as the engine publishes them.
func (s *Script) Samples(from, to int) []record.Sample {
	var out []record.Sample
	for _, d := range s.devs {
		for _, t := range scriptBuffers {
			m := catalog.Default().BufferMetric(t)
			for k := from * s.PerPhase; k < to*s.PerPhase; k++ {
				out = append(out, record.Sample{TimeNS: int64(s.timeUS(k)) * 1000, Value: scriptValue(t, d.id.Index, k),
					Device: uint16(d.id.Index), Metric: m})
			}
		}
	}
	return out
}

// ScriptProcesses returns the processes the first poll of device dev
// returns (a MIG instance has no per-process utilization).
func ScriptProcesses(dev int) []sampler.Process {
	if dev == 1 {
		return []sampler.Process{{PID: 4242, Name: "python3", Type: "C", Cmdline: "python3 train.py --mig",
			UsedMemoryMiB: 9000, HasMemory: true}}
	}
	return []sampler.Process{
		{PID: 1234, Name: "python3", Type: "C", Cmdline: "python3 train.py --epochs 3", UsedMemoryMiB: 70000,
			HasMemory: true, SMUtil: 87, MemUtil: 41, EncUtil: 0, DecUtil: 2, HasUtil: true, TimeUS: 1},
		{PID: 77, Name: "Xorg", Type: "G", UsedMemoryMiB: 12, HasMemory: true, SMUtil: 1, HasUtil: true, TimeUS: 2},
	}
}

// Name implements sampler.Source.
func (s *Script) Name() string { return "script" }

// Devices implements sampler.Source.
func (s *Script) Devices() ([]sampler.DeviceSource, error) {
	out := make([]sampler.DeviceSource, len(s.devs))
	for i, d := range s.devs {
		out[i] = d
	}
	return out, nil
}

// Close implements sampler.Source.
func (s *Script) Close() error { return nil }

type scriptDevice struct {
	s      *Script
	id     record.Device
	mu     sync.Mutex
	polled bool
}

func (d *scriptDevice) Identity() (record.Device, error) { return d.id, nil }

func (d *scriptDevice) Drain(t catalog.BufferType, cursor uint64, dst []sampler.RawSample) ([]sampler.RawSample, error) {
	if t != catalog.BufferTotalPower && t != catalog.BufferGPUUtil {
		return dst, fmt.Errorf("script: buffer %s: %w", t, sampler.ErrNotSupported)
	}
	n := len(dst)
	for k := d.s.First * d.s.PerPhase; k < d.s.Released()*d.s.PerPhase; k++ {
		if ts := d.s.timeUS(k); ts > cursor {
			dst = append(dst, sampler.RawSample{TimeUS: ts, Value: scriptValue(t, d.id.Index, k)})
		}
	}
	if len(dst) == n {
		return dst, sampler.ErrNothingNew
	}
	return dst, nil
}

func (d *scriptDevice) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	for i := range out {
		out[i] = sampler.Reading{Err: sampler.ErrNotSupported}
	}
	return nil
}

// Processes implements sampler.ProcessSource.
func (d *scriptDevice) Processes(q sampler.ProcessQuery, dst []sampler.Process) ([]sampler.Process, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.polled {
		return dst, nil
	}
	d.polled = true
	return append(dst, ScriptProcesses(d.id.Index)...), nil
}
