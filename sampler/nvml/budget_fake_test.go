//go:build cgo

package nvml

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/sampler"
)

// driverPeriodsUS are the fake's per-type sample periods of a real driver
// (and of the simulator): power 20 ms, GPU, memory and media-engine
// utilization 1/6 s, SM and memory clocks 100 ms (scripts/nvml-calls.sh
// PERIODS=driver).
var driverPeriodsUS = map[catalog.BufferType]uint64{catalog.BufferTotalPower: 20000,
	catalog.BufferGPUUtil: 166667, catalog.BufferMemoryUtil: 166667, catalog.BufferEncoderUtil: 166667,
	catalog.BufferDecoderUtil: 166667, catalog.BufferSMClock: 100000, catalog.BufferMemoryClock: 100000,
	catalog.BufferJPEGUtil: 166667, catalog.BufferOFAUtil: 166667}

// TestFakeDriverCallBudget: at the default config, on GPUs whose buffers
// sample like a real driver's, the engine makes at most 9.5 NVML calls per
// GPU per second in the steady state (seconds 10-60 on the engine's
// clock; with the host's one event wait per second shared by two GPUs,
// within 10), and delivers every driver sample once.
func TestFakeDriverCallBudget(t *testing.T) {
	periods := ""
	for _, typ := range slices.Sorted(maps.Keys(driverPeriodsUS)) {
		if typ != catalog.BufferTotalPower {
			periods += "," + strconv.Itoa(int(typ)) + ":" + strconv.FormatUint(driverPeriodsUS[typ], 10)
		}
	}
	runScenario(t, "call-budget", false, "FAKENVML_PERIOD_US=20000", "FAKENVML_PERIODS_US="+periods[1:],
		"FAKENVML_DEPTH=100", "FAKENVML_DEVICES=2", "FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

func childCallBudget(t *testing.T, src *Source, clk *clocktest.Clock) {
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	const from, to = 10 * time.Second, 60 * time.Second
	start := clk.Now()
	var at10, at60 []map[string]uint64
	snapshot := func() []map[string]uint64 {
		out := make([]map[string]uint64, len(devs))
		for i, d := range devs {
			out[i] = d.(*device).CallsByFunction()
		}
		return out
	}
	// Two device loops and the watchdog park on the clock.
	eng, col := stepEngine(t, src, sampler.Config{}, clk, 3, to, failOnDrops, func(now time.Time) {
		switch el := now.Sub(start); {
		case at10 == nil && el >= from:
			at10 = snapshot()
		case at60 == nil && el >= to:
			at60 = snapshot()
		}
	}, nil)
	if at10 == nil || at60 == nil {
		t.Fatalf("no call snapshot at 10 s (%v) or 60 s (%v)", at10 != nil, at60 != nil)
	}
	window := (to - from).Seconds()
	for i := range devs {
		total := 0.0
		for _, op := range slices.Sorted(maps.Keys(at60[i])) {
			if n := at60[i][op] - at10[i][op]; n > 0 {
				rate := float64(n) / window
				total += rate
				t.Logf("gpu%d %-36s %6.2f calls/s", i, op, rate)
			}
		}
		t.Logf("gpu%d total %.2f calls/s", i, total)
		if total > 9.5 {
			t.Errorf("gpu%d: %.2f NVML calls per second in the steady state at the default config, want at most 9.5", i, total)
		}
		st := eng.Stats().Devices[i]
		if st.SuspectedLosses != 0 || st.LostEstimate != 0 {
			t.Errorf("gpu%d: %d suspected losses, %d samples lost", i, st.SuspectedLosses, st.LostEstimate)
		}
		got := bufferTimes(col, i)
		for typ, p := range driverPeriodsUS {
			ts := got[typ]
			checkContinuous(t, fmt.Sprintf("gpu%d %s", i, typ), ts, p)
			// From the 100 samples of history at start to the final drain.
			if want := uint64(start.UnixMicro())/p - 99; len(ts) == 0 || ts[0] != want*p {
				t.Errorf("gpu%d %s: first sample %v, want the oldest of the history at start (%d)", i, typ, head(ts), want*p)
			}
			if want := uint64(clk.Now().UnixMicro()) / p * p; len(ts) == 0 || ts[len(ts)-1] != want {
				t.Errorf("gpu%d %s: last sample %v, want %d: the newest at the end", i, typ, ts[max(0, len(ts)-1):], want)
			}
		}
	}
}

func head(ts []uint64) []uint64 { return ts[:min(len(ts), 3)] }
