//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// Fault injection on the fake library: the parent test hands the child a
// control directory (FAKENVML_CTL_DIR); the child creates and removes
// files there to make a device lost, hang a device's calls, queue an XID,
// or keep the driver from loading. Tests assert outcomes and wait for
// them; no assertion is about how long anything took.

func runFaultScenario(t *testing.T, scenario string, env ...string) {
	ctl := t.TempDir()
	runScenario(t, scenario, false, append(env, "FAKENVML_CTL_DIR="+ctl, "FAKENVML_PERIOD_US=5000")...)
}

func TestFakeDriverGPULost(t *testing.T) { runFaultScenario(t, "lost", "FAKENVML_DEVICES=2") }
func TestFakeDriverHangFlaggedInTime(t *testing.T) {
	runFaultScenario(t, "hang-clock", "FAKENVML_DEVICES=2", "FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}
func TestFakeDriverLostAtStart(t *testing.T) {
	runFaultScenario(t, "lost-at-start", "FAKENVML_DEVICES=2", "FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}
func TestFakeDriverLostAndBack(t *testing.T) {
	runFaultScenario(t, "lost-and-back", "FAKENVML_DEVICES=2", "FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}
func TestFakeDriverHungCall(t *testing.T) { runFaultScenario(t, "hang", "FAKENVML_DEVICES=2") }

// TestFakeDriverXIDExactlyOnce: an XID on GPU 1 arrives once, as GPU 1's,
// through one event set and one waiter for both GPUs.
func TestFakeDriverXIDExactlyOnce(t *testing.T) {
	runFaultScenario(t, "xid", "FAKENVML_DEVICES=2", "FAKENVML_FUNCS_FILE="+filepath.Join(t.TempDir(), "funcs"))
}
func TestFakeDriverAllNotSupported(t *testing.T) {
	runFaultScenario(t, "allns", "FAKENVML_DEVICES=1")
}
func TestFakeDriverMissingThenLoaded(t *testing.T) { runFaultScenario(t, "driver-late") }

// ctlFile creates (on) or removes a control file; contents are written
// atomically (rename) so the library never reads half a file.
func ctlFile(t *testing.T, name string, on bool, content string) {
	t.Helper()
	path := filepath.Join(os.Getenv("FAKENVML_CTL_DIR"), name)
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a safety net, not a timing assertion
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *collector) eventsOf(kind record.EventKind, dev int) []record.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []record.Event
	for _, e := range c.events {
		if e.Kind == kind && e.Device == dev {
			out = append(out, e)
		}
	}
	return out
}

// startEngine runs the engine with fast drains and retries until the
// returned stop is called.
func startEngine(t *testing.T, src sampler.Source, cfg sampler.Config) (*sampler.Engine, *collector, func()) {
	t.Helper()
	cfg.DrainInterval = 20 * time.Millisecond
	cfg.FieldInterval = 20 * time.Millisecond
	cfg.LostRetryInterval = 10 * time.Millisecond
	return launch(t, src, cfg, 5*time.Millisecond)
}

// launch runs the engine on src with one collecting output (flushed every
// flush) until the returned stop is called (at the latest when the test
// ends).
func launch(t *testing.T, src sampler.Source, cfg sampler.Config, flush time.Duration) (*sampler.Engine, *collector, func()) {
	t.Helper()
	eng, err := sampler.New(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	if err := eng.AddOutput("collect", col, sampler.PumpOptions{FlushInterval: flush}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return eng, col, stop
}

func published(eng *sampler.Engine, dev int) uint64 { return eng.Stats().Devices[dev].Published }

func childLost(t *testing.T, src *Source) {
	eng, col, stop := startEngine(t, src, sampler.Config{})
	waitFor(t, "both GPUs sampling", func() bool { return published(eng, 0) > 0 && published(eng, 1) > 0 })
	ctlFile(t, "lost1", true, "")
	waitFor(t, "device_lost on gpu1", func() bool { return len(col.eventsOf(record.EventDeviceLost, 1)) == 1 })
	p0, p1 := published(eng, 0), published(eng, 1)
	waitFor(t, "gpu0 sampling while gpu1 is lost", func() bool { return published(eng, 0) > p0+200 })
	if p := published(eng, 1); p != p1 {
		t.Errorf("lost gpu1 published %d samples", p-p1)
	}
	ctlFile(t, "lost1", false, "")
	waitFor(t, "device_recovered on gpu1", func() bool { return len(col.eventsOf(record.EventDeviceRecovery, 1)) == 1 })
	waitFor(t, "gpu1 sampling again", func() bool { return published(eng, 1) > p1+50 })
	stop()
	if st := eng.Stats().Devices[1]; st.State != sampler.DeviceOK || st.Recoveries != 1 {
		t.Errorf("gpu1 state %v, recoveries %d", st.State, st.Recoveries)
	}
	if n := len(col.eventsOf(record.EventDeviceLost, 0)); n != 0 {
		t.Errorf("gpu0 reported lost %d times", n)
	}
}

func childHang(t *testing.T, src *Source) {
	eng, col, stop := startEngine(t, src, sampler.Config{CallTimeout: 50 * time.Millisecond})
	waitFor(t, "both GPUs sampling", func() bool { return published(eng, 0) > 0 && published(eng, 1) > 0 })
	ctlFile(t, "hang1", true, "")
	waitFor(t, "device_hung on gpu1", func() bool { return len(col.eventsOf(record.EventDeviceHung, 1)) == 1 })
	f0, p1 := eng.Stats().Devices[0].FieldReads, published(eng, 1)
	waitFor(t, "gpu0 ticking during the hang", func() bool { return eng.Stats().Devices[0].FieldReads > f0+20 })
	if p := published(eng, 1); p != p1 {
		t.Errorf("hung gpu1 published %d samples", p-p1)
	}
	ctlFile(t, "hang1", false, "")
	waitFor(t, "gpu1 back from hung", func() bool { return eng.Stats().Devices[1].State == sampler.DeviceOK })
	waitFor(t, "gpu1 sampling again", func() bool { return published(eng, 1) > p1 })
	stop()
	if n := len(col.eventsOf(record.EventDeviceHung, 0)); n != 0 {
		t.Errorf("gpu0 reported hung %d times", n)
	}
}

func childXID(t *testing.T, src *Source) {
	eng, col, stop := startEngine(t, src, sampler.Config{})
	waitFor(t, "sampling", func() bool { return published(eng, 0) > 0 })
	ctlFile(t, "xid1", true, "79\n")
	waitFor(t, "xid event", func() bool { return len(col.eventsOf(record.EventXID, 1)) > 0 })
	p := published(eng, 0)
	waitFor(t, "more batches", func() bool { return published(eng, 0) > p+200 })
	stop()
	xids := col.eventsOf(record.EventXID, 1)
	if len(xids) != 1 {
		t.Fatalf("%d xid events, want exactly 1", len(xids))
	}
	if !slices.Contains(xids[0].Attrs, record.Attr{Key: "xid", Value: "79"}) || xids[0].Message != "Xid 79: GPU has fallen off the bus" {
		t.Errorf("xid event %+v", xids[0])
	}
	if n := len(col.eventsOf(record.EventXID, 0)); n != 0 {
		t.Errorf("%d xid events on gpu0", n)
	}
	// The XID counter metric counts it too.
	out := make([]sampler.Reading, 1)
	devs, _ := src.Devices()
	if err := devs[1].Read([]catalog.MetricID{catalog.MetricXIDCount}, out); err != nil || out[0].Err != nil || out[0].Value != 1 {
		t.Errorf("xid count %v, %v, %v", out[0].Value, out[0].Err, err)
	}
	// One event set for both GPUs, each registered once (the engine closed
	// the library: the fake wrote what it was asked).
	b, err := os.ReadFile(os.Getenv("FAKENVML_FUNCS_FILE"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"call nvmlEventSetCreate 1\n", "call nvmlDeviceRegisterEvents 2\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the fake library saw\n%s\nwant %q", b, want)
		}
	}
}

func childAllNotSupported(t *testing.T, src *Source) {
	ctlFile(t, "allns", true, "")
	eng, col, stop := startEngine(t, src, sampler.Config{})
	waitFor(t, "power and utilization samples", func() bool {
		col.mu.Lock()
		defer col.mu.Unlock()
		var pw, ut bool
		for _, s := range col.samples {
			pw = pw || s.Metric == catalog.MetricPowerDraw
			ut = ut || s.Metric == catalog.MetricUtilGPU
		}
		return pw && ut
	})
	p := published(eng, 0)
	waitFor(t, "sampling continues", func() bool { return published(eng, 0) > p+100 })
	stop()
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, s := range col.samples {
		if s.Metric != catalog.MetricPowerDraw && s.Metric != catalog.MetricUtilGPU {
			t.Fatalf("unsupported metric %s published", catalog.Default().Name(s.Metric))
		}
	}
	if st := eng.Stats().Devices[0]; st.ReadErrors != 0 || st.State != sampler.DeviceOK {
		t.Errorf("read errors %d, state %v: not supported is not an error", st.ReadErrors, st.State)
	}
}

func childDriverLate(t *testing.T, lib string) {
	ctlFile(t, "noload", true, "")
	var failures []error
	src, err := OpenRetry(context.Background(), Options{LibraryPath: lib}, RetryPolicy{
		Attempts: 5,
		Sleep:    func(context.Context, time.Duration) error { return nil },
		OnRetry: func(attempt int, err error) {
			failures = append(failures, err)
			if attempt == 2 {
				ctlFile(t, "noload", false, "") // the driver loads
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if len(failures) != 2 || !errors.Is(failures[0], sampler.ErrDriverNotLoaded) {
		t.Fatalf("failures before the driver loaded: %v", failures)
	}
	devs, err := src.Devices()
	if err != nil || len(devs) != 1 {
		t.Fatalf("devices %d, %v", len(devs), err)
	}
	// And a driver that never loads: the last error, for cmd to exit 1.
	ctlFile(t, "noload", true, "")
	_, err = OpenRetry(context.Background(), Options{LibraryPath: lib}, RetryPolicy{Attempts: 3,
		Sleep: func(context.Context, time.Duration) error { return nil }})
	if !errors.Is(err, sampler.ErrDriverNotLoaded) {
		t.Fatalf("never loaded: %v", err)
	}
	t.Logf("gave up: %v", err)
}

// bufferTimes returns, per buffer type, the driver timestamps (µs) of the
// buffer samples published for dev, in order.
func bufferTimes(col *collector, dev int) map[catalog.BufferType][]uint64 {
	col.mu.Lock()
	defer col.mu.Unlock()
	out := map[catalog.BufferType][]uint64{}
	for _, s := range col.samples {
		m, _ := catalog.Default().Get(s.Metric)
		if int(s.Device) == dev && m.Src.Kind == catalog.FromBuffer && s.Flags&record.FlagPointRead == 0 {
			out[m.Src.Buffer] = append(out[m.Src.Buffer], uint64(s.TimeNS/1000))
		}
	}
	return out
}

var fakeBufferTypes = []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferGPUUtil, catalog.BufferSMClock, catalog.BufferMemoryClock}

// GPU 1 does not answer at start (its handle cannot be had): it is probed
// by index every LostRetryInterval on the engine's clock and sampled from
// the first probe after it answers, beginning with what its buffers hold.
func childLostAtStart(t *testing.T, src *Source, clk *clocktest.Clock) {
	devs, err := src.Devices()
	if err != nil || len(devs) != 2 {
		t.Fatalf("devices %d, %v: the GPU that failed at start must be kept", len(devs), err)
	}
	t0 := clk.Now()
	const every = 200 * time.Millisecond
	back := t0.Add(time.Second)
	answered := false
	eng, col := stepEngine(t, src, sampler.Config{LostRetryInterval: every}, clk, 3, 2*time.Second, failOnDrops, func(now time.Time) {
		if !answered && !now.Before(back) {
			ctlFile(t, "lost1", false, "") // the GPU answers from the next probe on
			answered = true
		}
	}, nil)
	st := eng.Stats().Devices[1]
	// Probes at t0+200ms … t0+1s fail; the one at t0+1.2s finds the GPU.
	if st.Recoveries != 1 || st.Probes != 6 || st.State != sampler.DeviceOK {
		t.Errorf("gpu1: recoveries %d, probes %d, state %v; want 1, 6 (every %v from the start), ok", st.Recoveries, st.Probes, st.State, every)
	}
	if id := eng.Devices()[1]; id.UUID != "GPU-fake-0000-0001" || id.Index != 1 || id.Name != "NVIDIA Fake H200" {
		t.Errorf("gpu1 identity after recovery %+v", id)
	}
	// The outputs learn of GPU 1 once it answers, with its UUID and name:
	// never first as a device record without them.
	col.mu.Lock()
	var recs []record.Device
	for _, d := range col.devices {
		if d.Index == 1 {
			recs = append(recs, d)
		}
	}
	col.mu.Unlock()
	if len(recs) == 0 {
		t.Errorf("gpu1: no device record delivered after it answered")
	}
	for _, d := range recs {
		if d.UUID != "GPU-fake-0000-0001" || d.Name != "NVIDIA Fake H200" {
			t.Errorf("gpu1 device record with uuid %q, name %q; want every record to carry the GPU's identity", d.UUID, d.Name)
		}
	}
	lost := col.eventsOf(record.EventDeviceLost, 1)
	rec := col.eventsOf(record.EventDeviceRecovery, 1)
	wantRec := t0.Add(6 * every)
	if len(lost) != 1 || lost[0].StartNS != t0.UnixNano() || len(rec) != 1 || rec[0].StartNS != t0.UnixNano() || rec[0].EndNS != wantRec.UnixNano() {
		t.Fatalf("gpu1 lost events %+v, recovery events %+v; want lost at %v, recovered at %v", lost, rec, t0, wantRec)
	}
	// The first drain after recovery returns the whole buffer: depth (100)
	// samples up to the recovery, and every one after, once.
	for dev, from := range map[int]time.Time{0: t0, 1: wantRec} {
		got := bufferTimes(col, dev)
		for _, typ := range fakeBufferTypes {
			ts := got[typ]
			checkContinuous(t, fmt.Sprintf("gpu%d %s", dev, typ), ts, fakePeriodUS)
			first := uint64(from.UnixMicro())/fakePeriodUS*fakePeriodUS - 99*fakePeriodUS
			if len(ts) == 0 || ts[0] != first {
				t.Errorf("gpu%d %s: first sample at %v µs, want %d (a full buffer before %v)", dev, typ, ts[:min(1, len(ts))], first, from)
			}
		}
	}
	if n := len(col.eventsOf(record.EventDeviceLost, 0)); n != 0 {
		t.Errorf("gpu0 reported lost %d times", n)
	}
	t.Logf("gpu1 lost at start, probed %d times every %v, sampled from %v on (%d samples)", st.Probes, every, wantRec.Sub(t0), st.Published)
}

// GPU 1 is lost for a while shorter than its buffers' span: the first probe
// after it answers again (every LostRetryInterval from the loss, no backoff
// first) resumes it, and the first drain delivers what the buffers took
// while it was lost: no gap, no duplicate.
func childLostAndBack(t *testing.T, src *Source, clk *clocktest.Clock) {
	t0 := clk.Now()
	const every = 100 * time.Millisecond
	loseAt, answerAt := t0.Add(500*time.Millisecond), t0.Add(750*time.Millisecond)
	var lostFile, answered time.Time
	eng, col := stepEngine(t, src, sampler.Config{LostRetryInterval: every}, clk, 3, 2*time.Second, failOnDrops, func(now time.Time) {
		switch {
		case lostFile.IsZero() && !now.Before(loseAt):
			ctlFile(t, "lost1", true, "")
			lostFile = now
		case answered.IsZero() && !now.Before(answerAt):
			ctlFile(t, "lost1", false, "")
			answered = now
		}
	}, nil)
	lost := col.eventsOf(record.EventDeviceLost, 1)
	rec := col.eventsOf(record.EventDeviceRecovery, 1)
	if len(lost) != 1 || len(rec) != 1 {
		t.Fatalf("gpu1: %d lost and %d recovery events, want 1 each", len(lost), len(rec))
	}
	lostAt := time.Unix(0, lost[0].StartNS)
	wantRec := lostAt
	for !wantRec.After(answered) {
		wantRec = wantRec.Add(every)
	}
	if rec[0].EndNS != wantRec.UnixNano() {
		t.Errorf("recovered at %v after the loss, want %v: the first probe after the GPU answered (at %v)",
			time.Unix(0, rec[0].EndNS).Sub(lostAt), wantRec.Sub(lostAt), answered.Sub(lostAt))
	}
	got := bufferTimes(col, 1)
	for _, typ := range fakeBufferTypes {
		ts := got[typ]
		checkContinuous(t, "gpu1 "+typ.String(), ts, fakePeriodUS)
		// Every sample the driver took while the GPU was lost arrived.
		n := 0
		for _, us := range ts {
			if us > uint64(lostAt.UnixMicro()) && us <= uint64(wantRec.UnixMicro()) {
				n++
			}
		}
		if want := int(wantRec.Sub(lostAt) / (fakePeriodUS * time.Microsecond)); n != want {
			t.Errorf("gpu1 %s: %d samples from the outage delivered, want %d", typ, n, want)
		}
	}
	st := eng.Stats().Devices[1]
	if st.SuspectedLosses != 0 || st.Recoveries != 1 {
		t.Errorf("gpu1: suspected losses %d, recoveries %d", st.SuspectedLosses, st.Recoveries)
	}
	t.Logf("gpu1 lost at +%v, answered at +%v, resumed at +%v after %d probes; outage samples all delivered",
		lostAt.Sub(t0), answered.Sub(t0), wantRec.Sub(t0), st.Probes)
}

// ctlExists reports whether the fake created control file name.
func ctlExists(name string) bool {
	_, err := os.Stat(filepath.Join(os.Getenv("FAKENVML_CTL_DIR"), name))
	return err == nil
}

// waitParked waits until at least n timers are armed on clk or done holds
// (polling: a goroutine stuck in a driver call never parks).
func waitParked(clk *clocktest.Clock, n int, done func() bool) {
	for clk.Armed() < n && !done() {
		time.Sleep(time.Millisecond)
	}
}

// GPU 1's calls hang from a chosen moment and never return: the watchdog
// (ticking every CallTimeout/10) flags it within CallTimeout + 10 % on the
// engine's clock, GPU 0 samples on, and when the end is asked the engine
// stops LoopStopGrace later, abandoning GPU 1's loop (counted).
func childHangClock(t *testing.T, src *Source, clk *clocktest.Clock) {
	const timeout = time.Second
	eng, err := sampler.New(src, sampler.Config{CallTimeout: timeout, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	if err := eng.AddOutput("collect", col, sampler.PumpOptions{FlushInterval: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t0 := clk.Now()
	armed := 3 // two device loops and the watchdog
	var hungAt, flaggedAt time.Time
	var p0 uint64
	for flaggedAt.IsZero() || clk.Now().Before(flaggedAt.Add(500*time.Millisecond)) {
		waitParked(clk, armed, func() bool { return hungAt.IsZero() && ctlExists("hanging1") })
		switch {
		case hungAt.IsZero() && ctlExists("hanging1"):
			hungAt, armed = clk.Now(), 2 // the call began at this step: the clock has not moved since
			p0 = published(eng, 0)
		case hungAt.IsZero() && !clk.Now().Before(t0.Add(500*time.Millisecond)) && !ctlExists("hang1"):
			ctlFile(t, "hang1", true, "")
		case !hungAt.IsZero() && flaggedAt.IsZero() && eng.Stats().Devices[1].Hangs == 1:
			flaggedAt = clk.Now()
		}
		clk.Step(armed)
	}
	if late := flaggedAt.Sub(hungAt); late < timeout || late > timeout+timeout/10 {
		t.Errorf("hang flagged %v after the call began, want within [%v, %v]", late, timeout, timeout+timeout/10)
	}
	if p := published(eng, 0); p <= p0 {
		t.Errorf("gpu0 published nothing during gpu1's hang")
	}
	// Ask for the end while the call still hangs.
	cancel()
	askedAt := clk.Now()
	for !slices.Contains(clk.Deadlines(), askedAt.Add(sampler.LoopStopGrace)) {
		time.Sleep(time.Millisecond) // until Run waits for the loops
	}
	var runErr error
	stopped := false
	for !stopped {
		waitParked(clk, 2, func() bool { return len(done) > 0 })
		select {
		case runErr = <-done:
			stopped = true
		default:
			clk.Step(2)
		}
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	if took := clk.Now().Sub(askedAt); took != sampler.LoopStopGrace {
		t.Errorf("Run returned %v after the end was asked, want %v", took, sampler.LoopStopGrace)
	}
	st := eng.Stats()
	if !st.Devices[1].Abandoned || st.Devices[0].Abandoned || st.Devices[1].State != sampler.DeviceHung {
		t.Errorf("abandoned gpu0 %v, gpu1 %v (state %v); want only gpu1, hung", st.Devices[0].Abandoned, st.Devices[1].Abandoned, st.Devices[1].State)
	}
	hung := col.eventsOf(record.EventDeviceHung, 1)
	if len(hung) != 1 || hung[0].StartNS != hungAt.UnixNano() {
		t.Errorf("device_hung events %+v, want one starting at %v", hung, hungAt)
	}
	t.Logf("call hung at +%v, flagged %v later (timeout %v); shutdown took %v of the clock, gpu1 abandoned",
		hungAt.Sub(t0), flaggedAt.Sub(hungAt), timeout, clk.Now().Sub(askedAt))
}
