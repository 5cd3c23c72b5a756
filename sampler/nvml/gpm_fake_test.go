//go:build cgo

package nvml

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

// TestFakeDriverGPM reads GPM profiling metrics through the real cgo path:
// nothing at the first snapshot, then values scaled to the catalog's units;
// the engine reads them at their own interval.
func TestFakeDriverGPM(t *testing.T) { runScenario(t, "gpm", false) }

// TestFakeDriverGPMUnsupported: a device without GPM reports every
// profiling metric unsupported, once.
func TestFakeDriverGPMUnsupported(t *testing.T) { runScenario(t, "gpm", false, "FAKENVML_NO_GPM=1") }

var gpmTestIDs = []catalog.MetricID{catalog.MetricSMActive, catalog.MetricTensorActive, catalog.MetricPCIeTxRate,
	catalog.MetricNVLinkTxRate, catalog.MetricTensorDFMAActive, catalog.MetricTempGPU}

func childGPM(t *testing.T, src *Source) {
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]sampler.Reading, len(gpmTestIDs))
	read := func() {
		t.Helper()
		if err := devs[0].Read(gpmTestIDs, out); err != nil {
			t.Fatal(err)
		}
		if out[5].Err != nil || out[5].Value != 42 {
			t.Errorf("temperature beside GPM: %v, %v", out[5].Value, out[5].Err)
		}
	}
	read()
	if os.Getenv("FAKENVML_NO_GPM") == "1" {
		for i := range 5 {
			if !errors.Is(out[i].Err, sampler.ErrNotSupported) {
				t.Errorf("%s without GPM: %v", catalog.Default().Name(gpmTestIDs[i]), out[i].Err)
			}
		}
		eng, _ := runEngine(t, src, sampler.Config{GPMInterval: 100 * time.Millisecond}, 400*time.Millisecond)
		if d := eng.Stats().Devices[0]; d.ReadErrors != 0 || d.Published == 0 {
			t.Errorf("engine without GPM: published %d, read errors %d", d.Published, d.ReadErrors)
		}
		return
	}
	for i := range 5 {
		if !errors.Is(out[i].Err, sampler.ErrNothingNew) {
			t.Fatalf("first snapshot: %s = %v, %v; want nothing new", catalog.Default().Name(gpmTestIDs[i]), out[i].Value, out[i].Err)
		}
	}
	read() // too soon: nothing new, and the fake aborts if asked to compare
	if !errors.Is(out[0].Err, sampler.ErrNothingNew) {
		t.Fatalf("second snapshot right away: %v; want nothing new", out[0].Err)
	}
	time.Sleep(150 * time.Millisecond)
	read()
	for i, want := range []float64{62.5, 55, 1024 << 20, 4096 << 20, 0} {
		if out[i].Err != nil || out[i].Value != want {
			t.Errorf("%s = %v, %v; want %v", catalog.Default().Name(gpmTestIDs[i]), out[i].Value, out[i].Err, want)
		}
	}
	// Run until three sm_active samples arrived (state, not a fixed
	// time: a loaded machine may be slow), then check that GPM kept to
	// its own interval: never more reads than the elapsed time allows.
	eng, err := sampler.New(src, sampler.Config{GPMInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	if err := eng.AddOutput("collect", col, sampler.PumpOptions{FlushInterval: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	smActive := func() (n int) {
		col.mu.Lock()
		defer col.mu.Unlock()
		for _, s := range col.samples {
			if s.Metric == catalog.MetricSMActive {
				n++
			}
		}
		return n
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	began := time.Now()
	go func() { done <- eng.Run(ctx) }()
	for giveUp := time.Now().Add(2 * time.Minute); smActive() < 3 && time.Now().Before(giveUp); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	// One read per 200 ms from the start, the first of which yields nothing.
	if n, most := smActive(), int(elapsed/(200*time.Millisecond))+1; n < 3 || n > most {
		t.Errorf("%d sm_active samples in %v at a 200 ms GPM interval, want 3 to %d", n, elapsed.Round(time.Millisecond), most)
	}
	if d := eng.Stats().Devices[0]; d.ReadErrors != 0 {
		t.Errorf("engine read errors %d", d.ReadErrors)
	}
}
