// Package sourcetest is the conformance suite for sampler backends: what
// the engine relies on from a sampler.Source, its DeviceSources and the
// optional interfaces they implement, checked the same way for every
// backend (the simulator, NVML on the repository's fake driver, and any
// later one).
//
// A backend's test opens its source on a clock the test controls and calls
// Run:
//
//	src, _ := sim.New(sim.Options{GPUs: 2, Now: clk.Now})
//	sourcetest.Run(t, src, sourcetest.Options{Advance: clk.Advance})
//
// Verify runs the same checks against any testing.TB and reports each
// broken rule as an error that starts with the check's name (see Checks),
// so that a test can run the suite against a deliberately broken source
// and see it fail.
package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// Options says how to drive a source under test.
type Options struct {
	// Advance moves the source's clock forward by d (required: the
	// suite checks that a clock standing still gives nothing new).
	Advance func(d time.Duration)
	// Step is how far the clock moves between drains (default 50 ms).
	Step time.Duration
	// Rounds is how many drains per buffer type follow the first
	// (default 40).
	Rounds int
	// Catalog lists the metrics Read is asked for (default
	// catalog.Default()).
	Catalog *catalog.Catalog
}

// Checks names the checks, in the order Verify runs them. Every error
// Verify reports starts with one of these names.
var Checks = []string{"source", "identity", "drain", "read", "capacity", "calls", "affinity", "processes", "events", "reopen", "close"}

// liveness bounds a wait for something that must happen: a source that
// takes longer hangs; it is not a slow machine.
const liveness = 2 * time.Minute

// Run runs the suite against src on t and closes src.
func Run(t *testing.T, src sampler.Source, opts Options) {
	t.Helper()
	Verify(t, src, opts)
}

// sentinels are the errors a backend maps every failure onto.
var sentinels = []error{sampler.ErrNotSupported, sampler.ErrNothingNew, sampler.ErrGPULost, sampler.ErrNoPermission,
	sampler.ErrLibraryNotFound, sampler.ErrDriverNotLoaded, sampler.ErrTimeout, sampler.ErrOldDriver}

func mapped(err error) bool {
	return slices.ContainsFunc(sentinels, func(s error) bool { return errors.Is(err, s) })
}

// Verify checks src on tb and closes src. It calls tb.Fatalf only when
// src gives no devices to check.
func Verify(tb testing.TB, src sampler.Source, opts Options) {
	tb.Helper()
	if opts.Advance == nil {
		tb.Fatalf("source: sourcetest.Options.Advance is nil")
	}
	if opts.Step <= 0 {
		opts.Step = 50 * time.Millisecond
	}
	if opts.Rounds <= 0 {
		opts.Rounds = 40
	}
	if opts.Catalog == nil {
		opts.Catalog = catalog.Default()
	}
	if src.Name() == "" {
		tb.Errorf("source: Name is empty")
	}
	devs, err := src.Devices()
	if err != nil || len(devs) == 0 {
		tb.Fatalf("source: Devices returned %d devices, %v", len(devs), err)
	}
	c := &checker{tb: tb, opts: opts}
	uuids, indexes := map[string]int{}, map[int]int{}
	for i, d := range devs {
		id, err := d.Identity()
		switch {
		case err != nil:
			tb.Errorf("identity: device %d: %v", i, err)
		case id.UUID == "" || id.Name == "":
			tb.Errorf("identity: device %d: UUID %q, name %q: both must be set", i, id.UUID, id.Name)
		}
		if j, dup := uuids[id.UUID]; dup && id.UUID != "" {
			tb.Errorf("identity: devices %d and %d share UUID %s", j, i, id.UUID)
		}
		if j, dup := indexes[id.Index]; dup {
			tb.Errorf("identity: devices %d and %d share index %d", j, i, id.Index)
		}
		uuids[id.UUID], indexes[id.Index] = i, i
	}
	for i, d := range devs {
		c.device(i, d)
	}
	c.sourceEvents(src, slices.Collect(func(yield func(int) bool) {
		for idx := range indexes {
			if !yield(idx) {
				return
			}
		}
	}))
	if err := src.Close(); err != nil {
		tb.Errorf("close: %v", err)
	}
}

type checker struct {
	tb     testing.TB
	opts   Options
	errors map[string]int // per check and device
}

// maxErrors bounds what one check reports per device: a broken rule is
// usually broken on every call.
const maxErrors = 5

func (c *checker) errorf(check string, dev int, format string, args ...any) {
	c.tb.Helper()
	key := fmt.Sprintf("%s: device %d", check, dev)
	if c.errors == nil {
		c.errors = map[string]int{}
	}
	c.errors[key]++
	switch n := c.errors[key]; {
	case n <= maxErrors:
		c.tb.Errorf("%s: %s", key, fmt.Sprintf(format, args...))
	case n == maxErrors+1:
		c.tb.Errorf("%s: more errors not shown", key)
	}
}

func (c *checker) device(i int, d sampler.DeviceSource) {
	c.tb.Helper()
	// CallStats, CallsByFunction and CPUAffinity are documented as safe
	// from any goroutine: call them while the device is drained and read
	// (the race detector sees a source that is not).
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if cc, ok := d.(sampler.CallCounter); ok {
				cc.CallStats()
			}
			if cb, ok := d.(sampler.CallBreakdown); ok {
				cb.CallsByFunction()
			}
			if ar, ok := d.(sampler.CPUAffinityReporter); ok {
				ar.CPUAffinity()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	c.drain(i, d)
	c.read(i, d)
	close(stop)
	<-done
	c.calls(i, d)
	c.affinity(i, d)
	c.processes(i, d)
	c.events(i, d)
	c.reopen(i, d)
}

// drain: every sample strictly newer than the cursor, each exactly once,
// appended to dst; ErrNothingNew and ErrNotSupported append nothing; a
// clock standing still gives nothing new; the first drain holds at most
// the buffer's reported capacity.
func (c *checker) drain(i int, d sampler.DeviceSource) {
	c.tb.Helper()
	bc, hasCap := d.(sampler.BufferCapacitor)
	delivered := 0
	marker := sampler.RawSample{TimeUS: math.MaxUint64, Value: -1}
	for t := catalog.BufferType(0); t < catalog.NumBufferTypes; t++ {
		var cursor uint64
		seen := map[uint64]bool{}
		supported := true
		for round := 0; round <= c.opts.Rounds && supported; round++ {
			dst := []sampler.RawSample{marker}
			got, err := d.Drain(t, cursor, dst)
			if len(got) == 0 || got[0] != marker {
				c.errorf("drain", i, "%s: dst's existing entries not kept (Drain must append)", t)
				return
			}
			got = got[1:]
			switch {
			case errors.Is(err, sampler.ErrNotSupported) && round == 0:
				supported = false
			case errors.Is(err, sampler.ErrNotSupported):
				c.errorf("drain", i, "%s: ErrNotSupported after it was supported", t)
				supported = false
			case errors.Is(err, sampler.ErrNothingNew):
			case err != nil:
				c.errorf("drain", i, "%s: %v (want a sample, ErrNothingNew or ErrNotSupported)", t, err)
				supported = false
			}
			if err != nil && len(got) > 0 {
				c.errorf("drain", i, "%s: %d samples appended with error %v", t, len(got), err)
			}
			if err == nil && len(got) == 0 {
				c.errorf("drain", i, "%s: no sample and no error (want ErrNothingNew)", t)
			}
			if round == 0 && hasCap && err == nil {
				if n := bc.BufferCapacity(t); n < 0 || (n > 0 && len(got) > n) {
					c.errorf("capacity", i, "%s: first drain returned %d samples, capacity says %d", t, len(got), n)
				}
			}
			next := cursor
			for _, s := range got {
				if s.TimeUS <= cursor {
					c.errorf("drain", i, "%s: sample at %d µs not newer than the cursor %d", t, s.TimeUS, cursor)
					return
				}
				if seen[s.TimeUS] {
					c.errorf("drain", i, "%s: sample at %d µs delivered twice", t, s.TimeUS)
					return
				}
				if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
					c.errorf("drain", i, "%s: sample at %d µs has value %v", t, s.TimeUS, s.Value)
				}
				seen[s.TimeUS] = true
				next = max(next, s.TimeUS)
			}
			cursor = next
			delivered += len(got)
			if err == nil && supported {
				// the clock stands still: nothing is new
				again, err := d.Drain(t, cursor, nil)
				if !errors.Is(err, sampler.ErrNothingNew) || len(again) != 0 {
					c.errorf("drain", i, "%s: drained again at cursor %d without time passing: %d samples, %v (want ErrNothingNew)", t, cursor, len(again), err)
				}
			}
			c.opts.Advance(c.opts.Step)
		}
	}
	if delivered == 0 {
		c.errorf("drain", i, "no buffer type delivered a sample in %d drains", c.opts.Rounds+1)
	}
}

// read: every entry of out is written, with a finite value or an error
// mapped onto the sampler's sentinels; the call's own error is nil on a
// device that answers.
func (c *checker) read(i int, d sampler.DeviceSource) {
	c.tb.Helper()
	stale := errors.New("stale entry")
	if err := d.Read(nil, nil); err != nil {
		c.errorf("read", i, "Read of no metrics: %v", err)
	}
	var ids []catalog.MetricID
	for _, m := range c.opts.Catalog.All() {
		ids = append(ids, m.ID)
	}
	out := make([]sampler.Reading, len(ids))
	for k := range out {
		out[k] = sampler.Reading{Value: math.NaN(), Err: stale}
	}
	if err := d.Read(ids, out); err != nil {
		c.errorf("read", i, "Read of %d metrics: %v", len(ids), err)
		return
	}
	values := 0
	for k, r := range out {
		name := c.opts.Catalog.Name(ids[k])
		switch {
		case r.Err == stale:
			c.errorf("read", i, "%s: entry not written", name)
		case r.Err == nil && (math.IsNaN(r.Value) || math.IsInf(r.Value, 0)):
			c.errorf("read", i, "%s: value %v without an error", name, r.Value)
		case r.Err != nil && !mapped(r.Err):
			c.errorf("read", i, "%s: error %q is none of the sampler's errors (errors.Is)", name, r.Err)
		case r.Err == nil:
			values++
		}
	}
	if values == 0 {
		c.errorf("read", i, "none of %d metrics read", len(ids))
	}
}

// calls: the call counters only grow, and the breakdown by function adds
// up to the total.
func (c *checker) calls(i int, d sampler.DeviceSource) {
	c.tb.Helper()
	cc, ok := d.(sampler.CallCounter)
	if !ok {
		return
	}
	before := cc.CallStats()
	if before.Calls == 0 {
		c.errorf("calls", i, "no call counted after drains and reads")
	}
	d.Read([]catalog.MetricID{catalog.MetricPowerDraw}, make([]sampler.Reading, 1))
	after := cc.CallStats()
	if after.Calls < before.Calls || after.Latency < before.Latency {
		c.errorf("calls", i, "counters went back: %+v then %+v", before, after)
	}
	if cb, ok := d.(sampler.CallBreakdown); ok {
		var sum uint64
		for _, n := range cb.CallsByFunction() {
			sum += n
		}
		if total := cc.CallStats().Calls; sum != total {
			c.errorf("calls", i, "calls by function add up to %d, CallStats says %d", sum, total)
		}
	}
}

// affinity: ascending CPU numbers, none twice, none negative.
func (c *checker) affinity(i int, d sampler.DeviceSource) {
	c.tb.Helper()
	ar, ok := d.(sampler.CPUAffinityReporter)
	if !ok {
		return
	}
	cpus, err := ar.CPUAffinity()
	if err != nil {
		if !mapped(err) {
			c.errorf("affinity", i, "error %q is none of the sampler's errors", err)
		}
		return
	}
	for k, n := range cpus {
		if n < 0 || (k > 0 && n <= cpus[k-1]) {
			c.errorf("affinity", i, "CPUs %v: want ascending, distinct, non-negative", cpus)
			return
		}
	}
}

// processes: appended to dst; distinct non-zero PIDs; utilization only
// newer than the cursor, each sample once, percentages in [0, 100];
// command lines only when asked for and at most CmdlineMax bytes of valid
// UTF-8.
func (c *checker) processes(i int, d sampler.DeviceSource) {
	c.tb.Helper()
	ps, ok := d.(sampler.ProcessSource)
	if !ok {
		return
	}
	marker := sampler.Process{PID: math.MaxUint32}
	var cursor uint64
	for round := 0; round < 4; round++ {
		q := sampler.ProcessQuery{Cursor: cursor, Cmdline: round%2 == 1, CmdlineMax: 8}
		got, err := ps.Processes(q, []sampler.Process{marker})
		if len(got) == 0 || got[0].PID != marker.PID {
			c.errorf("processes", i, "dst's existing entries not kept (Processes must append)")
			return
		}
		if errors.Is(err, sampler.ErrNotSupported) {
			return
		}
		if err != nil {
			c.errorf("processes", i, "%v", err)
			return
		}
		pids := map[uint32]bool{}
		next := cursor
		for _, p := range got[1:] {
			if p.PID == 0 || pids[p.PID] {
				c.errorf("processes", i, "PID %d zero or listed twice", p.PID)
			}
			pids[p.PID] = true
			if !slices.Contains([]string{"", "C", "G", "C+G"}, p.Type) {
				c.errorf("processes", i, "PID %d: type %q", p.PID, p.Type)
			}
			if p.HasUtil {
				if p.TimeUS <= cursor {
					c.errorf("processes", i, "PID %d: utilization at %d µs not newer than the cursor %d", p.PID, p.TimeUS, cursor)
				}
				for _, v := range []float64{p.SMUtil, p.MemUtil, p.EncUtil, p.DecUtil} {
					if !(v >= 0 && v <= 100) {
						c.errorf("processes", i, "PID %d: utilization %v%% out of [0, 100]", p.PID, v)
					}
				}
				next = max(next, p.TimeUS)
			} else if p.TimeUS != 0 {
				c.errorf("processes", i, "PID %d: TimeUS %d without utilization", p.PID, p.TimeUS)
			}
			switch {
			case !q.Cmdline && p.Cmdline != "":
				c.errorf("processes", i, "PID %d: command line %q returned without being asked for", p.PID, p.Cmdline)
			case len(p.Cmdline) > q.CmdlineMax || !utf8.ValidString(p.Cmdline):
				c.errorf("processes", i, "PID %d: command line %q longer than %d bytes or not UTF-8", p.PID, p.Cmdline, q.CmdlineMax)
			}
		}
		cursor = next
		c.opts.Advance(c.opts.Step)
	}
}

// events: WatchEvents returns once its context ends.
func (c *checker) events(i int, d sampler.DeviceSource) {
	c.tb.Helper()
	ew, ok := d.(sampler.EventWatcher)
	if !ok {
		return
	}
	c.watch(fmt.Sprintf("device %d", i), func(ctx context.Context, emit func(record.Event)) error {
		return ew.WatchEvents(ctx, emit)
	}, func(record.Event) {})
}

func (c *checker) sourceEvents(src sampler.Source, indexes []int) {
	c.tb.Helper()
	sw, ok := src.(sampler.SourceEventWatcher)
	if !ok {
		return
	}
	c.watch("source", func(ctx context.Context, emit func(record.Event)) error {
		return sw.WatchAllEvents(ctx, indexes, emit)
	}, func(ev record.Event) {
		if !slices.Contains(indexes, ev.Device) {
			c.tb.Errorf("events: source: event for device %d, not among %v", ev.Device, indexes)
		}
	})
}

// watch runs a watcher until it has waited a while, cancels its context
// and requires it to return.
func (c *checker) watch(who string, run func(context.Context, func(record.Event)) error, check func(record.Event)) {
	c.tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, check) }()
	select {
	case err := <-done: // watching is impossible: a documented early return
		if err == nil {
			c.tb.Errorf("events: %s: watcher returned nil before its context ended", who)
		}
		cancel()
		return
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) && !mapped(err) {
			c.tb.Errorf("events: %s: watcher ended with %v after its context was cancelled", who, err)
		}
	case <-time.After(liveness):
		c.tb.Errorf("events: %s: watcher still running %v after its context was cancelled", who, liveness)
	}
}

// reopen: re-acquiring a device that answers keeps its identity.
func (c *checker) reopen(i int, d sampler.DeviceSource) {
	c.tb.Helper()
	r, ok := d.(sampler.Reopener)
	if !ok {
		return
	}
	id, _ := d.Identity()
	if err := r.Reopen(id.UUID); err != nil {
		c.errorf("reopen", i, "Reopen(%q): %v", id.UUID, err)
		return
	}
	if again, err := d.Identity(); err != nil || again.UUID != id.UUID || again.Index != id.Index {
		c.errorf("reopen", i, "after Reopen: identity %s/%d, %v; was %s/%d", again.UUID, again.Index, err, id.UUID, id.Index)
	}
}
