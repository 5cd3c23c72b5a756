package sampler_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// collector is an in-memory Output that copies what it receives.
type collector struct {
	mu      sync.Mutex
	samples []record.Sample
	devices []record.Device
	events  []record.Event
	seqs    []uint64
	delay   atomic.Int64 // ns per Write
	fail    atomic.Bool
	closed  bool
}

func (c *collector) Write(ctx context.Context, b *record.Batch) error {
	if d := c.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if c.fail.Load() {
		return errors.New("sink down")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return record.ErrClosed
	}
	c.samples = append(c.samples, b.Samples...)
	c.devices = append(c.devices, b.Devices...)
	for _, e := range b.Events {
		c.events = append(c.events, e.Clone())
	}
	c.seqs = append(c.seqs, b.Seq)
	return nil
}

func (c *collector) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

func (c *collector) snapshot() []record.Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]record.Sample(nil), c.samples...)
}

// fakeDevice is a scripted device: buffer type t holds a sample every
// period[t] (value = sample number), depth samples deep, timestamped on the
// real clock (or boot clock), so the engine's drain logic runs for real.
type fakeDevice struct {
	index     int
	start     time.Time
	depth     int
	period    map[catalog.BufferType]time.Duration
	idle      map[catalog.BufferType]bool
	fields    map[catalog.MetricID]float64
	fieldErr  map[catalog.MetricID]error
	bootShift time.Duration // subtract from Unix time: a boot-time clock
	now       func() time.Time

	mu        sync.Mutex
	readCalls map[catalog.MetricID]int
	drained   map[catalog.BufferType][]time.Time // when each buffer was drained
	calls     atomic.Uint64
}

func newFakeDevice(index int) *fakeDevice {
	return &fakeDevice{index: index, start: time.Now().Add(-time.Minute), depth: 100, now: time.Now,
		period:    map[catalog.BufferType]time.Duration{catalog.BufferTotalPower: 10 * time.Millisecond, catalog.BufferGPUUtil: 50 * time.Millisecond},
		idle:      map[catalog.BufferType]bool{},
		fields:    map[catalog.MetricID]float64{catalog.MetricPowerInstant: 500, catalog.MetricEnergy: 1e6},
		fieldErr:  map[catalog.MetricID]error{},
		readCalls: map[catalog.MetricID]int{}, drained: map[catalog.BufferType][]time.Time{}}
}

func (d *fakeDevice) Identity() (record.Device, error) {
	return record.Device{Index: d.index, UUID: fmt.Sprintf("GPU-fake-%d", d.index), Name: "Fake", Backend: "fake"}, nil
}

func (d *fakeDevice) rawUS(k int64, p time.Duration) uint64 {
	return uint64((d.start.Add(time.Duration(k)*p).UnixNano() - int64(d.bootShift)) / 1000)
}

func (d *fakeDevice) Drain(t catalog.BufferType, cursor uint64, dst []sampler.RawSample) ([]sampler.RawSample, error) {
	d.calls.Add(2)
	p, ok := d.period[t]
	if !ok {
		return dst, sampler.ErrNotSupported
	}
	d.mu.Lock()
	d.drained[t] = append(d.drained[t], d.now())
	d.mu.Unlock()
	d.mu.Lock()
	idle := d.idle[t]
	d.mu.Unlock()
	if idle {
		return dst, sampler.ErrNothingNew
	}
	newest := int64(d.now().Sub(d.start) / p)
	n0 := len(dst)
	// newest first, like some drivers: the engine must sort
	for k := newest; k > newest-int64(d.depth) && k >= 0; k-- {
		ts := d.rawUS(k, p)
		if ts <= cursor {
			break
		}
		dst = append(dst, sampler.RawSample{TimeUS: ts, Value: float64(k)})
	}
	if len(dst) == n0 {
		return dst, sampler.ErrNothingNew
	}
	return dst, nil
}

func (d *fakeDevice) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	d.calls.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, id := range ids {
		d.readCalls[id]++
		if err := d.fieldErr[id]; err != nil {
			out[i] = sampler.Reading{Err: err}
			continue
		}
		if v, ok := d.fields[id]; ok {
			out[i] = sampler.Reading{Value: v}
			continue
		}
		switch id {
		case catalog.MetricUtilGPU, catalog.MetricUtilMemory:
			out[i] = sampler.Reading{Value: 0}
		default:
			out[i] = sampler.Reading{Err: sampler.ErrNotSupported}
		}
	}
	return nil
}

// onClock makes the device's buffers follow clk, history starting a
// minute before clk's time.
func (d *fakeDevice) onClock(clk *clocktest.Clock) *fakeDevice {
	d.now = clk.Now
	d.start = clk.Now().Add(-time.Minute)
	return d
}

func (d *fakeDevice) CallStats() sampler.CallStats { return sampler.CallStats{Calls: d.calls.Load()} }

func (d *fakeDevice) reads(id catalog.MetricID) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.readCalls[id]
}

type fakeSource struct{ devs []*fakeDevice }

func (s *fakeSource) Name() string { return "fake" }
func (s *fakeSource) Devices() ([]sampler.DeviceSource, error) {
	out := make([]sampler.DeviceSource, len(s.devs))
	for i, d := range s.devs {
		out[i] = d
	}
	return out, nil
}
func (s *fakeSource) Close() error { return nil }

// published returns the samples e's device loops have published.
func published(e *sampler.Engine) (n uint64) {
	for _, d := range e.Stats().Devices {
		n += d.Published
	}
	return n
}

// runUntil runs the engine until cond holds (checked every 10 ms) or two
// minutes pass (a hang, not a slow machine), then stops it and returns
// Run's error.
func runUntil(t *testing.T, e *sampler.Engine, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !cond() {
		t.Fatalf("condition not reached within 2 minutes")
	}
}

// runStepped runs the engine on a manual clock: each step waits until
// parked goroutines hold at least armed timers (every device loop, plus the
// watchdog unless CallTimeout < 0), then moves the clock to the earliest
// deadline. It stops the engine once cond holds, or fails after maxSteps.
func runStepped(t *testing.T, e *sampler.Engine, clk *clocktest.Clock, armed, maxSteps int, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	steps := 0
	for ; steps < maxSteps; steps++ {
		clk.BlockUntil(armed)
		if cond() {
			break
		}
		clk.Step(armed)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if steps == maxSteps {
		t.Fatalf("condition not reached within %d clock steps", maxSteps)
	}
}

var clockStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func onlyPowerBuffer(m *catalog.Metric) bool {
	return m.ID == catalog.MetricPowerDraw
}

// Every driver sample is delivered exactly once across many drains.
func TestEngineExactlyOnceDrain(t *testing.T) {
	clk := clocktest.New(clockStart)
	dev := newFakeDevice(0).onClock(clk)
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 30 * time.Millisecond, Select: onlyPowerBuffer, Clock: clk, CallTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	if err := e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	runStepped(t, e, clk, 1, 1000, func() bool { return e.Stats().Devices[0].Drains >= 20 })
	got := out.snapshot()
	if len(got) < 100 {
		t.Fatalf("only %d samples", len(got))
	}
	// values are consecutive sample numbers: no gap, no duplicate
	first := got[0].Value
	for i, s := range got {
		if s.Value != first+float64(i) {
			t.Fatalf("sample %d has number %v, want %v (gap or duplicate)", i, s.Value, first+float64(i))
		}
		if s.Metric != catalog.MetricPowerDraw || s.Device != 0 {
			t.Fatalf("unexpected sample %+v", s)
		}
	}
	// the first drain returns the whole buffer (depth samples of history)
	if got[len(got)-1].Value-first+1 != float64(len(got)) {
		t.Fatal("count mismatch")
	}
	st := e.Stats()
	if st.Devices[0].SuspectedLosses != 0 {
		t.Fatalf("suspected losses %d on a fast drain", st.Devices[0].SuspectedLosses)
	}
	if st.Devices[0].Clock != sampler.ClockRealtime {
		t.Fatalf("clock %v, want realtime", st.Devices[0].Clock)
	}
	if o := st.Outputs[0]; o.Published != o.Read+o.Dropped || o.Delivered != uint64(len(got)) || o.Dropped != 0 {
		t.Fatalf("accounting %+v with %d delivered", o, len(got))
	}
}

// Boot-time timestamps are classified and converted with one offset.
func TestEngineBootClock(t *testing.T) {
	dev := newFakeDevice(0)
	bt, ok := sampler.BootTime()
	if !ok {
		t.Skip("no boot clock on this platform")
	}
	dev.bootShift = time.Duration(time.Now().UnixNano()) - bt
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{Select: onlyPowerBuffer})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	runUntil(t, e, func() bool { return len(out.snapshot()) > 0 })
	if c := e.Stats().Devices[0].Clock; c != sampler.ClockBoottime {
		t.Fatalf("clock %v, want boottime", c)
	}
	got := out.snapshot()
	last := got[len(got)-1]
	if age := time.Since(last.Time()); age < -time.Second || age > 5*time.Second {
		t.Fatalf("newest sample converted to %v (age %v): boot offset wrong", last.Time(), age)
	}
}

// A drain interval longer than the buffer's span loses samples: the loss is
// counted and the interval shortened, not hidden.
func TestEngineSuspectedLoss(t *testing.T) {
	clk := clocktest.New(clockStart)
	dev := newFakeDevice(0).onClock(clk)
	// 5 × 3 ms = 15 ms span: shorter than MinDrainInterval, so even the
	// shortest drain interval overruns it.
	dev.depth = 5
	dev.period[catalog.BufferTotalPower] = 3 * time.Millisecond
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 250 * time.Millisecond, Select: onlyPowerBuffer, Clock: clk, CallTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	runStepped(t, e, clk, 1, 1000, func() bool { return e.Stats().Devices[0].SuspectedLosses >= 1 })
	out.mu.Lock()
	events := append([]record.Event(nil), out.events...)
	out.mu.Unlock()
	if len(events) == 0 {
		t.Fatal("no event")
	}
	st := e.Stats().Devices[0]
	if st.LostEstimate == 0 {
		t.Fatal("suspected loss with no lost estimate")
	}
	if st.MinDrainInterval >= 250*time.Millisecond {
		t.Fatalf("drain interval not shortened: %v", st.MinDrainInterval)
	}
	if events[0].Kind != record.EventSampleLoss {
		t.Fatalf("event %+v, want sample_loss", events[0])
	}
}

// The drain interval is set to at most half the buffer's measured span
// before any loss happens.
func TestEngineDrainIntervalHalfSpan(t *testing.T) {
	clk := clocktest.New(clockStart)
	dev := newFakeDevice(0).onClock(clk)
	dev.depth = 10 // 10 × 10 ms = 100 ms span
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: time.Second, Select: onlyPowerBuffer, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	runStepped(t, e, clk, 2, 1000, func() bool { return e.Stats().Devices[0].Drains >= 10 })
	st := e.Stats().Devices[0]
	if st.MinDrainInterval != 50*time.Millisecond {
		t.Fatalf("drain interval %v, want half the 100ms span", st.MinDrainInterval)
	}
	if st.SuspectedLosses != 0 {
		t.Fatalf("%d suspected losses after adapting", st.SuspectedLosses)
	}
}

// Unsupported metrics are probed once and not asked for again; an idle
// GPU's empty utilization buffer yields a marked point read.
func TestEngineProbeOnceAndIdlePointRead(t *testing.T) {
	dev := newFakeDevice(0)
	dev.idle[catalog.BufferGPUUtil] = true
	dev.fieldErr[catalog.MetricTempMemory] = fmt.Errorf("memory temp: %w", sampler.ErrNotSupported)
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, FieldInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	runUntil(t, e, func() bool { return e.Stats().Devices[0].FieldReads >= 10 && e.Stats().Devices[0].PointReads >= 2 })
	if n := dev.reads(catalog.MetricTempMemory); n != 1 {
		t.Fatalf("unsupported field read %d times, want once", n)
	}
	if n := dev.reads(catalog.MetricPowerInstant); n < 10 {
		t.Fatalf("supported field read %d times", n)
	}
	var point, instant int
	for _, s := range out.snapshot() {
		if s.Metric == catalog.MetricUtilGPU {
			if s.Flags&record.FlagPointRead == 0 {
				t.Fatalf("utilization sample from an idle buffer without the point-read mark: %+v", s)
			}
			point++
		}
		if s.Metric == catalog.MetricPowerInstant {
			instant++
			if s.Value != 500 {
				t.Fatalf("instant power %v", s.Value)
			}
		}
	}
	if point == 0 || instant == 0 {
		t.Fatalf("point reads %d, instant power samples %d", point, instant)
	}
	if st := e.Stats().Devices[0]; st.NothingNew == 0 {
		t.Fatal("nothing-new not counted")
	}
}

// A media engine's dry utilization buffer (an idle encoder) gets one marked
// point read per RareInterval, not one per drain; a buffer with samples
// (the decoder) gets none; a metric the device has no point read for (JPEG)
// is asked once and never again; a media buffer the device lacks (OFA) is
// point-read per RareInterval too, not per field tick.
func TestEngineDryMediaBufferPointRead(t *testing.T) {
	dev := newFakeDevice(0)
	for _, b := range []catalog.BufferType{catalog.BufferEncoderUtil, catalog.BufferDecoderUtil, catalog.BufferJPEGUtil} {
		dev.period[b] = 50 * time.Millisecond
	}
	dev.idle[catalog.BufferEncoderUtil] = true
	dev.idle[catalog.BufferJPEGUtil] = true
	dev.fields[catalog.MetricUtilEncoder] = 0
	dev.fields[catalog.MetricUtilOFA] = 3
	dev.fieldErr[catalog.MetricUtilJPEG] = fmt.Errorf("jpeg utilization: %w", sampler.ErrNotSupported)
	media := []catalog.MetricID{catalog.MetricUtilEncoder, catalog.MetricUtilDecoder, catalog.MetricUtilJPEG, catalog.MetricUtilOFA}
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 10 * time.Millisecond, SecondaryDrainInterval: 10 * time.Millisecond, FieldInterval: 10 * time.Millisecond,
		RareInterval: time.Hour,
		Select:       func(m *catalog.Metric) bool { return slices.Contains(media, m.ID) }})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	// 30 drains of three buffers: ten rounds at least.
	runUntil(t, e, func() bool { return e.Stats().Devices[0].Drains >= 30 && len(out.snapshot()) > 1 })
	reads := map[string]int{}
	for _, id := range media {
		reads[catalog.Default().Name(id)] = dev.reads(id)
	}
	if want := map[string]int{"utilization_encoder": 1, "utilization_decoder": 0, "utilization_jpeg": 1, "utilization_ofa": 1}; !maps.Equal(reads, want) {
		t.Fatalf("point reads %v, want %v", reads, want)
	}
	var enc, ofa []record.Sample
	dec := 0
	for _, s := range out.snapshot() {
		switch s.Metric {
		case catalog.MetricUtilEncoder:
			enc = append(enc, s)
		case catalog.MetricUtilOFA:
			ofa = append(ofa, s)
		case catalog.MetricUtilDecoder:
			if s.Flags&record.FlagPointRead != 0 {
				t.Fatalf("decoder sample marked as a point read: %+v", s)
			}
			dec++
		case catalog.MetricUtilJPEG:
			t.Fatalf("JPEG sample from a device without its point read: %+v", s)
		}
	}
	if len(enc) != 1 || enc[0].Value != 0 || enc[0].Flags != record.FlagPointRead || dec == 0 {
		t.Fatalf("encoder samples %+v (want one marked point read of 0), %d decoder samples", enc, dec)
	}
	if len(ofa) != 1 || ofa[0].Value != 3 || ofa[0].Flags != record.FlagPointRead {
		t.Fatalf("OFA samples %+v, want one marked point read of 3", ofa)
	}
}

// A slow output beside a fast one: the slow one is lapped and its loss is
// counted exactly; the fast one loses nothing.
func TestEngineSlowOutputBesideFast(t *testing.T) {
	src, err := sim.New(sim.Options{GPUs: 2, Profile: "training", Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	e, err := sampler.New(src, sampler.Config{RingSize: 1024, DrainInterval: 50 * time.Millisecond,
		FieldInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fast := &collector{}
	slow := &collector{}
	slow.delay.Store(int64(100 * time.Millisecond))
	e.AddOutput("fast", fast, sampler.PumpOptions{FlushInterval: 2 * time.Millisecond, MaxBatch: 16})
	e.AddOutput("slow", slow, sampler.PumpOptions{FlushInterval: 2 * time.Millisecond, MaxBatch: 16})
	runUntil(t, e, func() bool {
		for _, o := range e.Stats().Outputs {
			if o.Name == "slow" && o.Dropped > 0 && o.Writes > 3 {
				slow.delay.Store(0) // let the final flush finish quickly
				return true
			}
		}
		return false
	})
	st := e.Stats()
	t.Logf("stats: %+v", st)
	var published uint64
	for _, d := range st.Devices {
		published += d.Published
	}
	for _, o := range st.Outputs {
		if o.Published != published {
			t.Errorf("%s: published %d, devices published %d", o.Name, o.Published, published)
		}
		if o.Read+o.Dropped != o.Published || o.Delivered+o.Failed+o.Filtered != o.Read {
			t.Errorf("%s: accounting broken: %+v", o.Name, o)
		}
		if o.Lag != 0 {
			t.Errorf("%s: lag %d after the final flush", o.Name, o.Lag)
		}
	}
	for _, o := range st.Outputs {
		switch o.Name {
		case "fast":
			if o.Dropped != 0 || o.Delivered != published || uint64(len(fast.snapshot())) != published {
				t.Errorf("fast output lost samples: %+v (received %d)", o, len(fast.snapshot()))
			}
		case "slow":
			if o.Dropped == 0 || uint64(len(slow.snapshot())) != o.Delivered {
				t.Errorf("slow output: %+v, received %d", o, len(slow.snapshot()))
			}
		}
	}
	// identity arrives once per device, before its samples
	if len(fast.devices) != 2 {
		t.Errorf("fast output got %d identities, want 2", len(fast.devices))
	}
	for i, s := range fast.seqs {
		if s != uint64(i+1) {
			t.Fatalf("batch seq %d at position %d", s, i)
		}
	}
}

// A failing output counts its failed samples; nothing else is disturbed.
func TestEngineFailingOutputCounted(t *testing.T) {
	src, _ := sim.New(sim.Options{GPUs: 1, Profile: "idle"})
	e, err := sampler.New(src, sampler.Config{DrainInterval: 50 * time.Millisecond, FieldInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	bad := &collector{}
	bad.fail.Store(true)
	good := &collector{}
	e.AddOutput("bad", bad, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	e.AddOutput("good", good, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, Select: func(m *catalog.Metric) bool {
		return m.Group == catalog.GroupPower
	}})
	runUntil(t, e, func() bool { return e.Stats().Outputs[0].WriteErrors >= 3 })
	for _, o := range e.Stats().Outputs {
		switch o.Name {
		case "bad":
			if o.Delivered != 0 || o.Failed != o.Read || o.Failed == 0 {
				t.Errorf("bad: %+v", o)
			}
		case "good":
			if o.Filtered == 0 || o.Delivered+o.Filtered != o.Read {
				t.Errorf("good: %+v", o)
			}
			for _, s := range good.snapshot() {
				if m, _ := catalog.Default().Get(s.Metric); m.Group != catalog.GroupPower {
					t.Fatalf("unselected metric %s delivered", m.Name)
				}
			}
		}
	}
}

// The final drain at shutdown delivers what the buffers took since the
// last scheduled drain.
// waitFirstDrain waits until e's first device has been drained once.
func waitFirstDrain(t *testing.T, e *sampler.Engine) {
	t.Helper()
	for i := 0; len(e.Stats().Devices) == 0 || e.Stats().Devices[0].Drains == 0; i++ {
		if i == 120_000 { // 10 min: a hang, not a slow machine
			t.Fatal("gave up waiting for the first drain")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEngineFinalDrainOnStop(t *testing.T) {
	// The device's buffers follow a clock of their own (in the past, so no
	// sample is from the future): the engine runs on real time.
	clk := clocktest.New(time.Now().Add(-time.Hour))
	dev := newFakeDevice(0).onClock(clk)
	e, _ := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: time.Hour, Select: onlyPowerBuffer})
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	waitFirstDrain(t, e)
	clk.Advance(100 * time.Millisecond) // the buffer takes 10 samples
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The first drain: the buffer's 100 samples of history (numbers 5901
	// to 6000, a minute at 10 ms); the final drain: the 10 taken since.
	var got []float64
	for _, s := range out.snapshot() {
		got = append(got, s.Value)
	}
	var want []float64
	for k := 5901; k <= 6010; k++ {
		want = append(want, float64(k))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got sample values %v, want %v", got, want)
	}
	if !out.closed {
		t.Fatal("output not closed")
	}
}

func TestEngineConfigErrors(t *testing.T) {
	src := &fakeSource{devs: []*fakeDevice{newFakeDevice(0)}}
	for _, cfg := range []sampler.Config{
		{DrainInterval: -time.Second},
		{FieldInterval: -time.Second},
		{SlowInterval: 10 * time.Millisecond},
		{Devices: func(record.Device) bool { return false }},
	} {
		if _, err := sampler.New(src, cfg); err == nil {
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}

// Health counters read as fields are rare state: one read per
// RareInterval, not one per field tick.
func TestEngineRareFieldsReadAtRareInterval(t *testing.T) {
	dev := newFakeDevice(0)
	dev.fields[catalog.MetricNVLinkCRCFlitErrors] = 4
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		FieldInterval: 5 * time.Millisecond, RareInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e.AddOutput("c", &collector{}, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	runUntil(t, e, func() bool { return dev.reads(catalog.MetricPowerInstant) >= 10 })
	if n := dev.reads(catalog.MetricNVLinkCRCFlitErrors); n != 1 {
		t.Errorf("rare field read %d times during %d field ticks, want once", n, dev.reads(catalog.MetricPowerInstant))
	}
}

// gpmDevice answers GPM metrics like a backend: nothing new at the first
// snapshot, then values; it counts GPM reads.
type gpmDevice struct {
	*fakeDevice
	gpmReads atomic.Int64
}

func (d *gpmDevice) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	if err := d.fakeDevice.Read(ids, out); err != nil {
		return err
	}
	for i, id := range ids {
		if m, _ := catalog.Default().Get(id); m.Src.Kind != catalog.FromGPM {
			continue
		}
		if i == 0 {
			d.gpmReads.Add(1)
		}
		switch {
		case d.gpmReads.Load() == 1:
			out[i] = sampler.Reading{Err: sampler.ErrNothingNew}
		case id == catalog.MetricSMActive:
			out[i] = sampler.Reading{Value: 42}
		default:
			out[i] = sampler.Reading{Err: sampler.ErrNotSupported}
		}
	}
	return nil
}

// oneDevice is a Source of one device of another kind than fakeDevice
// (one that adds a method the engine looks for).
type oneDevice struct{ dev sampler.DeviceSource }

func (s oneDevice) Name() string { return "fake" }
func (s oneDevice) Devices() ([]sampler.DeviceSource, error) {
	return []sampler.DeviceSource{s.dev}, nil
}
func (s oneDevice) Close() error { return nil }

// GPM metrics are read together, once per GPMInterval: the first snapshot
// yields nothing, unsupported metrics are dropped, the rest flow.
func TestEngineGPMReadAtItsInterval(t *testing.T) {
	clk := clocktest.New(clockStart)
	dev := &gpmDevice{fakeDevice: newFakeDevice(0).onClock(clk)}
	e, err := sampler.New(oneDevice{dev}, sampler.Config{FieldInterval: 5 * time.Millisecond, GPMInterval: 100 * time.Millisecond,
		Clock: clk, CallTimeout: -1,
		Select: func(m *catalog.Metric) bool {
			return m.Src.Kind == catalog.FromGPM || m.ID == catalog.MetricPowerInstant
		}})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	count := func() (n int) {
		for _, s := range out.snapshot() {
			if s.Metric == catalog.MetricSMActive {
				n++
				if s.Value != 42 {
					t.Errorf("sm_active %v", s.Value)
				}
			}
		}
		return n
	}
	// The condition reads the device, which moves in step with the clock;
	// the pump delivers on its own (wall-clock) schedule, so what the
	// output holds is checked after Run has returned and flushed it all.
	runStepped(t, e, clk, 1, 10000, func() bool { return dev.gpmReads.Load() >= 3 })
	if n := count(); n < 2 {
		t.Errorf("%d sm_active samples delivered after 3 GPM reads, want at least 2 (first snapshot yields nothing)", n)
	}
	fields, gpm := dev.reads(catalog.MetricPowerInstant), int(dev.gpmReads.Load())
	if gpm < 3 || fields < 4*gpm {
		t.Errorf("%d GPM reads beside %d field reads: GPM should run at its own, slower interval", gpm, fields)
	}
	if n := dev.reads(catalog.MetricTensorActive); n != 2 {
		t.Errorf("unsupported GPM metric read %d times, want twice (nothing new, then not supported)", n)
	}
	if _, err := sampler.New(oneDevice{dev}, sampler.Config{GPMInterval: 10 * time.Millisecond}); err == nil {
		t.Error("GPM interval 10ms accepted")
	}
}

// ReplaceOutput hands over without a gap or an overlap: every sample
// published goes to exactly one of the old and the new output.
func TestEngineReplaceOutputNoGap(t *testing.T) {
	e := fastSimEngine(t, 2, 5)
	outs := []*collector{{}}
	e.AddOutput("c", outs[0], sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	replaced := 0
	runUntil(t, e, func() bool {
		if replaced < 5 && len(outs[len(outs)-1].snapshot()) > 0 {
			next := &collector{}
			if err := e.ReplaceOutput("c", next, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond}); err != nil {
				t.Errorf("replace: %v", err)
			}
			outs = append(outs, next)
			replaced++
		}
		return replaced == 5 && len(outs[5].snapshot()) > 100
	})
	var published uint64
	for _, d := range e.Stats().Devices {
		published += d.Published
	}
	seen := map[record.Sample]int{}
	var got uint64
	for _, o := range outs {
		for _, s := range o.snapshot() {
			seen[s]++
			got++
		}
	}
	if got != published {
		t.Fatalf("outputs received %d samples in all, devices published %d", got, published)
	}
	for s, n := range seen {
		if n > 1 {
			t.Fatalf("sample %+v delivered %d times", s, n)
		}
	}
	// The output's counters add up across the replacements.
	st := e.Stats().Outputs
	if len(st) != 1 || st[0].Published != published || st[0].Read != got || st[0].Delivered != got ||
		st[0].Dropped != 0 || st[0].Failed != 0 || st[0].Lag != 0 || st[0].Writes == 0 {
		t.Errorf("stats after 5 replacements: %+v, want %d published, read and delivered", st, published)
	}
	if e.AddOutput("late", &collector{}, sampler.PumpOptions{}) == nil {
		t.Fatal("AddOutput after Run ended was accepted")
	}
}

// ReplaceOutputWith builds the new output only after the old one is closed
// (an address both need), and nothing published meanwhile is lost; a build
// that fails removes the output.
func TestEngineReplaceOutputWith(t *testing.T) {
	e := fastSimEngine(t, 1, 9)
	first, second := &collector{}, &collector{}
	opts := sampler.PumpOptions{FlushInterval: 5 * time.Millisecond}
	e.AddOutput("x", first, opts)
	phase := 0
	runUntil(t, e, func() bool {
		switch {
		case phase == 0 && len(first.snapshot()) > 0:
			err := e.ReplaceOutputWith("x", opts, func() (record.Output, error) {
				first.mu.Lock()
				closed := first.closed
				first.mu.Unlock()
				if !closed {
					t.Error("new output built before the old one was closed")
				}
				// Samples keep coming meanwhile: wait until 100 more
				// are published, while no output is attached.
				for p0, giveUp := published(e), time.Now().Add(2*time.Minute); published(e) < p0+100; time.Sleep(time.Millisecond) {
					if time.Now().After(giveUp) { // a hang, not a slow machine
						t.Error("nothing published while the output was replaced")
						break
					}
				}
				return second, nil
			})
			if err != nil {
				t.Errorf("replace: %v", err)
			}
			phase = 1
		case phase == 1 && len(second.snapshot()) > 100:
			return true
		}
		return false
	})
	if got, p := uint64(len(first.snapshot())+len(second.snapshot())), published(e); got != p {
		t.Fatalf("old+new received %d, published %d", got, p)
	}

	// a failing build removes the output
	src2, _ := sim.New(sim.Options{GPUs: 1})
	e2, _ := sampler.New(src2, sampler.Config{})
	e2.AddOutput("y", &collector{}, opts)
	if err := e2.ReplaceOutputWith("y", opts, func() (record.Output, error) { return nil, errors.New("address in use") }); err == nil {
		t.Fatal("failed build not reported")
	}
	if n := len(e2.Stats().Outputs); n != 0 {
		t.Fatalf("%d outputs after a failed replacement, want 0", n)
	}
}

// Remove and both Replace calls name the call and the output when there is
// no such output; after Run has ended the Replace calls refuse with
// ErrStopping and Remove still finds the output.
func TestEngineOutputNotFoundAndStopping(t *testing.T) {
	e := fastSimEngine(t, 1, 3)
	build := func() (record.Output, error) { return &collector{}, nil }
	opts := sampler.PumpOptions{}
	calls := map[string]func(string) error{
		"remove":       e.RemoveOutput,
		"replace":      func(n string) error { return e.ReplaceOutput(n, &collector{}, opts) },
		"replace-with": func(n string) error { return e.ReplaceOutputWith(n, opts, build) },
	}
	for call, f := range calls {
		err := f("nope")
		verb := strings.TrimSuffix(call, "-with")
		if err == nil || err.Error() != verb+" output nope: no such output" {
			t.Errorf("%s of a missing output: %v", call, err)
		}
	}
	if err := e.AddOutput("kept", &collector{}, opts); err != nil {
		t.Fatal(err)
	}
	runUntil(t, e, func() bool { return published(e) > 0 })
	for _, call := range []string{"replace", "replace-with"} {
		if err := calls[call]("kept"); !errors.Is(err, sampler.ErrStopping) {
			t.Errorf("%s after Run ended: %v, want ErrStopping", call, err)
		}
	}
	if err := e.RemoveOutput("kept"); err != nil {
		t.Errorf("remove after Run ended: %v", err)
	}
}

// fastSimEngine returns an engine on gpus simulated GPUs (seed) that
// drains every 30 ms and reads fields every 10 ms.
func fastSimEngine(t *testing.T, gpus int, seed uint64) *sampler.Engine {
	t.Helper()
	src, err := sim.New(sim.Options{GPUs: gpus, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	e, err := sampler.New(src, sampler.Config{DrainInterval: 30 * time.Millisecond, FieldInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return e
}
