package sampler_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// drainOffsets returns, per buffer type, when it was drained as offsets
// from start, up to and including until.
func (d *fakeDevice) drainOffsets(start time.Time, until time.Duration) map[catalog.BufferType][]time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[catalog.BufferType][]time.Duration{}
	for t, ts := range d.drained {
		for _, at := range ts {
			if off := at.Sub(start); off <= until {
				out[t] = append(out[t], off)
			}
		}
	}
	return out
}

func every(step, until time.Duration) []time.Duration {
	var out []time.Duration
	for at := time.Duration(0); at <= until; at += step {
		out = append(out, at)
	}
	return out
}

func onlyBuffers(types ...catalog.BufferType) func(*catalog.Metric) bool {
	return func(m *catalog.Metric) bool {
		return m.Src.Kind == catalog.FromBuffer && slices.Contains(types, m.Src.Buffer)
	}
}

// scheduleDevice has four buffers, 100 samples deep, whose spans put each
// class's two bounds to the test: power (primary, 10 ms: 1 s span),
// GPU utilization (primary, 50 ms: 5 s), memory clock (secondary, 30 ms:
// 3 s) and encoder (secondary, 200 ms: 20 s).
func scheduleDevice(clk *clocktest.Clock) *fakeDevice {
	dev := newFakeDevice(0).onClock(clk)
	dev.period = map[catalog.BufferType]time.Duration{catalog.BufferTotalPower: 10 * time.Millisecond,
		catalog.BufferGPUUtil: 50 * time.Millisecond, catalog.BufferMemoryClock: 30 * time.Millisecond,
		catalog.BufferEncoderUtil: 200 * time.Millisecond}
	return dev
}

// Each buffer type is drained on its own schedule: half its span, at most
// its class's freshness limit (DrainInterval for the primary buffers,
// SecondaryDrainInterval for the rest), and no sample is lost.
func TestEngineDrainScheduleByClass(t *testing.T) {
	types := []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferGPUUtil, catalog.BufferMemoryClock, catalog.BufferEncoderUtil}
	const until = 20 * time.Second
	for _, tc := range []struct {
		name    string
		primary []catalog.BufferType // nil: the default classes
		want    map[catalog.BufferType][]time.Duration
	}{
		{name: "default classes", want: map[catalog.BufferType][]time.Duration{
			catalog.BufferTotalPower:  every(500*time.Millisecond, until),  // half its 1 s span
			catalog.BufferGPUUtil:     every(time.Second, until),           // the primary limit
			catalog.BufferMemoryClock: every(1500*time.Millisecond, until), // half its 3 s span
			catalog.BufferEncoderUtil: every(4*time.Second, until),         // the secondary limit
		}},
		{name: "encoder primary, GPU utilization secondary", primary: []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferEncoderUtil},
			want: map[catalog.BufferType][]time.Duration{
				catalog.BufferTotalPower:  every(500*time.Millisecond, until),
				catalog.BufferGPUUtil:     every(2500*time.Millisecond, until), // half its 5 s span, under the 4 s limit
				catalog.BufferMemoryClock: every(1500*time.Millisecond, until),
				catalog.BufferEncoderUtil: every(time.Second, until),
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(clockStart)
			dev := scheduleDevice(clk)
			e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
				DrainInterval: time.Second, SecondaryDrainInterval: 4 * time.Second, PrimaryBuffers: tc.primary,
				Select: onlyBuffers(types...), Clock: clk, CallTimeout: -1})
			if err != nil {
				t.Fatal(err)
			}
			out := &collector{}
			e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
			var got map[catalog.BufferType][]time.Duration
			runStepped(t, e, clk, 1, 10000, func() bool {
				if clk.Now().Sub(clockStart) < until {
					return false
				}
				got = dev.drainOffsets(clockStart, until) // the loop is parked: no drain in flight
				return true
			})
			for _, typ := range slices.Sorted(maps.Keys(tc.want)) {
				if !slices.Equal(got[typ], tc.want[typ]) {
					t.Errorf("%s drained at %v, want %v", typ, got[typ], tc.want[typ])
				}
			}
			if st := e.Stats().Devices[0]; st.SuspectedLosses != 0 || st.LostEstimate != 0 {
				t.Errorf("%d suspected losses, %d samples lost", st.SuspectedLosses, st.LostEstimate)
			}
			// Every sample each buffer took, once: its history at start,
			// then each one up to the final drain.
			nums := map[catalog.MetricID][]float64{}
			for _, s := range out.snapshot() {
				nums[s.Metric] = append(nums[s.Metric], s.Value)
			}
			end := clk.Now().Sub(dev.start)
			for _, typ := range types {
				m := catalog.Default().BufferMetric(typ)
				p := dev.period[typ]
				var want []float64
				for k := int64(time.Minute/p) - int64(dev.depth) + 1; k <= int64(end/p); k++ {
					want = append(want, float64(k))
				}
				if !slices.Equal(nums[m], want) {
					t.Errorf("%s: samples %v..., want %v... (%d and %d of them)", typ, head(nums[m]), head(want), len(nums[m]), len(want))
				}
			}
		})
	}
}

func head(v []float64) []float64 { return v[:min(len(v), 5)] }

// memCursors is a CursorStore in memory.
type memCursors struct {
	mu    sync.Mutex
	saved map[string]map[catalog.BufferType]uint64
	saves int
}

func (m *memCursors) Load(uuid string) map[catalog.BufferType]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.saved[uuid])
}

func (m *memCursors) Save(c map[string]map[catalog.BufferType]uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saved = c
	m.saves++
	return nil
}

// power returns the saved power cursor of uuid and how many saves came.
func (m *memCursors) power(uuid string) (cursor uint64, saves int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saved[uuid][catalog.BufferTotalPower], m.saves
}

// gatedOutput holds its first Write until open is closed.
type gatedOutput struct {
	collector
	open chan struct{}
}

func (g *gatedOutput) Write(ctx context.Context, b *record.Batch) error {
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.collector.Write(ctx, b)
}

// newestPower is the number of the newest power buffer sample in s.
func newestPower(s []record.Sample) (k int64) {
	for _, x := range s {
		if x.Metric == catalog.MetricPowerDraw && x.Flags&record.FlagPointRead == 0 {
			k = max(k, int64(x.Value))
		}
	}
	return k
}

// The cursors saved are those every output has taken: while one output is
// blocked in a Write the saved cursor does not move past what it has not
// taken, however often the engine saves and however much another output
// delivered; once it has taken everything, the cursor saved at the end is
// the newest sample both delivered. A crash then skips nothing.
func TestEngineCursorsSavedAsTaken(t *testing.T) {
	clk := clocktest.New(clockStart)
	dev := newFakeDevice(0).onClock(clk)
	store := &memCursors{}
	e, fast := powerEngine(t, clk, dev, store)
	slow := &gatedOutput{open: make(chan struct{})}
	e.AddOutput("slow", slow, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, WriteTimeout: time.Hour})
	var ahead uint64
	released := false
	runStepped(t, e, clk, 2, 10000, func() bool {
		c, saves := store.power("GPU-fake-0")
		if !released {
			if c != 0 {
				ahead = c
				close(slow.open) // let the engine stop
				return true
			}
			if len(fast.snapshot()) >= 2*dev.depth && saves >= 20 {
				close(slow.open)
				released = true
			}
			return false
		}
		return newestPower(slow.snapshot()) >= newestPower(fast.snapshot()) && saves >= 40
	})
	if ahead != 0 {
		t.Fatalf("saved power cursor %d while an output had taken nothing", ahead)
	}
	c, _ := store.power("GPU-fake-0")
	k := newestPower(slow.snapshot())
	if f := newestPower(fast.snapshot()); k != f || k == 0 {
		t.Fatalf("newest power sample delivered: slow %d, fast %d", k, f)
	}
	if want := dev.rawUS(k, 10*time.Millisecond); c != want {
		t.Errorf("saved power cursor %d after the run, want %d (sample %d, the newest both outputs took)", c, want, k)
	}
}

// powerEngine is an engine over dev draining its power buffer every second
// on clk, keeping cursors in store, with one collecting output.
func powerEngine(t *testing.T, clk *clocktest.Clock, dev *fakeDevice, store sampler.CursorStore) (*sampler.Engine, *collector) {
	t.Helper()
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: time.Second, Select: onlyPowerBuffer, Clock: clk, CallTimeout: -1, Cursors: store})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	return e, out
}

// A restart that resumes from a saved cursor older than the buffer's
// history counts the samples the driver no longer holds, but keeps the
// drain interval: the gap came from the restart, not from draining too
// seldom.
func TestEngineResumedGapKeepsInterval(t *testing.T) {
	clk := clocktest.New(clockStart)
	dev := newFakeDevice(0).onClock(clk)
	dev.depth = 50 // 50 × 10 ms = 500 ms span: drained every 250 ms
	store := &memCursors{saved: map[string]map[catalog.BufferType]uint64{
		// 200 samples ago: the 150 after it that the 50-deep buffer no
		// longer holds are lost.
		"GPU-fake-0": {catalog.BufferTotalPower: dev.rawUS(int64(time.Minute/(10*time.Millisecond))-200, 10*time.Millisecond)},
	}}
	e, out := powerEngine(t, clk, dev, store)
	runStepped(t, e, clk, 2, 1000, func() bool { return e.Stats().Devices[0].Drains >= 5 })
	st := e.Stats().Devices[0]
	if st.SuspectedLosses != 1 || st.LostEstimate != 150 {
		t.Errorf("suspected losses %d, lost estimate %d: want 1 and the 150 samples the driver no longer held", st.SuspectedLosses, st.LostEstimate)
	}
	if st.MinDrainInterval != 250*time.Millisecond {
		t.Errorf("drain interval %v after a restart's gap, want half the 500ms span", st.MinDrainInterval)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.events) != 1 || out.events[0].Kind != record.EventSampleLoss ||
		out.events[0].Message != "driver sample buffer overran while the device was not sampled" {
		t.Errorf("events %+v, want one sample_loss saying the device was not sampled", out.events)
	}
}

// Cursors saved under another boot are not restored and are counted as
// discarded for their GPU: the buffer is drained as at a fresh start.
func TestEngineCursorsOfAnotherBootCounted(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, sampler.CursorFileName),
		[]byte(`{"version":1,"boot_id":"another-boot","gpus":{"GPU-fake-0":{"total_power":5}}}`), 0o600)
	store, ignored, err := sampler.OpenCursorFile(dir)
	if err != nil || !ignored {
		t.Fatalf("open: %v, ignored %v", err, ignored)
	}
	defer store.Close()
	clk := clocktest.New(clockStart)
	dev := newFakeDevice(0).onClock(clk)
	e, out := powerEngine(t, clk, dev, store)
	runStepped(t, e, clk, 2, 1000, func() bool { return e.Stats().Devices[0].Drains >= 2 })
	if st := e.Stats().Devices[0]; st.CursorsDiscarded != 1 {
		t.Errorf("cursors discarded %d, want the other boot's 1", st.CursorsDiscarded)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.samples) < 100 {
		t.Errorf("%d samples delivered: want the buffer's history (a fresh start)", len(out.samples))
	}
}

// capDevice reports its buffers' capacity, as the NVML backend does.
type capDevice struct{ *fakeDevice }

func (d capDevice) BufferCapacity(catalog.BufferType) int { return d.depth }

// An idle engine's secondary buffer stays empty, so its span is unknown:
// it is drained at the secondary limit, not every DrainInterval. When the
// engine becomes active and the first drain finds the buffer full, what
// the driver may have overwritten since the last empty drain is counted,
// and the buffer is drained at half its span from then on.
func TestEngineIdleSecondaryBuffer(t *testing.T) {
	clk := clocktest.New(clockStart)
	dev := newFakeDevice(0).onClock(clk)
	// encoder: 50 ms × 100 = 5 s span, shorter than the 10 s limit, idle
	// until the drain at 10 s; decoder idle throughout.
	dev.period = map[catalog.BufferType]time.Duration{catalog.BufferEncoderUtil: 50 * time.Millisecond,
		catalog.BufferDecoderUtil: 50 * time.Millisecond}
	dev.idle[catalog.BufferEncoderUtil], dev.idle[catalog.BufferDecoderUtil] = true, true
	e, err := sampler.New(oneDevice{capDevice{dev}}, sampler.Config{DrainInterval: time.Second, SecondaryDrainInterval: 10 * time.Second,
		Select: onlyBuffers(catalog.BufferEncoderUtil, catalog.BufferDecoderUtil), Clock: clk, CallTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	out := &collector{}
	e.AddOutput("c", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
	const until = 30 * time.Second
	var got map[catalog.BufferType][]time.Duration
	runStepped(t, e, clk, 1, 10000, func() bool {
		at := clk.Now().Sub(clockStart)
		if at >= 10*time.Second { // after the drain at 10 s
			dev.mu.Lock()
			dev.idle[catalog.BufferEncoderUtil] = false
			dev.mu.Unlock()
		}
		if at < until {
			return false
		}
		got = dev.drainOffsets(clockStart, until)
		return true
	})
	want := map[catalog.BufferType][]time.Duration{
		catalog.BufferDecoderUtil: every(10*time.Second, until),
		// Empty at 0 and 10 s; full at 20 s; then every 2.5 s.
		catalog.BufferEncoderUtil: append([]time.Duration{0, 10 * time.Second}, every(2500*time.Millisecond, 10*time.Second)...),
	}
	for i := range want[catalog.BufferEncoderUtil][2:] {
		want[catalog.BufferEncoderUtil][2+i] += 20 * time.Second
	}
	for typ, w := range want {
		if !slices.Equal(got[typ], w) {
			t.Errorf("%s drained at %v, want %v", typ, got[typ], w)
		}
	}
	// The drain at 20 s returned 15.05-20 s; what was taken after the
	// empty drain at 10 s and before that (5.05 s = 101 periods, less the
	// one at the edge) may be lost: 100 samples.
	st := e.Stats().Devices[0]
	if st.SuspectedLosses != 1 || st.LostEstimate != 100 {
		t.Errorf("suspected losses %d, lost estimate %d, want 1 and 100", st.SuspectedLosses, st.LostEstimate)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	wantEv := []record.Event{{Kind: record.EventSampleLoss, StartNS: clockStart.Add(10 * time.Second).UnixNano(),
		EndNS:   clockStart.Add(15*time.Second + 50*time.Millisecond).UnixNano(),
		Message: "driver sample buffer filled up between drains as its engine became active",
		Attrs:   []record.Attr{{Key: "buffer", Value: "encoder_util"}}}}
	if !reflect.DeepEqual(out.events, wantEv) {
		t.Errorf("events %+v\nwant %+v", out.events, wantEv)
	}
}
