package sampler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/backoff"
	"github.com/gpusampler/gpusampler/record"
)

// Default rates. The driver buffers give the resolution; the fast fields and
// slow state stay modest because every NVML call costs the workload time.
const (
	// DefaultDrainInterval is the freshness limit of the primary buffers
	// (Config.PrimaryBuffers).
	DefaultDrainInterval = time.Second
	// DefaultSecondaryDrainInterval is the freshness limit of the other
	// buffers: memory clock and the media engines (encoder, decoder, JPEG,
	// OFA; idle on most GPUs). Each is still drained at half its span
	// when that is sooner, so none loses a sample.
	DefaultSecondaryDrainInterval = 10 * time.Second
	// DefaultFieldInterval: most fields are counters (energy, throttle
	// time), which lose nothing read once a second; instant power comes
	// from the power buffer at full driver resolution.
	DefaultFieldInterval = time.Second
	// DefaultSlowInterval: slow state (temperature, pstate, memory used,
	// graphics and video clocks, throttle reasons) is one point query per
	// value, and changes on a scale of seconds.
	DefaultSlowInterval = 3 * time.Second
	// DefaultRareInterval is how often rarely-changing slow state (metrics
	// marked Rare: limits, link settings, health counters) is read.
	DefaultRareInterval = 30 * time.Second
	// DefaultRingSize is the per-device ring capacity in samples, so the
	// capacity of each output's lane in every ring: 8192 samples hold
	// about 17 s of a GPU's samples at the default rates (about 470
	// samples/s on a busy real GPU), more than a Write may take
	// (record.DefaultWriteTimeout, 10 s) before the pump gives up on it.
	// A lane starts at 256 samples and doubles when its output falls
	// behind, up to RingSize x 24 B (192 KiB at the default), per device
	// and per output; it does not shrink.
	DefaultRingSize = 1 << 13
	// MinSlowInterval bounds slow point queries (they cost milliseconds).
	MinSlowInterval = time.Second
	// DefaultGPMInterval is the GPM (profiling) read period: each read
	// takes one snapshot and yields the metrics over the time since the
	// previous one, so a longer period averages over more, and loses
	// nothing.
	DefaultGPMInterval = 5 * time.Second
	// MinGPMInterval: GPM needs snapshots at least this far apart.
	MinGPMInterval = 100 * time.Millisecond
	// MinDrainInterval is the shortest drain interval: a buffer whose half
	// span is shorter is drained at this interval.
	MinDrainInterval = 20 * time.Millisecond
	// DefaultLostRetryInterval bounds the period of lost-device probes
	// (see Config.LostRetryInterval).
	DefaultLostRetryInterval = 5 * time.Second
	// DefaultCallTimeout is how long one driver call may take before the
	// watchdog marks its device hung (NVML calls can hang for tens of
	// seconds when firmware stops answering).
	DefaultCallTimeout = 10 * time.Second
	// DefaultShutdownTimeout bounds the outputs' final flush and Close
	// once Run's context ends (above a buffer's default close timeout,
	// 5 s, so a buffer can hand over what it holds).
	DefaultShutdownTimeout = 10 * time.Second
	// costlyFieldRate is the field rate above which the engine says once
	// what it costs.
	costlyFieldRate = 50
)

// Config holds the engine's settings. The zero value means the defaults.
type Config struct {
	// DrainInterval is the freshness limit of the primary buffers
	// (PrimaryBuffers): the longest time between two drains of one of
	// them. Each buffer type is drained on its own schedule, at half its
	// measured span (depth × period, the capacity the backend reports when
	// it does) but at least MinDrainInterval and at most its class's
	// freshness limit; a suspected loss halves that buffer's limit. Until
	// a buffer's span is known (an idle engine's buffer stays empty) it is
	// drained at its class's freshness limit; the first drain to find it
	// full counts what the driver may have overwritten.
	DrainInterval time.Duration
	// SecondaryDrainInterval is the freshness limit of every buffer type
	// not in PrimaryBuffers (default DefaultSecondaryDrainInterval, or
	// DrainInterval when that is longer; at least DrainInterval).
	SecondaryDrainInterval time.Duration
	// PrimaryBuffers are the buffer types held to DrainInterval; nil means
	// DefaultPrimaryBuffers.
	PrimaryBuffers []catalog.BufferType
	// FieldInterval is the fast-field period (one batched read per tick).
	FieldInterval time.Duration
	// SlowInterval is the slow-state period (≥ MinSlowInterval).
	SlowInterval time.Duration
	// RareInterval is the period of slow state marked Rare in the catalog
	// (≥ SlowInterval; default DefaultRareInterval).
	RareInterval time.Duration
	// GPMInterval is the period of GPM profiling reads (default
	// DefaultGPMInterval, ≥ MinGPMInterval).
	GPMInterval time.Duration
	// ProcessInterval is the per-process poll period (ProcessSource):
	// default DefaultProcessInterval, at least MinProcessInterval (the
	// queries cost milliseconds); negative turns per-process sampling off.
	ProcessInterval time.Duration
	// ProcessCmdline adds each process's command line to its events
	// (opt-in: command lines can hold secrets), truncated to
	// ProcessCmdlineMax bytes (default DefaultCmdlineMax).
	ProcessCmdline    bool
	ProcessCmdlineMax int
	// LostRetryInterval is the longest period at which a lost device is
	// probed again (default DefaultLostRetryInterval), from the moment it
	// was lost on: a device that did not answer at start, or stopped
	// answering. For its first LostFastProbeWindow it is probed at half its
	// shortest buffer span (DrainInterval while no span is known), at least
	// MinProbeInterval apart, so that a device back within its buffers'
	// span loses nothing; then every LostRetryInterval. A probe
	// re-acquires it by UUID (by index when it never answered).
	LostRetryInterval time.Duration
	// CallTimeout is the watchdog's limit for one driver call (default
	// DefaultCallTimeout; negative turns the watchdog off).
	CallTimeout time.Duration
	// Observer, when set, sees every sample a device loop publishes (live
	// diagnoses, job accounting); see Observer, ProcessObserver,
	// EventObserver, and Observers to set several.
	Observer Observer
	// AfterFinalFlush, when set, is called once by Run after the device
	// loops have stopped and every output has flushed (or been given up
	// on) the samples published for it and finished (record.Finisher:
	// handed on what its wrappers held, refreshed its own counters),
	// before the outputs close: Stats and the outputs' own counters
	// (record.StatsReporter) then count the final flush, and the events
	// it emits (Engine.Emit) are flushed to every output before its
	// Close, except to one that refused the last batch offered to it at
	// stop (unavailable, or a Write that timed out): for that one they
	// count in OutputStats.EventsDropped. The agent sends its final
	// self-metrics from it.
	AfterFinalFlush func()
	// RingSize is the per-device ring capacity in samples (each output's
	// lane in a ring holds that many), rounded up to a power of two:
	// see DefaultRingSize.
	RingSize int
	// Select, when set, limits sampling to the metrics it returns true for.
	Select func(*catalog.Metric) bool
	// Devices, when set, limits sampling to the devices it returns true for.
	Devices func(record.Device) bool
	// Logger receives the engine's logs (never per sample).
	Logger *slog.Logger
	// Catalog defaults to catalog.Default().
	Catalog *catalog.Catalog
	// Cursors, when set, keeps the drain cursors across runs (see
	// CursorStore): each GPU's buffers are drained from where the last run
	// stopped. The cursors saved are those every output has taken the
	// samples before (a crash skips nothing; see ack.go), saved as soon as
	// an output has taken more, at least every CursorSaveInterval, and after
	// the outputs' final flush. A restored cursor later than now, or than the newest
	// sample its buffer holds (the wall clock was stepped back since it was
	// saved), is discarded: that buffer is drained as at a fresh start,
	// counted in DeviceStats.CursorsDiscarded and logged once.
	Cursors CursorStore
	// ShutdownTimeout bounds how long Run waits, once its context ends,
	// for the outputs' final flush and Close (default
	// DefaultShutdownTimeout). An output still busy then — blocked in a
	// Write or Close by a sink or reader that stopped taking data — is
	// given up: what it had not delivered is counted as failed
	// (OutputStats.Unflushed) and Run returns an error naming it.
	ShutdownTimeout time.Duration
	// Clock schedules the device loops, the watchdog and lost-device
	// probes, and is the wall time driver timestamps are classified
	// against; nil means SystemClock. Output pumps flush on the system
	// clock.
	Clock Clock
}

// DefaultPrimaryBuffers returns the buffer types held to
// Config.DrainInterval by default: board and module power, GPU and memory
// utilization, and the SM clock, what a person reads first.
func DefaultPrimaryBuffers() []catalog.BufferType {
	return []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferModulePower, catalog.BufferGPUUtil,
		catalog.BufferMemoryUtil, catalog.BufferSMClock}
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.DrainInterval == 0 {
		out.DrainInterval = DefaultDrainInterval
	}
	if out.SecondaryDrainInterval == 0 {
		out.SecondaryDrainInterval = max(DefaultSecondaryDrainInterval, out.DrainInterval)
	}
	if out.PrimaryBuffers == nil {
		out.PrimaryBuffers = DefaultPrimaryBuffers()
	}
	if out.FieldInterval == 0 {
		out.FieldInterval = DefaultFieldInterval
	}
	if out.SlowInterval == 0 {
		out.SlowInterval = DefaultSlowInterval
	}
	if out.RareInterval == 0 {
		out.RareInterval = max(DefaultRareInterval, out.SlowInterval)
	}
	if out.GPMInterval == 0 {
		out.GPMInterval = DefaultGPMInterval
	}
	if out.ProcessInterval == 0 {
		out.ProcessInterval = DefaultProcessInterval
	}
	if out.ProcessCmdlineMax <= 0 {
		out.ProcessCmdlineMax = DefaultCmdlineMax
	}
	if out.LostRetryInterval == 0 {
		out.LostRetryInterval = DefaultLostRetryInterval
	}
	if out.CallTimeout == 0 {
		out.CallTimeout = DefaultCallTimeout
	}
	if out.RingSize == 0 {
		out.RingSize = DefaultRingSize
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Catalog == nil {
		out.Catalog = catalog.Default()
	}
	if out.Clock == nil {
		out.Clock = SystemClock()
	}
	if out.ShutdownTimeout <= 0 {
		out.ShutdownTimeout = DefaultShutdownTimeout
	}
	switch {
	case out.DrainInterval < 0:
		return out, fmt.Errorf("drain interval %v: must be positive", out.DrainInterval)
	case out.SecondaryDrainInterval < out.DrainInterval:
		return out, fmt.Errorf("secondary drain interval %v: must be at least the drain interval %v", out.SecondaryDrainInterval, out.DrainInterval)
	case out.FieldInterval < 0:
		return out, fmt.Errorf("field interval %v: must be positive", out.FieldInterval)
	case out.SlowInterval < MinSlowInterval:
		return out, fmt.Errorf("slow interval %v: must be at least %v", out.SlowInterval, MinSlowInterval)
	case out.RareInterval < out.SlowInterval:
		return out, fmt.Errorf("rare interval %v: must be at least the slow interval %v", out.RareInterval, out.SlowInterval)
	case out.GPMInterval < MinGPMInterval:
		return out, fmt.Errorf("gpm interval %v: must be at least %v (GPM compares two snapshots)", out.GPMInterval, MinGPMInterval)
	case out.ProcessInterval > 0 && out.ProcessInterval < MinProcessInterval:
		return out, fmt.Errorf("process interval %v: must be at least %v (process queries cost milliseconds)", out.ProcessInterval, MinProcessInterval)
	case out.LostRetryInterval < 0:
		return out, fmt.Errorf("lost retry interval %v: must be positive", out.LostRetryInterval)
	case out.RingSize < 0:
		return out, fmt.Errorf("ring size %d: must be positive", out.RingSize)
	}
	return out, nil
}

// Engine samples every device of a Source, one loop per device, publishing
// into one ring per device, and fans out to outputs through one pump each.
//
// Lifecycle: New, then AddOutput any number of times, then Run until its
// context ends; Run stops the device loops (after a final drain), flushes
// every pump and closes every output. AddOutput and RemoveOutput may also be
// called while Run is running.
type Engine struct {
	cfg     Config
	src     Source
	log     *slog.Logger
	loops   []*deviceLoop
	events  *eventLog
	started atomic.Bool

	cursorSaveErrors atomic.Uint64
	// ackKick wakes the cursor saver when an output has taken more.
	ackKick      chan struct{}
	cursorWarned atomic.Bool // a discarded drain cursor was logged
	host         *hostOffset // realtime − boottime, shared by the loops

	mu      sync.Mutex
	pumps   []*pump
	runCtx  context.Context
	closing bool // Run is stopping the pumps: no output may be added
	pumpsWG sync.WaitGroup
}

// New opens src's devices and prepares the engine. It does not start
// sampling.
func New(src Source, cfg Config) (*Engine, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	devs, err := src.Devices()
	if err != nil {
		return nil, fmt.Errorf("open %s devices: %w", src.Name(), err)
	}
	e := &Engine{cfg: c, src: src, log: c.Logger, events: newEventLog(4096), host: newHostOffset()}
	if c.Cursors != nil {
		e.ackKick = make(chan struct{}, 1)
	}
	if c.FieldInterval > 0 && time.Second/c.FieldInterval > costlyFieldRate {
		rate := float64(time.Second) / float64(c.FieldInterval)
		e.log.Warn("high field rate: each tick is one batched NVML call per GPU holding the driver lock; NVIDIA measured ~2% workload slowdown from 10 Hz sampling",
			"rate_hz", rate, "calls_per_gpu_per_s", rate)
	}
	for _, ds := range devs {
		id, err := ds.Identity()
		if errors.Is(err, ErrNotSupported) {
			return nil, fmt.Errorf("open %s device: %w", src.Name(), err)
		}
		if err != nil {
			// A GPU that does not answer at start is sampled once it does:
			// its loop starts lost and probes it every LostRetryInterval.
			id = record.Device{Index: id.Index, UUID: id.UUID, Backend: src.Name()}
		}
		if c.Devices != nil && !c.Devices(id) {
			continue
		}
		l := newDeviceLoop(e, ds, id)
		l.startErr = err
		e.loops = append(e.loops, l)
	}
	if len(e.loops) == 0 {
		return nil, fmt.Errorf("open %s devices: no device selected (%d found)", src.Name(), len(devs))
	}
	return e, nil
}

// Devices returns the current identity of every sampled device.
func (e *Engine) Devices() []record.Device {
	out := make([]record.Device, len(e.loops))
	for i, l := range e.loops {
		out[i] = *l.identity.Load()
	}
	return out
}

// SetAttribution sets whose work device index runs (see record.Attribution). A
// change takes effect from the next batch each output receives: the device's
// identity is re-sent with a new Generation, so outputs retire the old
// label set. It reports whether anything changed; an unknown index changes
// nothing.
func (e *Engine) SetAttribution(index int, a record.Attribution) bool {
	for _, l := range e.loops {
		if int(l.index) == index {
			return l.setAttribution(a)
		}
	}
	return false
}

// CPUAffinity returns the CPUs close to the device with the given index
// (see CPUAffinityReporter), ascending; an error wrapping ErrNotSupported
// when the backend cannot tell. It may be called from any goroutine.
func (e *Engine) CPUAffinity(index int) ([]int, error) {
	for _, l := range e.loops {
		if int(l.index) != index {
			continue
		}
		if r, ok := l.src.(CPUAffinityReporter); ok {
			return r.CPUAffinity()
		}
		return nil, fmt.Errorf("cpu affinity of device %d: %w", index, ErrNotSupported)
	}
	return nil, fmt.Errorf("cpu affinity of device %d: no such device", index)
}

// SetProcessAttribution sets the attribution of device index's processes
// by host PID, replacing the last map: from the next process poll on, each
// process event of a PID in byPID carries that attribution in its Attrs
// (record.ProcessAttribution reads it back), the process's own over its
// device's. It may be called from any goroutine; byPID is the engine's
// afterwards.
func (e *Engine) SetProcessAttribution(index int, byPID map[uint32]record.Attribution) {
	for _, l := range e.loops {
		if int(l.index) == index {
			l.procAttribution.Store(&byPID)
		}
	}
}

// ProcessPIDs returns the host PIDs the newest process poll of device index
// found (nil before the first poll, with process sampling off, or for an
// unknown index). The slice is the caller's.
func (e *Engine) ProcessPIDs(index int) []uint32 {
	for _, l := range e.loops {
		if int(l.index) == index {
			if p := l.pids.Load(); p != nil {
				return append([]uint32(nil), (*p)...)
			}
		}
	}
	return nil
}

// Catalog returns the engine's catalog.
func (e *Engine) Catalog() *catalog.Catalog { return e.cfg.Catalog }

// Emit publishes an event to every output (from any goroutine).
func (e *Engine) Emit(ev record.Event) {
	if eo, ok := e.cfg.Observer.(EventObserver); ok {
		eo.ObserveEvent(&ev)
	}
	e.events.append(ev)
}

// AddOutput attaches out under name with its own pump. Its cursors start at
// the rings' current heads: it sees what is published from now on. Outputs
// added before Run see everything.
func (e *Engine) AddOutput(name string, out record.Output, opts PumpOptions) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return fmt.Errorf("add output %s: %w", name, ErrStopping)
	}
	for _, p := range e.pumps {
		if p.name == name {
			return fmt.Errorf("add output %s: name already in use", name)
		}
	}
	p := newPump(e, name, out, opts)
	e.pumps = append(e.pumps, p)
	if e.runCtx != nil {
		e.startPump(p)
	}
	return nil
}

// RemoveOutput flushes, detaches and closes the named output.
func (e *Engine) RemoveOutput(name string) error {
	i, err := e.lockPump("remove", name, false)
	if err != nil {
		return err
	}
	p := e.pumps[i]
	e.pumps = slices.Delete(e.pumps, i, i+1)
	running := e.runCtx != nil
	e.mu.Unlock()
	if running {
		p.stop()
		err := e.awaitStopped(p)
		// A pump given up may still be inside its output: its lanes go
		// when it ends.
		go func() {
			<-p.done
			p.detach()
		}()
		return err
	}
	defer p.detach()
	return p.out.Close()
}

// awaitStopped waits for a stopped pump's final flush and Close, at most
// ShutdownTimeout (on the engine's clock). A pump still busy then (its
// output blocked in Write or Close) is given up: what it had not delivered
// is counted as failed and Unflushed, logged, and returned as an error; the
// pump is left to end on its own.
func (e *Engine) awaitStopped(p *pump) error {
	t := e.cfg.Clock.NewTimer(e.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.closeErr
	case <-t.C():
	}
	select {
	case <-p.done:
		return p.closeErr
	default:
	}
	lost := p.giveUp()
	p.wgDone.Do(e.pumpsWG.Done) // Run's shutdown does not wait for it either
	e.log.Error("removed or replaced output did not finish within the shutdown timeout; what it had not delivered is counted as failed",
		"output", p.name, "shutdown_timeout", e.cfg.ShutdownTimeout, "unflushed_samples", lost)
	return fmt.Errorf("output %s: not flushed within the %v shutdown timeout (its sink or reader stopped taking data): %d samples not delivered",
		p.name, e.cfg.ShutdownTimeout, lost)
}

// ReplaceOutput swaps the named output for out without a gap: the new
// pump's lanes take the old one's place in every ring in one step, so each
// sample published goes to exactly one of the two; then the old output is
// flushed and closed. It returns the old output's close error.
func (e *Engine) ReplaceOutput(name string, out record.Output, opts PumpOptions) error {
	i, err := e.lockPump("replace", name, true)
	if err != nil {
		return err
	}
	old := e.pumps[i]
	np := newPumpReplacing(e, name, out, opts, old)
	e.pumps[i] = np
	running := e.runCtx != nil
	if running {
		e.startPump(np)
	}
	e.mu.Unlock()
	defer np.settle()
	if running {
		old.stop()
		return e.awaitStopped(old)
	}
	return old.out.Close()
}

// ReplaceOutputWith replaces the named output with one that can only be
// built once the old one is closed (it needs what the old one holds, such as
// a listening address). The new lanes take the old ones' place at once, so
// nothing published in between is lost: it waits in the new lanes while
// the old output is flushed and closed and build runs. If build fails, the
// output is removed, what waited is counted (logged) as dropped, and build's
// error is returned.
func (e *Engine) ReplaceOutputWith(name string, opts PumpOptions, build func() (record.Output, error)) error {
	i, err := e.lockPump("replace", name, true)
	if err != nil {
		return err
	}
	old := e.pumps[i]
	np := newPumpReplacing(e, name, nil, opts, old) // not started: no output yet
	e.pumps[i] = np
	running := e.runCtx != nil
	e.mu.Unlock()
	var closeErr error
	if running {
		old.stop()
		<-old.done
		closeErr = old.closeErr
	} else {
		closeErr = old.out.Close()
	}
	np.settle()
	if closeErr != nil {
		e.log.Warn("closing the replaced output failed", "output", name, "err", closeErr)
	}
	out, err := build()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil || e.closing {
		e.pumps = slices.DeleteFunc(e.pumps, func(p *pump) bool { return p == np })
		np.detach()
		var waiting uint64
		for _, c := range np.cursors {
			waiting += c.Lag()
		}
		if err == nil {
			out.Close()
			err = ErrStopping
		}
		e.log.Error("output removed: its replacement could not start", "output", name,
			"samples_dropped", waiting, "err", err)
		return fmt.Errorf("replace output %s: %w", name, err)
	}
	np.out = out
	if running {
		e.startPump(np)
	}
	return nil
}

// lockPump locks e.mu and returns the index in e.pumps of the output called
// name, with e.mu still held. If there is no such output, or refuseStopping
// is set and Run is stopping the pumps, it unlocks e.mu and returns an error
// "<verb> output <name>: ...".
func (e *Engine) lockPump(verb, name string, refuseStopping bool) (int, error) {
	e.mu.Lock()
	if refuseStopping && e.closing {
		e.mu.Unlock()
		return -1, fmt.Errorf("%s output %s: %w", verb, name, ErrStopping)
	}
	i := slices.IndexFunc(e.pumps, func(p *pump) bool { return p.name == name })
	if i < 0 {
		e.mu.Unlock()
		return -1, fmt.Errorf("%s output %s: no such output", verb, name)
	}
	return i, nil
}

func (e *Engine) startPump(p *pump) {
	e.pumpsWG.Add(1)
	go func() {
		defer p.wgDone.Do(e.pumpsWG.Done)
		p.run(e.runCtx)
	}()
}

// Run samples until ctx ends, then drains the devices one last time, flushes
// every output, closes them and the source. It returns the first error from
// closing.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("sampler: engine already run")
	}
	// Pumps get their own context: they must outlive the device loops to
	// flush what the final drain published.
	pumpCtx, cancelPumps := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelPumps()
	e.mu.Lock()
	e.runCtx = pumpCtx
	for _, p := range e.pumps {
		e.startPump(p)
	}
	e.mu.Unlock()

	for _, l := range e.loops {
		go l.run(ctx)
	}
	var auxWG sync.WaitGroup
	if sw, ok := e.src.(SourceEventWatcher); ok {
		auxWG.Add(1)
		go func() {
			defer auxWG.Done()
			e.watchAllEvents(ctx, sw)
		}()
	} else {
		for _, l := range e.loops {
			if w, ok := l.src.(EventWatcher); ok {
				auxWG.Add(1)
				go func() {
					defer auxWG.Done()
					e.watchEvents(ctx, l, w)
				}()
			}
		}
	}
	// The watchdog outlives ctx: a call that hangs in the final drain is
	// flagged too. It stops once every loop has ended or been abandoned.
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	if e.cfg.CallTimeout > 0 {
		auxWG.Add(1)
		go func() {
			defer auxWG.Done()
			e.watchdog(watchCtx)
		}()
	}
	if e.cfg.Cursors != nil {
		auxWG.Add(1)
		go func() {
			defer auxWG.Done()
			e.cursorSaver(ctx)
		}()
	}
	<-ctx.Done() // the device loops end only with ctx
	stopped := time.Now()
	abandoned := e.waitLoops()
	stopWatch()
	auxWG.Wait()
	if e.cfg.Cursors != nil {
		e.saveCursors() // after the final drains
	}
	if f, ok := e.cfg.Observer.(interface{ Flush() }); ok {
		f.Flush() // close open findings while the pumps still run
	}
	e.mu.Lock()
	e.closing = true // no output is added from here on: every pump is stopped below
	pumps := slices.Clone(e.pumps)
	hook := e.cfg.AfterFinalFlush
	// finishCtx ends when the barrier stops waiting for the final flush:
	// an output still finishing then (record.Finisher) is not waited for.
	finishCtx, endFinish := context.WithCancel(pumpCtx)
	defer endFinish()
	for _, p := range pumps {
		if hook != nil {
			p.barrier, p.drained = make(chan struct{}), make(chan struct{})
			p.finishCtx = finishCtx
		}
		p.stop()
	}
	e.mu.Unlock()
	// One shutdown timeout bounds the final flush and Close together,
	// from the stop on: the device loops' final publication took part of
	// it (at most half, see deviceLoop.finalFlush; the outputs keep at
	// least the other half).
	budget := max(e.cfg.ShutdownTimeout-time.Since(stopped), e.cfg.ShutdownTimeout/2)
	var errs []error
	if hook == nil {
		t := e.cfg.Clock.NewTimer(budget)
		errs = e.waitPumps(pumps, t)
		t.Stop()
	} else {
		// The barrier: every output's samples flushed first, and what
		// its wrappers still held handed on and its own counters brought
		// up to date (record.Finisher: a buffer's queue, an aggregate's
		// open windows, a plugin's counters), then the final statistics
		// read (they count that flush), then their events flushed and
		// the outputs closed. An output stuck in the first part (three
		// quarters of the budget) does not keep the others from the
		// second (the rest, at least a quarter).
		start := time.Now()
		t := e.cfg.Clock.NewTimer(budget * 3 / 4)
		e.waitDrained(pumps, t)
		t.Stop()
		endFinish()
		for _, p := range pumps {
			p.refresh()
		}
		hook()
		for _, p := range pumps {
			close(p.barrier)
		}
		t = e.cfg.Clock.NewTimer(max(budget-time.Since(start), budget/4))
		errs = e.waitPumps(pumps, t)
		t.Stop()
	}
	if e.cfg.Cursors != nil {
		e.saveCursors() // what the outputs took in their final flush
	}
	if abandoned > 0 {
		// A call is still inside the driver: closing the library under it
		// could crash the process. The process is exiting anyway.
		e.log.Error("not closing the backend: driver calls still hung", "devices", abandoned)
	} else if err := e.src.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close %s: %w", e.src.Name(), err))
	}
	return errors.Join(errs...)
}

// cursorSaver saves the cursors as soon as an output has taken more (a
// pump's acknowledgement kicks it), so that what a crash makes the next run
// deliver again is what the outputs took in the instant before it, and
// every CursorSaveInterval (a stuck output stops being waited for by the
// clock alone). It returns when ctx is done.
func (e *Engine) cursorSaver(ctx context.Context) {
	t := e.cfg.Clock.NewTimer(CursorSaveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.ackKick:
		case <-t.C():
			t.Reset(CursorSaveInterval)
		}
		e.saveCursors()
	}
}

// saveCursors saves every device's cursors as far as every output has taken
// the samples before them (see ack.go). A failure is logged (the first, then
// every tenth): sampling goes on, a restart then delivers some history
// again.
func (e *Engine) saveCursors() {
	all := make(map[string]map[catalog.BufferType]uint64, len(e.loops))
	now := e.cfg.Clock.Now()
	for _, l := range e.loops {
		uuid := l.identity.Load().UUID
		if uuid == "" {
			continue
		}
		byType := map[catalog.BufferType]uint64{}
		for i, c := range l.acknowledged(now) {
			if c > 0 {
				byType[l.buffers[i].typ] = c
			}
		}
		all[uuid] = byType
	}
	if err := e.cfg.Cursors.Save(all); err != nil {
		if n := e.cursorSaveErrors.Add(1); n%10 == 1 {
			e.log.Warn("cannot save the drain cursors; a restart will deliver some history again", "err", err, "failures", n)
		}
	}
}

// waitDrained waits, until t fires, for every stopped pump to have flushed
// its samples (pump.drained).
func (e *Engine) waitDrained(pumps []*pump, t Timer) {
	for _, p := range pumps {
		select {
		case <-p.drained:
		case <-p.done:
		case <-t.C():
			return
		}
	}
}

// waitPumps waits for every stopped pump to finish its final flush and
// Close, until t fires. A pump still busy then is given up
// (pump.giveUp: its undelivered samples counted as failed), logged and
// left behind; the process is exiting. It returns the outputs' close errors
// and one error per output given up.
func (e *Engine) waitPumps(pumps []*pump, t Timer) []error {
	var errs []error
	expired := false
	for _, p := range pumps {
		if !expired {
			select {
			case <-p.done:
			case <-t.C():
				expired = true
			}
		}
		select {
		case <-p.done:
			if p.closeErr != nil {
				errs = append(errs, fmt.Errorf("close output %s: %w", p.name, p.closeErr))
			}
			continue
		default:
		}
		lost := p.giveUp()
		e.log.Error("output did not finish within the shutdown timeout; what it had not delivered is counted as failed",
			"output", p.name, "shutdown_timeout", e.cfg.ShutdownTimeout, "unflushed_samples", lost)
		errs = append(errs, fmt.Errorf("output %s: not flushed within the %v shutdown timeout (its sink or reader stopped taking data): %d samples not delivered",
			p.name, e.cfg.ShutdownTimeout, lost))
	}
	if !expired {
		e.pumpsWG.Wait()
	}
	return errs
}

// LoopStopGrace is how long Run waits, once its context has ended, for the
// device loops to make their final drain and stop. A loop then inside a
// driver call that has lasted LoopStopGrace or more (a hung GPU) is
// abandoned: counted in its DeviceStats and logged, so that one GPU cannot
// hold up the shutdown by more than twice this; the backend is then not
// closed under the call. A loop that is merely slow (a loaded machine) is
// waited for.
const LoopStopGrace = time.Second

// waitLoops waits for every device loop to end; after LoopStopGrace on the
// engine's clock, it abandons the loops stuck in a long driver call.
func (e *Engine) waitLoops() (abandoned int) {
	clk := e.cfg.Clock
	t := clk.NewTimer(LoopStopGrace)
	defer t.Stop()
	expired := false
	for _, l := range e.loops {
		for {
			if !expired {
				select {
				case <-l.done:
				case <-t.C():
					expired = true
					t.Reset(0) // check this loop at once
					continue
				}
				break
			}
			select {
			case <-l.done:
			case now := <-t.C():
				start := l.callStart.Load()
				if start == 0 || now.UnixNano()-start < int64(LoopStopGrace) {
					t.Reset(10 * time.Millisecond) // not stuck: wait on
					continue
				}
				l.abandoned.Store(true)
				op := "call"
				if p := l.callOp.Load(); p != nil {
					op = *p
				}
				e.log.Error("abandoning a device loop stuck in a driver call at shutdown", "device", l.index,
					"uuid", l.identity.Load().UUID, "op", op, "for", now.Sub(time.Unix(0, start)))
				abandoned++
				t.Reset(0)
			}
			break
		}
	}
	return abandoned
}

// watchdog checks every device's in-flight call ten times per CallTimeout,
// so a hung call is flagged within CallTimeout plus a tenth. It only reads
// atomics and emits events: it never blocks on a device.
func (e *Engine) watchdog(ctx context.Context) {
	every := max(e.cfg.CallTimeout/10, time.Millisecond)
	t := e.cfg.Clock.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			for _, l := range e.loops {
				l.watch(now, e.cfg.CallTimeout)
			}
			t.Reset(every)
		}
	}
}

// watchEvents runs a device's driver event watcher until ctx ends,
// restarting it with backoff when it fails (device lost, or unsupported:
// then it logs once and stops).
func (e *Engine) watchEvents(ctx context.Context, l *deviceLoop, w EventWatcher) {
	idx := int(l.index)
	emit := func(ev record.Event) {
		ev.Device = idx
		e.Emit(ev)
	}
	bo := e.eventBackoff()
	for {
		err := w.WatchEvents(ctx, emit)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNotSupported) {
			e.log.Info("driver events not supported on this device", "device", idx, "err", err)
			return
		}
		e.log.Warn("driver event watch failed; retrying", "device", idx, "err", err, "in", bo.Delay())
		// On the system clock: event watching is not part of the sampling
		// schedule that tests step through.
		if !sleep(SystemClock(), bo.Delay(), ctx.Done()) {
			return
		}
		bo.Next()
	}
}

// eventBackoff is the wait between restarts of a failed driver event
// watch: LostRetryInterval, doubling up to maxLostBackoff times it.
func (e *Engine) eventBackoff() backoff.Backoff {
	return backoff.Backoff{Initial: e.cfg.LostRetryInterval, Max: maxLostBackoff * e.cfg.LostRetryInterval}
}

// watchAllEvents runs the source's one event watcher for every device until
// ctx ends, restarting it with backoff when it fails (unsupported: it logs
// once and stops).
func (e *Engine) watchAllEvents(ctx context.Context, w SourceEventWatcher) {
	indexes := make([]int, len(e.loops))
	for i, l := range e.loops {
		indexes[i] = int(l.index)
	}
	bo := e.eventBackoff()
	for {
		err := w.WatchAllEvents(ctx, indexes, e.Emit)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNotSupported) {
			e.log.Info("driver events not supported", "err", err)
			return
		}
		e.log.Warn("driver event watch failed; retrying", "err", err, "in", bo.Delay())
		if !sleep(SystemClock(), bo.Delay(), ctx.Done()) {
			return
		}
		bo.Next()
	}
}

// Stats is a snapshot of the engine's self-metrics.
type Stats struct {
	Devices []DeviceStats
	Outputs []OutputStats
}

// Stats returns a snapshot of the engine's counters (safe from any
// goroutine).
func (e *Engine) Stats() Stats {
	var s Stats
	for _, l := range e.loops {
		s.Devices = append(s.Devices, l.stats())
	}
	e.mu.Lock()
	for _, p := range e.pumps {
		s.Outputs = append(s.Outputs, p.snapshot())
	}
	e.mu.Unlock()
	return s
}

// eventLog is a bounded, mutex-guarded log of events with absolute
// positions; each pump reads it with its own position. Events are rare, so a
// mutex is cheaper to reason about than another lock-free structure.
type eventLog struct {
	mu   sync.Mutex
	buf  []record.Event
	head uint64
}

func newEventLog(n int) *eventLog { return &eventLog{buf: make([]record.Event, n)} }

func (l *eventLog) append(ev record.Event) {
	ev = ev.Clone()
	l.mu.Lock()
	l.buf[l.head%uint64(len(l.buf))] = ev
	l.head++
	l.mu.Unlock()
}

func (l *eventLog) position() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head
}

// read appends events from pos to dst and returns the new position and how
// many were lost to overwriting. Returned events share their Attrs with the
// log, which never modifies them.
//
// end, when it holds a position + 1, bounds the read: a replaced pump reads
// no event that its replacement reads (the replacement starts there). It is
// loaded under the log's lock, where handOver sets it.
func (l *eventLog) read(pos uint64, dst []record.Event, end *atomic.Uint64) ([]record.Event, uint64, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	head := l.head
	if e := end.Load(); e != 0 && e-1 < head {
		head = e - 1
	}
	var dropped uint64
	if n := uint64(len(l.buf)); l.head-pos > n {
		dropped = l.head - n - pos
		pos = l.head - n
	}
	for ; pos < head; pos++ {
		dst = append(dst, l.buf[pos%uint64(len(l.buf))])
	}
	return dst, max(pos, head), dropped
}

// handOver returns the position a replacement pump starts reading at and
// makes it the end of old's reads, in one step under the log's lock.
func (l *eventLog) handOver(old *atomic.Uint64) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	old.Store(l.head + 1)
	return l.head
}
