// Package sim simulates NVIDIA GPUs for gpusampler: H200-like devices with
// driver-like sample buffers (finite depth, a period per buffer type, strict
// "newer than cursor" semantics, "nothing new" when idle), fast fields and
// slow state, shaped by a workload profile.
//
// Everything is deterministic for a seed and a clock: a value is a pure
// function of (seed, device, metric, sample time), so a buffer's content
// never depends on how often it is drained. Every simulated device reports
// Simulated = true so outputs mark its records.
package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/simprofile"
)

// Profiles lists the workload profiles by name; the list is owned by
// package simprofile so the configuration validates names without linking
// the simulator.
var Profiles = simprofile.Names()

// ValidProfile reports whether name is a known profile.
func ValidProfile(name string) bool { return simprofile.Valid(name) }

// Buffer depth and per-type period of the simulated driver buffers. Real
// drivers do not document these; gpusampler measures them (doctor). These
// are plausible values, not claims about a real GPU.
const (
	DefaultDepth = 120
)

var defaultPeriods = [catalog.NumBufferTypes]time.Duration{
	catalog.BufferTotalPower:  50 * time.Millisecond,
	catalog.BufferGPUUtil:     time.Second / 6,
	catalog.BufferMemoryUtil:  time.Second / 6,
	catalog.BufferEncoderUtil: time.Second / 6,
	catalog.BufferDecoderUtil: time.Second / 6,
	catalog.BufferSMClock:     100 * time.Millisecond,
	catalog.BufferMemoryClock: 100 * time.Millisecond,
	catalog.BufferModulePower: 50 * time.Millisecond,
	catalog.BufferJPEGUtil:    time.Second / 6,
	catalog.BufferOFAUtil:     time.Second / 6,
}

// H200-like identity and limits.
const (
	memoryTotalMiB = 143771
	powerLimitW    = 700
	slowdownTempC  = 89 // GPU slowdown threshold; thermal profile crosses it
	shutdownTempC  = 92
	maxOperTempC   = 87
	memMaxTempC    = 95
	maxSMClockMHz  = 1980
	memClockMHz    = 3201
)

// Options configure a simulated source.
type Options struct {
	// GPUs is the number of devices (1–64).
	GPUs int
	// Profile names the workload (see Profiles).
	Profile string
	// Seed makes runs reproducible; devices differ by index.
	Seed uint64
	// Now is the clock; nil means time.Now. Tests inject one.
	Now func() time.Time
	// Depth of every sample buffer (default DefaultDepth).
	Depth int
	// Periods overrides the per-type sample periods (zero entries keep the
	// defaults).
	Periods [catalog.NumBufferTypes]time.Duration
	// BootClock makes buffer timestamps count from a simulated boot time
	// instead of Unix time, like some drivers.
	BootClock bool
	// Script, when set for a device index, replaces the profile's load on
	// that device with scripted phases (tests of per-job accounting): its
	// utilization, its processes with their SM utilization and memory,
	// and the power that follows from the utilization. Other devices keep
	// the profile.
	Script map[int][]Phase
	// CPUs are the simulated machine's CPUs, which CPUAffinity splits
	// between two NUMA nodes (default: the CPUs this process may run on,
	// so that a process started unpinned is near every simulated GPU
	// even where a container or taskset allows only some of the host's).
	CPUs []int
}

// Source is a simulated backend.
type Source struct {
	opts  Options
	start time.Time
	devs  []*Device
	cat   *catalog.Catalog // the built-in catalog, whose metrics the devices simulate
}

// New returns a simulated source.
func New(opts Options) (*Source, error) {
	if opts.GPUs < 1 || opts.GPUs > 64 {
		return nil, fmt.Errorf("sim: gpus %d: must be between 1 and 64", opts.GPUs)
	}
	if opts.Profile == "" {
		opts.Profile = simprofile.Default
	}
	if !ValidProfile(opts.Profile) {
		return nil, fmt.Errorf("sim: unknown profile %q (known: %v)", opts.Profile, Profiles)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Depth <= 0 {
		opts.Depth = DefaultDepth
	}
	for i, p := range opts.Periods {
		if p <= 0 {
			opts.Periods[i] = defaultPeriods[i]
		}
	}
	if len(opts.CPUs) == 0 {
		opts.CPUs = allowedCPUs()
	}
	for i, ph := range opts.Script {
		if err := checkScript(ph); err != nil {
			return nil, fmt.Errorf("sim: script of gpu %d: %w", i, err)
		}
	}
	opts.CPUs = slices.Compact(slices.Sorted(slices.Values(opts.CPUs)))
	s := &Source{opts: opts, start: opts.Now(), cat: catalog.Default()}
	for i := range opts.GPUs {
		s.devs = append(s.devs, &Device{src: s, index: i})
	}
	return s, nil
}

// Name returns "sim".
func (s *Source) Name() string { return "sim" }

// Profile returns the workload profile's name.
func (s *Source) Profile() string { return s.opts.Profile }

// Devices returns the simulated devices.
func (s *Source) Devices() ([]sampler.DeviceSource, error) {
	out := make([]sampler.DeviceSource, len(s.devs))
	for i, d := range s.devs {
		out[i] = d
	}
	return out, nil
}

// Close does nothing.
func (s *Source) Close() error { return nil }

// bootOffset is how far the simulated boot lies before the start, so boot
// timestamps look like a machine up for a few days.
const bootOffset = 3*24*time.Hour + 17*time.Minute

// Device is one simulated GPU. Its methods follow sampler.DeviceSource's
// concurrency rules (one caller at a time); CallStats is safe anywhere.
type Device struct {
	src   *Source
	index int

	// energy integration state (owned by the caller of Read)
	energyAt time.Time
	energyMJ float64
	// gpmAt is the previous GPM snapshot's time (owned by the caller of
	// Read); zero before the first.
	gpmAt time.Time

	calls atomic.Uint64
	// Fault injection, set by tests: lost makes the device answer
	// ErrGPULost; hang, when non-nil, blocks every call until it is closed.
	mu     sync.Mutex
	lost   bool
	hang   chan struct{}
	events chan record.Event
	xids   atomic.Uint64
}

// SetLost makes the device answer every call with sampler.ErrGPULost (or
// recover when false). For fault-injection tests.
func (d *Device) SetLost(lost bool) {
	d.mu.Lock()
	d.lost = lost
	d.mu.Unlock()
}

// Hang makes the device's next driver calls block (like NVML calls when the
// firmware stops answering) until release is called. Calls already past
// the check are not affected. For watchdog tests: the test releases the
// hang, no wall-clock involved.
func (d *Device) Hang() (release func()) {
	ch := make(chan struct{})
	d.mu.Lock()
	d.hang = ch
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			if d.hang == ch {
				d.hang = nil
			}
			d.mu.Unlock()
			close(ch)
		})
	}
}

// InjectXID queues an XID critical-error event (as the driver's event set
// would deliver it) for WatchEvents. For fault-injection tests.
func (d *Device) InjectXID(code int) {
	d.xids.Add(1)
	d.eventsChan() <- record.Event{Kind: record.EventXID, Message: fmt.Sprintf("Xid %d (injected)", code),
		Attrs: []record.Attr{{Key: "xid", Value: fmt.Sprint(code)}}}
}

func (d *Device) eventsChan() chan record.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.events == nil {
		d.events = make(chan record.Event, 64)
	}
	return d.events
}

// WatchEvents delivers injected events until ctx ends. It implements
// sampler.EventWatcher.
func (d *Device) WatchEvents(ctx context.Context, emit func(record.Event)) error {
	ch := d.eventsChan()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			t := d.src.opts.Now().UnixNano()
			ev.StartNS, ev.EndNS = t, t
			emit(ev)
		}
	}
}

// isLost waits out an injected hang, then reports whether the device is
// lost.
func (d *Device) isLost() bool {
	d.mu.Lock()
	h := d.hang
	d.mu.Unlock()
	if h != nil {
		<-h
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}

// Identity returns an H200-like identity.
func (d *Device) Identity() (record.Device, error) {
	d.calls.Add(1)
	if d.isLost() {
		return record.Device{}, fmt.Errorf("identity: %w", sampler.ErrGPULost)
	}
	h := mix(d.src.opts.Seed, uint64(d.index), 0x1d)
	return record.Device{
		Index:             d.index,
		UUID:              fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", uint32(h), uint16(h>>32), uint16(h>>48), uint16(h>>20), h>>16&0xffffffffffff),
		Name:              "NVIDIA H200 (simulated)",
		PCIBusID:          fmt.Sprintf("00000000:%02X:00.0", 0x18+d.index*0x10%0xe0),
		Serial:            fmt.Sprintf("SIM%010d", h%1e10),
		MemoryTotalMiB:    memoryTotalMiB,
		DriverVersion:     "sim",
		CUDAVersion:       "12.8",
		VBIOSVersion:      "96.00.89.00.01",
		Backend:           "sim",
		Simulated:         true,
		SlowdownTempC:     slowdownTempC,
		ShutdownTempC:     shutdownTempC,
		MaxOperatingTempC: maxOperTempC,
		MemoryMaxTempC:    memMaxTempC,
		// A well-kept datacenter GPU.
		PersistenceMode: record.ModeEnabled,
		ECCMode:         record.ModeEnabled,
		Architecture:    "Hopper",
		ComputeMode:     "Default",
		MIGMode:         record.ModeDisabled,
	}, nil
}

// CPUAffinity places the simulated GPUs on two NUMA nodes: even GPUs are
// close to the first half of Options.CPUs, odd GPUs to the second half;
// with one CPU, every GPU to it.
func (d *Device) CPUAffinity() ([]int, error) {
	cpus := d.src.opts.CPUs
	n := len(cpus)
	if n < 2 {
		return slices.Clone(cpus), nil
	}
	if d.index%2 == 0 {
		return slices.Clone(cpus[:n/2]), nil
	}
	return slices.Clone(cpus[n/2:]), nil
}

// firstCPUs returns 0..n-1.
func firstCPUs(n int) []int {
	out := make([]int, max(n, 1))
	for i := range out {
		out[i] = i
	}
	return out
}

// CallStats counts the simulated driver calls (Drain counts 1, like the
// nvml backend's one-call drain).
func (d *Device) CallStats() sampler.CallStats {
	return sampler.CallStats{Calls: d.calls.Load()}
}

// Drain returns the samples of buffer t newer than cursor, like
// nvmlDeviceGetSamples: only the last Depth samples are kept.
func (d *Device) Drain(t catalog.BufferType, cursor uint64, dst []sampler.RawSample) ([]sampler.RawSample, error) {
	d.calls.Add(1)
	if d.isLost() {
		return dst, fmt.Errorf("drain %s: %w", t, sampler.ErrGPULost)
	}
	if t >= catalog.NumBufferTypes {
		return dst, fmt.Errorf("drain %s: %w", t, sampler.ErrNotSupported)
	}
	if t == catalog.BufferModulePower {
		return dst, fmt.Errorf("drain %s: %w", t, sampler.ErrNotSupported) // not a Grace-Hopper module
	}
	metric := d.src.cat.BufferMetric(t)
	opts := &d.src.opts
	period := opts.Periods[t]
	now := opts.Now()
	// Sample k is taken at epoch + k*period; the newest is k = floor(elapsed/period).
	epoch := d.epoch()
	newest := int64(now.Sub(epoch) / period)
	oldest := newest - int64(opts.Depth) + 1
	if c := int64(cursor); c > 0 {
		// first k whose timestamp is > cursor
		k := int64((time.Duration(c)*time.Microsecond - d.clockBase(epoch)) / period)
		for d.rawUS(epoch.Add(time.Duration(k)*period)) <= uint64(c) {
			k++ // timestamps are truncated to µs: step past the cursor exactly
		}
		if k > oldest {
			oldest = k
		}
	}
	n0 := len(dst)
	for k := oldest; k <= newest; k++ {
		at := epoch.Add(time.Duration(k) * period)
		v, ok := d.value(metric, at)
		if !ok {
			continue // the driver records nothing for an idle engine
		}
		dst = append(dst, sampler.RawSample{TimeUS: d.rawUS(at), Value: v})
	}
	if len(dst) == n0 {
		return dst, fmt.Errorf("drain %s: %w", t, sampler.ErrNothingNew)
	}
	return dst, nil
}

// epoch is a fixed instant all sample schedules count from (aligned so that
// timestamps are whole microseconds).
func (d *Device) epoch() time.Time {
	return d.src.start.Truncate(time.Second).Add(-time.Hour)
}

// clockBase converts epoch to the raw clock (µs since Unix or since boot).
func (d *Device) clockBase(epoch time.Time) time.Duration {
	if d.src.opts.BootClock {
		return bootOffset - d.src.start.Sub(epoch)
	}
	return time.Duration(epoch.UnixNano())
}

func (d *Device) rawUS(at time.Time) uint64 {
	epoch := d.epoch()
	return uint64((d.clockBase(epoch) + at.Sub(epoch)) / time.Microsecond)
}

// Read returns fields, slow state and point reads.
func (d *Device) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	d.calls.Add(1)
	if d.isLost() {
		return fmt.Errorf("read: %w", sampler.ErrGPULost)
	}
	now := d.src.opts.Now()
	gpm := d.gpmSnapshot(ids, now)
	for i, id := range ids {
		m, ok := d.src.cat.Get(id)
		if !ok {
			out[i] = sampler.Reading{Err: fmt.Errorf("metric %d: %w", id, sampler.ErrNotSupported)}
			continue
		}
		if m.Src.Kind == catalog.FromGPM {
			if gpm != nil {
				out[i] = sampler.Reading{Err: gpm}
				continue
			}
			out[i] = sampler.Reading{Value: d.gpmValue(id, now), TimeNS: now.UnixNano()}
			continue
		}
		if m.Src.Kind == catalog.FromQuery {
			d.calls.Add(1) // every point query is its own driver call
		}
		v, ok := d.pointValue(id, now)
		if !ok {
			out[i] = sampler.Reading{Err: fmt.Errorf("%s: %w", m.Name, sampler.ErrNotSupported)}
			continue
		}
		out[i] = sampler.Reading{Value: v, TimeNS: now.UnixNano()}
	}
	return nil
}

// pointValue is a metric's current value; ok is false for what the
// simulated H200 does not support.
func (d *Device) pointValue(id catalog.MetricID, now time.Time) (float64, bool) {
	switch id {
	case catalog.MetricModulePower, catalog.MetricFanSpeed, catalog.MetricRetiredPagesPending:
		return 0, false // H200 SXM: no module power, no fan, rows remapped instead of pages retired
	case catalog.MetricUtilGPU, catalog.MetricUtilMemory, catalog.MetricUtilEncoder, catalog.MetricUtilDecoder,
		catalog.MetricUtilJPEG, catalog.MetricUtilOFA:
		v, ok := d.value(id, now)
		if !ok {
			return 0, true // the point query answers 0 on an idle engine
		}
		return v, true
	case catalog.MetricEnergy:
		return d.energy(now), true
	case catalog.MetricXIDCount:
		return float64(d.xids.Load()), true
	}
	return d.value(id, now)
}

// energy integrates instant power in 10 ms steps from the last read.
func (d *Device) energy(now time.Time) float64 {
	if d.energyAt.IsZero() {
		d.energyAt = now
		d.energyMJ = 1.234e9 + float64(mix(d.src.opts.Seed, uint64(d.index), 0xe)%1e6)
		return math.Round(d.energyMJ)
	}
	const step = 10 * time.Millisecond
	for t := d.energyAt; t.Before(now); t = t.Add(step) {
		dt := step
		if rem := now.Sub(t); rem < dt {
			dt = rem
		}
		p, _ := d.value(catalog.MetricPowerInstant, t)
		d.energyMJ += p * dt.Seconds() * 1000
	}
	d.energyAt = now
	return math.Round(d.energyMJ)
}

// gpmSnapshot takes the simulated GPM snapshot of a Read that asks for GPM
// metrics (one driver call). Like NVML, the values need two snapshots at
// least sampler.MinGPMInterval apart: the first read, or one too soon after
// the previous, answers ErrNothingNew (and a read too soon keeps the older
// snapshot). It returns nil when values are ready.
func (d *Device) gpmSnapshot(ids []catalog.MetricID, now time.Time) error {
	for _, id := range ids {
		if m, ok := d.src.cat.Get(id); ok && m.Src.Kind == catalog.FromGPM {
			d.calls.Add(1)
			switch {
			case d.gpmAt.IsZero():
				d.gpmAt = now
				return fmt.Errorf("gpm: first snapshot: %w", sampler.ErrNothingNew)
			case now.Sub(d.gpmAt) < sampler.MinGPMInterval:
				return fmt.Errorf("gpm: snapshots %v apart: %w", now.Sub(d.gpmAt), sampler.ErrNothingNew)
			}
			d.gpmAt = now
			return nil
		}
	}
	return nil
}
