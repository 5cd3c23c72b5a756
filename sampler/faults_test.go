package sampler_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// Fault-injection tests on the simulator. They assert outcomes — events
// arrive, counters move, states change — and wait for them with a generous
// deadline; nothing asserts how long anything took.

// waitFor polls cond until it holds; it fails the test after a deadline
// that is only a safety net against hanging forever.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
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

func (c *collector) countFor(dev int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.samples {
		if int(s.Device) == dev {
			n++
		}
	}
	return n
}

// startSim runs an engine over n simulated GPUs with fast drains and
// retries and returns the devices, the engine, the collector and a stop
// function that ends the run and returns Run's error.
func startSim(t *testing.T, n int, cfg sampler.Config) ([]*sim.Device, *sampler.Engine, *collector, func() error) {
	t.Helper()
	src, err := sim.New(sim.Options{GPUs: n, Profile: "training", Seed: 7,
		Periods: [catalog.NumBufferTypes]time.Duration{catalog.BufferTotalPower: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := src.Devices()
	devs := make([]*sim.Device, len(ds))
	for i, d := range ds {
		devs[i] = d.(*sim.Device)
	}
	if cfg.DrainInterval == 0 {
		cfg.DrainInterval = 20 * time.Millisecond
	}
	if cfg.FieldInterval == 0 {
		cfg.FieldInterval = 20 * time.Millisecond
	}
	if cfg.LostRetryInterval == 0 {
		cfg.LostRetryInterval = 10 * time.Millisecond
	}
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
	var runErr error
	stop := func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	t.Cleanup(func() { stop() })
	return devs, eng, col, stop
}

func stateOf(eng *sampler.Engine, dev int) sampler.DeviceState {
	return eng.Stats().Devices[dev].State
}

func TestGPULostMidRunOthersKeepSampling(t *testing.T) {
	devs, eng, col, stop := startSim(t, 3, sampler.Config{})
	waitFor(t, "every GPU sampling", func() bool { return col.countFor(0) > 0 && col.countFor(1) > 0 && col.countFor(2) > 0 })

	devs[1].SetLost(true)
	waitFor(t, "device_lost on gpu1", func() bool { return len(col.eventsOf(record.EventDeviceLost, 1)) == 1 })
	waitFor(t, "gpu1 state lost", func() bool { s := stateOf(eng, 1); return s == sampler.DeviceLost || s == sampler.DeviceRecovering })
	lostAt := eng.Stats().Devices[1].Published
	n0, n2 := col.countFor(0), col.countFor(2)
	waitFor(t, "gpu0 and gpu2 sampling while gpu1 is lost", func() bool { return col.countFor(0) > n0+100 && col.countFor(2) > n2+100 })
	if p := eng.Stats().Devices[1].Published; p != lostAt {
		t.Errorf("lost gpu1 published %d samples while lost", p-lostAt)
	}

	devs[1].SetLost(false)
	waitFor(t, "device_recovered on gpu1", func() bool { return len(col.eventsOf(record.EventDeviceRecovery, 1)) == 1 })
	waitFor(t, "gpu1 sampling again", func() bool { return eng.Stats().Devices[1].Published > lostAt+50 })
	if s := stateOf(eng, 1); s != sampler.DeviceOK {
		t.Errorf("gpu1 state %v after recovery, want ok", s)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rec := col.eventsOf(record.EventDeviceRecovery, 1)[0]
	if !slices.Contains(rec.Attrs, record.Attr{Key: "from", Value: "lost"}) || rec.EndNS < rec.StartNS {
		t.Errorf("recovery event %+v", rec)
	}
	st := eng.Stats().Devices[1]
	if st.Recoveries != 1 {
		t.Errorf("recoveries = %d, want 1", st.Recoveries)
	}
	if len(col.eventsOf(record.EventDeviceLost, 0))+len(col.eventsOf(record.EventDeviceLost, 2)) != 0 {
		t.Errorf("healthy GPUs reported lost")
	}
}

func TestHungCallStallsOnlyItsDevice(t *testing.T) {
	devs, eng, col, stop := startSim(t, 2, sampler.Config{CallTimeout: 30 * time.Millisecond})
	waitFor(t, "both GPUs sampling", func() bool { return col.countFor(0) > 0 && col.countFor(1) > 0 })

	release := devs[1].Hang()
	waitFor(t, "device_hung on gpu1", func() bool { return len(col.eventsOf(record.EventDeviceHung, 1)) == 1 })
	if s := stateOf(eng, 1); s != sampler.DeviceHung {
		t.Errorf("gpu1 state %v, want hung", s)
	}
	// gpu0 keeps ticking: its field reads advance by many ticks while
	// gpu1's call is stuck.
	f0, p1 := eng.Stats().Devices[0].FieldReads, eng.Stats().Devices[1].Published
	waitFor(t, "gpu0 ticking during the hang", func() bool { return eng.Stats().Devices[0].FieldReads > f0+20 })
	if p := eng.Stats().Devices[1].Published; p != p1 {
		t.Errorf("hung gpu1 published %d samples", p-p1)
	}

	release()
	waitFor(t, "gpu1 recovered from hung", func() bool {
		for _, e := range col.eventsOf(record.EventDeviceRecovery, 1) {
			if slices.Contains(e.Attrs, record.Attr{Key: "from", Value: "hung"}) {
				return true
			}
		}
		return false
	})
	waitFor(t, "gpu1 sampling again", func() bool { return eng.Stats().Devices[1].Published > p1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if st := eng.Stats().Devices[1]; st.Hangs != 1 || st.State != sampler.DeviceOK {
		t.Errorf("gpu1 hangs %d, state %v; want 1, ok", st.Hangs, st.State)
	}
	if len(col.eventsOf(record.EventDeviceHung, 0)) != 0 {
		t.Errorf("healthy gpu0 reported hung")
	}
}

// A hang that is never released does not keep the engine from stopping.
func TestHungDeviceDoesNotBlockShutdown(t *testing.T) {
	devs, _, col, stop := startSim(t, 2, sampler.Config{CallTimeout: 20 * time.Millisecond})
	release := devs[0].Hang()
	defer release() // after the test: let the abandoned goroutine finish
	waitFor(t, "device_hung on gpu0", func() bool { return len(col.eventsOf(record.EventDeviceHung, 0)) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestXIDArrivesExactlyOnce(t *testing.T) {
	devs, _, col, stop := startSim(t, 2, sampler.Config{})
	devs[1].InjectXID(79)
	waitFor(t, "xid event", func() bool { return len(col.eventsOf(record.EventXID, 1)) > 0 })
	// Keep running a while (more pump flushes), then stop and count.
	n := col.countFor(0)
	waitFor(t, "more batches", func() bool { return col.countFor(0) > n+200 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	xids := col.eventsOf(record.EventXID, 1)
	if len(xids) != 1 {
		t.Fatalf("%d xid events, want exactly 1", len(xids))
	}
	if !slices.Contains(xids[0].Attrs, record.Attr{Key: "xid", Value: "79"}) {
		t.Errorf("xid event %+v", xids[0])
	}
	if len(col.eventsOf(record.EventXID, 0)) != 0 {
		t.Errorf("xid on the wrong GPU")
	}
}
