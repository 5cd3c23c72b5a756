package bench

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Collector is an in-process record.Output that keeps a copy of every
// sample, device identity and event, so that a benchmark can slice samples
// by each run's time window after the fact.
//
// Ownership: Write copies what it needs out of the Batch (the pump owns the
// Batch and reuses it once Write returns). Concurrency: the engine's pump
// calls Write and Close; every other method may be called from any
// goroutine.
type Collector struct {
	mu      sync.Mutex
	cond    *sync.Cond
	samples []record.Sample
	devices map[int]record.Device
	events  []record.Event
	// newest sample time per device, among buffer-drained samples and
	// field reads (what WaitPast waits for).
	newestBuf   map[uint16]int64
	newestField map[uint16]int64
	closed      bool
	cat         *catalog.Catalog
	// srcKind is each metric's Src.Kind by MetricID (0: not in cat), so
	// that Write classifies a sample without copying its Metric.
	srcKind []catalog.SourceKind
	// owner, when set, classifies each process event's PID as it arrives
	// (a PID's ancestry is readable only while the process lives).
	owner *procOwner
	// latest is each device's newest value of the live-progress metrics.
	latest map[liveKey]record.Sample
}

type liveKey struct {
	dev    uint16
	metric catalog.MetricID
}

// liveMetrics are what the progress display shows per GPU.
var liveMetrics = []catalog.MetricID{catalog.MetricPowerDraw, catalog.MetricUtilGPU, catalog.MetricClockSM}

// Latest returns device dev's newest value of metric id, if one arrived.
func (c *Collector) Latest(dev int, id catalog.MetricID) (float64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.latest[liveKey{uint16(dev), id}]
	return s.Value, ok
}

// NewCollector returns an empty collector; cat (nil: the default catalog)
// tells buffer metrics from fields.
func NewCollector(cat *catalog.Catalog) *Collector {
	if cat == nil {
		cat = catalog.Default()
	}
	c := &Collector{devices: map[int]record.Device{}, newestBuf: map[uint16]int64{},
		newestField: map[uint16]int64{}, cat: cat, latest: map[liveKey]record.Sample{},
		srcKind: make([]catalog.SourceKind, cat.Len())}
	for _, m := range cat.All() {
		c.srcKind[m.ID] = m.Src.Kind
	}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Write copies the batch's samples, identities and events.
func (c *Collector) Write(_ context.Context, b *record.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return record.ErrClosed
	}
	c.samples = append(c.samples, b.Samples...)
	for _, d := range b.Devices {
		c.devices[d.Index] = d
	}
	for _, e := range b.Events {
		c.events = append(c.events, e.Clone())
		if c.owner != nil && e.Kind == record.EventProcess {
			for _, f := range e.Fields {
				if f.Key == record.ProcessFieldPID {
					c.owner.Ours(int(f.Value))
				}
			}
		}
	}
	for _, s := range b.Samples {
		if s.Metric == catalog.MetricPowerDraw || s.Metric == catalog.MetricUtilGPU || s.Metric == catalog.MetricClockSM {
			k := liveKey{s.Device, s.Metric}
			if s.TimeNS >= c.latest[k].TimeNS {
				c.latest[k] = s
			}
		}
		if int(s.Metric) >= len(c.srcKind) {
			continue
		}
		switch kind := c.srcKind[s.Metric]; {
		case kind == catalog.FromBuffer && s.Flags&record.FlagPointRead == 0:
			c.newestBuf[s.Device] = max(c.newestBuf[s.Device], s.TimeNS)
		case kind == catalog.FromField:
			c.newestField[s.Device] = max(c.newestField[s.Device], s.TimeNS)
		}
	}
	c.cond.Broadcast()
	return nil
}

// Close marks the collector closed; what it holds stays readable.
func (c *Collector) Close() error {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

// AddEvent records an event that did not come through the pump (a
// detector's finding emitted straight to the collector).
func (c *Collector) AddEvent(e record.Event) {
	c.mu.Lock()
	c.events = append(c.events, e.Clone())
	c.mu.Unlock()
}

// WaitPast waits until every device in devs has delivered a drained buffer
// sample and a field reading timestamped at or after tNS, until timeout,
// or until ctx ends. It reports whether everything arrived. Buffers are
// drained periodically, so a run's last samples arrive after it ends.
func (c *Collector) WaitPast(ctx context.Context, devs []int, tNS int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	timer := time.AfterFunc(timeout, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer timer.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		done := true
		for _, d := range devs {
			if c.newestBuf[uint16(d)] < tNS || c.newestField[uint16(d)] < tNS {
				done = false
			}
		}
		if done {
			return true
		}
		if c.closed || ctx.Err() != nil || !time.Now().Before(deadline) {
			return false
		}
		c.cond.Wait()
	}
}

// Samples returns a copy of the samples of device dev with timestamps in
// [fromNS, toNS], sorted by time (stable: publish order among equal
// times).
func (c *Collector) Samples(dev int, fromNS, toNS int64) []record.Sample {
	c.mu.Lock()
	var out []record.Sample
	for _, s := range c.samples {
		if int(s.Device) == dev && s.TimeNS >= fromNS && s.TimeNS <= toNS {
			out = append(out, s)
		}
	}
	c.mu.Unlock()
	slices.SortStableFunc(out, func(a, b record.Sample) int {
		switch {
		case a.TimeNS < b.TimeNS:
			return -1
		case a.TimeNS > b.TimeNS:
			return 1
		}
		return 0
	})
	return out
}

// Events returns a copy of the events collected so far.
func (c *Collector) Events() []record.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]record.Event, len(c.events))
	for i, e := range c.events {
		out[i] = e.Clone()
	}
	return out
}

// Devices returns the identities seen, by index.
func (c *Collector) Devices() map[int]record.Device {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int]record.Device, len(c.devices))
	for k, v := range c.devices {
		out[k] = v
	}
	return out
}

// Len returns the number of samples held.
func (c *Collector) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.samples)
}
