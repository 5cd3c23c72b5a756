//go:build cgo

package nvml

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

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

func TestFakeDriverGPULost(t *testing.T)        { runFaultScenario(t, "lost", "FAKENVML_DEVICES=2") }
func TestFakeDriverHungCall(t *testing.T)       { runFaultScenario(t, "hang", "FAKENVML_DEVICES=2") }
func TestFakeDriverXIDExactlyOnce(t *testing.T) { runFaultScenario(t, "xid", "FAKENVML_DEVICES=2") }
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

func (c *collector) eventsOf(kind sampler.EventKind, dev int) []sampler.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []sampler.Event
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
	eng, err := sampler.New(src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	if err := eng.AddOutput("collect", col, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond}); err != nil {
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
	waitFor(t, "device_lost on gpu1", func() bool { return len(col.eventsOf(sampler.EventDeviceLost, 1)) == 1 })
	p0, p1 := published(eng, 0), published(eng, 1)
	waitFor(t, "gpu0 sampling while gpu1 is lost", func() bool { return published(eng, 0) > p0+200 })
	if p := published(eng, 1); p != p1 {
		t.Errorf("lost gpu1 published %d samples", p-p1)
	}
	ctlFile(t, "lost1", false, "")
	waitFor(t, "device_recovered on gpu1", func() bool { return len(col.eventsOf(sampler.EventDeviceRecovery, 1)) == 1 })
	waitFor(t, "gpu1 sampling again", func() bool { return published(eng, 1) > p1+50 })
	stop()
	if st := eng.Stats().Devices[1]; st.State != sampler.DeviceOK || st.Recoveries != 1 {
		t.Errorf("gpu1 state %v, recoveries %d", st.State, st.Recoveries)
	}
	if n := len(col.eventsOf(sampler.EventDeviceLost, 0)); n != 0 {
		t.Errorf("gpu0 reported lost %d times", n)
	}
}

func childHang(t *testing.T, src *Source) {
	eng, col, stop := startEngine(t, src, sampler.Config{CallTimeout: 50 * time.Millisecond})
	waitFor(t, "both GPUs sampling", func() bool { return published(eng, 0) > 0 && published(eng, 1) > 0 })
	ctlFile(t, "hang1", true, "")
	waitFor(t, "device_hung on gpu1", func() bool { return len(col.eventsOf(sampler.EventDeviceHung, 1)) == 1 })
	f0, p1 := eng.Stats().Devices[0].FieldReads, published(eng, 1)
	waitFor(t, "gpu0 ticking during the hang", func() bool { return eng.Stats().Devices[0].FieldReads > f0+20 })
	if p := published(eng, 1); p != p1 {
		t.Errorf("hung gpu1 published %d samples", p-p1)
	}
	ctlFile(t, "hang1", false, "")
	waitFor(t, "gpu1 back from hung", func() bool { return eng.Stats().Devices[1].State == sampler.DeviceOK })
	waitFor(t, "gpu1 sampling again", func() bool { return published(eng, 1) > p1 })
	stop()
	if n := len(col.eventsOf(sampler.EventDeviceHung, 0)); n != 0 {
		t.Errorf("gpu0 reported hung %d times", n)
	}
}

func childXID(t *testing.T, src *Source) {
	eng, col, stop := startEngine(t, src, sampler.Config{})
	waitFor(t, "sampling", func() bool { return published(eng, 0) > 0 })
	ctlFile(t, "xid1", true, "79\n")
	waitFor(t, "xid event", func() bool { return len(col.eventsOf(sampler.EventXID, 1)) > 0 })
	p := published(eng, 0)
	waitFor(t, "more batches", func() bool { return published(eng, 0) > p+200 })
	stop()
	xids := col.eventsOf(sampler.EventXID, 1)
	if len(xids) != 1 {
		t.Fatalf("%d xid events, want exactly 1", len(xids))
	}
	if !slices.Contains(xids[0].Attrs, sampler.Attr{Key: "xid", Value: "79"}) || xids[0].Message != "Xid 79: GPU has fallen off the bus" {
		t.Errorf("xid event %+v", xids[0])
	}
	if n := len(col.eventsOf(sampler.EventXID, 0)); n != 0 {
		t.Errorf("%d xid events on gpu0", n)
	}
	// The XID counter metric counts it too.
	out := make([]sampler.Reading, 1)
	devs, _ := src.Devices()
	if err := devs[1].Read([]sampler.MetricID{sampler.MetricXIDCount}, out); err != nil || out[0].Err != nil || out[0].Value != 1 {
		t.Errorf("xid count %v, %v, %v", out[0].Value, out[0].Err, err)
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
			pw = pw || s.Metric == sampler.MetricPowerDraw
			ut = ut || s.Metric == sampler.MetricUtilGPU
		}
		return pw && ut
	})
	p := published(eng, 0)
	waitFor(t, "sampling continues", func() bool { return published(eng, 0) > p+100 })
	stop()
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, s := range col.samples {
		if s.Metric != sampler.MetricPowerDraw && s.Metric != sampler.MetricUtilGPU {
			t.Fatalf("unsupported metric %s published", sampler.DefaultCatalog.Name(s.Metric))
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
