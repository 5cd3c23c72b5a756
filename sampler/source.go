package sampler

import (
	"context"
	"errors"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Errors every backend maps its failures onto, once, at its boundary. Test
// with errors.Is; backends wrap them with detail.
var (
	// ErrNotSupported: the device or driver cannot give this metric. The
	// engine stops asking for it (probe once, cache).
	ErrNotSupported = errors.New("sampler: not supported")
	// ErrNothingNew: a sample buffer holds nothing newer than the cursor.
	// Normal on an idle GPU; distinct from a real zero.
	ErrNothingNew = errors.New("sampler: nothing new")
	// ErrGPULost: the device fell off the bus or stopped answering.
	ErrGPULost = errors.New("sampler: gpu is lost")
	// ErrNoPermission: the caller lacks the privilege for this query.
	ErrNoPermission = errors.New("sampler: no permission")
	// ErrLibraryNotFound: the driver library could not be loaded.
	ErrLibraryNotFound = errors.New("sampler: driver library not found")
	// ErrDriverNotLoaded: the library loaded but the kernel driver is not
	// running, or its version does not match the library.
	ErrDriverNotLoaded = errors.New("sampler: driver not loaded")
	// ErrTimeout: a call did not return in time.
	ErrTimeout = errors.New("sampler: timeout")
	// ErrOldDriver: the installed driver lacks the function (or field)
	// a metric needs; a newer driver has it. Errors that wrap it wrap
	// ErrNotSupported too, so the engine treats both alike; doctor tells
	// them apart.
	ErrOldDriver = errors.New("sampler: absent from this driver version")
)

// RawSample is one entry of a driver sample buffer, as the driver gives it.
type RawSample struct {
	// TimeUS is the driver's timestamp in microseconds, on the driver's clock
	// (Unix time on most drivers, boot time on some). It doubles as the
	// drain cursor.
	TimeUS uint64
	// Value in the metric's base unit (the backend scales, e.g. mW → W).
	Value float64
}

// Reading is the result of reading one metric with DeviceSource.Read.
type Reading struct {
	// Value in the metric's base unit.
	Value float64
	// TimeNS is when the value was taken (Unix ns); 0 means "now".
	TimeNS int64
	// Err is this value's own error (each field has its own return code).
	// ErrNotSupported makes the engine stop asking.
	Err error
}

// Source is a backend: the NVML driver or the simulator. It enumerates the
// devices the engine samples. Every backend passes the conformance suite in
// package sampler/sourcetest, which checks the rules written here.
type Source interface {
	// Name is a short backend name ("nvml", "sim").
	Name() string
	// Devices opens and returns every device. The engine calls it once.
	Devices() ([]DeviceSource, error)
	// Close releases the backend after all devices are done.
	Close() error
}

// DeviceSource is one GPU as a backend exposes it.
//
// Concurrency: the engine calls a DeviceSource's methods from that device's
// loop goroutine only, one call at a time. Different devices are called
// concurrently.
type DeviceSource interface {
	// Identity returns the device's identity (UUID, name, thresholds...).
	// On error the Device still carries its Index (and what else is
	// known): a device that does not answer at start is sampled under that
	// index once it does.
	Identity() (record.Device, error)
	// Drain appends to dst every sample of buffer type t with a timestamp
	// strictly newer than cursor (a raw driver timestamp, 0 for "all"), in
	// any order, and returns the extended slice. It returns ErrNothingNew
	// when there is none, ErrNotSupported when the device lacks the type.
	Drain(t catalog.BufferType, cursor uint64, dst []RawSample) ([]RawSample, error)
	// Read reads the metrics in ids into out (len(out) == len(ids)), each with
	// its own error. Field metrics are read in one batch call; query metrics
	// with point queries; a buffer metric asks for its current value
	// (a point read). The returned error is for the whole call (device
	// lost); per-value errors go in out[i].Err.
	Read(ids []catalog.MetricID, out []Reading) error
}

// CallStats is a backend's own cost on one device: how many C calls it made
// into the driver and the time they took.
type CallStats struct {
	Calls   uint64
	Latency time.Duration
}

// CallCounter is implemented by device sources that count their driver
// calls. The engine reports calls per second and samples per call from it.
// CallStats may be called from any goroutine, concurrently with the
// DeviceSource's other methods.
type CallCounter interface {
	CallStats() CallStats
}

// CallBreakdown is implemented by device sources that count their driver
// calls per function: CallStats' calls split by the function called. Safe
// from any goroutine.
type CallBreakdown interface {
	CallsByFunction() map[string]uint64
}

// BufferCapacitor is implemented by device sources that can tell how many
// samples a driver buffer holds (NVML's size query). The engine then sizes
// the drain interval from depth × period from the first drain, instead of
// learning the depth from the largest drain seen (which underestimates it
// while the buffer is still filling). It is called from the device's loop
// goroutine, like the DeviceSource methods.
type BufferCapacitor interface {
	// BufferCapacity returns the number of samples buffer type t holds, or
	// 0 when unknown.
	BufferCapacity(t catalog.BufferType) int
}

// EventWatcher is implemented by device sources that deliver driver events
// (XID critical errors, ECC errors, power-source and clock changes). The
// engine runs WatchEvents on its own goroutine per device, concurrently with
// the device's other methods, so a blocking wait never delays sampling.
type EventWatcher interface {
	// WatchEvents blocks until ctx ends, calling emit once per driver event
	// (emit sets Event.Device). It returns early only on an error that
	// makes watching impossible (unsupported, device lost); the engine
	// retries after the lost-device retry interval.
	WatchEvents(ctx context.Context, emit func(record.Event)) error
}

// SourceEventWatcher is implemented by sources that watch the driver events
// of many devices with one waiter (NVML: one event set for every GPU),
// which costs less than a waiter per device. The engine prefers it to the
// devices' EventWatcher and runs it on one goroutine.
type SourceEventWatcher interface {
	// WatchAllEvents blocks until ctx ends, calling emit once per driver
	// event of the devices whose Device.Index is in indexes (the source
	// sets Event.Device). Like EventWatcher.WatchEvents, it returns early
	// only when watching is impossible; the engine then retries after the
	// lost-device retry interval, or stops on ErrNotSupported.
	WatchAllEvents(ctx context.Context, indexes []int, emit func(record.Event)) error
}

// CPUAffinityReporter is implemented by device sources that know which
// CPUs are close to the GPU (on its NUMA node; NVML:
// nvmlDeviceGetCpuAffinity). A process that feeds the GPU from other CPUs
// pays for every transfer and launch across the socket interconnect.
// CPUAffinity may be called from any goroutine, concurrently with the
// DeviceSource's other methods.
type CPUAffinityReporter interface {
	// CPUAffinity returns the ideal CPUs' numbers, ascending.
	CPUAffinity() ([]int, error)
}

// Reopener is implemented by device sources that can re-acquire a lost
// device by its UUID (NVML: nvmlDeviceGetHandleByUUID) without
// re-initializing the library, which would disturb every other device. The
// engine calls it from the device's loop before asking Identity again. The
// uuid is empty when the device has not answered since the start: then it
// is re-acquired by its index.
type Reopener interface {
	Reopen(uuid string) error
}

// Observer sees every sample a device loop publishes, on that device's
// loop goroutine, right after publishing (live diagnoses: package
// diagnose). Observe must be fast and must not retain samples (the slice is
// reused); it reports what it finds through Engine.Emit. Observe is called
// concurrently for different devices. An Observer that also has a Flush()
// method is flushed once after the device loops end, before the outputs
// are flushed, so what it emits then still reaches them.
type Observer interface {
	Observe(dev *record.Device, samples []record.Sample)
}

// ProcessObserver is an Observer that also sees each device's process list
// after every process poll, on that device's loop goroutine: the PIDs on
// the GPU at nowNS (engine clock). ObserveProcesses must be fast and must
// neither modify nor retain pids.
type ProcessObserver interface {
	ObserveProcesses(dev *record.Device, pids []uint32, nowNS int64)
}

// EventObserver is an Observer that also sees every event published
// through Engine.Emit (the process events of each poll come right before
// the ProcessObserver call that ends the poll), on the emitting goroutine,
// before the event is queued. ObserveEvent must be fast, must neither
// modify nor retain ev or its slices, and must not call Emit.
type EventObserver interface {
	ObserveEvent(ev *record.Event)
}

// Observers returns one Observer that hands every call to each of obs in
// turn: Observe to all, ObserveProcesses, ObserveEvent and Flush to those
// that implement them. Nil entries are skipped.
func Observers(obs ...Observer) Observer {
	var m multiObserver
	for _, o := range obs {
		if o != nil {
			m = append(m, o)
		}
	}
	return m
}

type multiObserver []Observer

func (m multiObserver) Observe(dev *record.Device, samples []record.Sample) {
	for _, o := range m {
		o.Observe(dev, samples)
	}
}

func (m multiObserver) ObserveProcesses(dev *record.Device, pids []uint32, nowNS int64) {
	for _, o := range m {
		if po, ok := o.(ProcessObserver); ok {
			po.ObserveProcesses(dev, pids, nowNS)
		}
	}
}

func (m multiObserver) ObserveEvent(ev *record.Event) {
	for _, o := range m {
		if eo, ok := o.(EventObserver); ok {
			eo.ObserveEvent(ev)
		}
	}
}

func (m multiObserver) Flush() {
	for _, o := range m {
		if f, ok := o.(interface{ Flush() }); ok {
			f.Flush()
		}
	}
}
