//go:build cgo

package nvml

import (
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

// Dedicated-getter fallbacks on the fake library, through the real cgo
// path: GetFieldValues answers NOT_SUPPORTED for the whole call
// (FAKENVML_FIELDS_NS) and the getters serve the same metrics with the
// values the fields would have had; what nothing can read is named once
// at WARN with its reason. With the getters refused too
// (FAKENVML_GETTERS_NS) the metric is named as the device's refusal of
// both.

func TestFakeDriverFieldsNotSupported(t *testing.T) {
	runScenario(t, "fields-ns", false, "FAKENVML_FIELDS_NS=1", "FAKENVML_DEVICES=2", "FAKENVML_RETIRED=3,1", "FAKENVML_NVLINKS=3",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

func TestFakeDriverFieldsAndGettersNotSupported(t *testing.T) {
	runScenario(t, "getters-ns", false, "FAKENVML_FIELDS_NS=1", "FAKENVML_GETTERS_NS=energy,thermal,violation,pcie,retired,nvlink",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// TestFakeDriverBuffersNotSupportedWarn: GetSamples NOT_SUPPORTED on every
// GPU: each buffer type whose metric is point-read instead is named once
// at WARN, whatever the number of GPUs.
func TestFakeDriverBuffersNotSupportedWarn(t *testing.T) {
	runScenario(t, "buffers-ns-warn", false, "FAKENVML_BUFFER_NS=all", "FAKENVML_DEVICES=3",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// warnLines returns the WARN lines of log that contain all of want.
func warnLines(log string, want ...string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, "level=WARN") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// childCapabilities opens the library with a logger the test reads and the
// manual clock, and runs the fallback scenarios.
func childCapabilities(t *testing.T, lib, scenario string) {
	logs := &syncBuffer{}
	clk := manualClock(t)
	s, err := Open(Options{LibraryPath: lib, Now: clk.Now,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	src := s.(*Source)
	defer src.Close()
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	cat := catalog.Default()
	read := func(d sampler.DeviceSource, ids ...catalog.MetricID) []sampler.Reading {
		t.Helper()
		out := make([]sampler.Reading, len(ids))
		if err := d.Read(ids, out); err != nil {
			t.Fatalf("read: %v", err)
		}
		return out
	}
	switch scenario {
	case "fields-ns":
		// The getters give what the fields would have (fakenvml.c).
		want := map[catalog.MetricID]float64{
			catalog.MetricTempMemory:           48,
			catalog.MetricViolationPower:       74000,
			catalog.MetricViolationThermal:     75000,
			catalog.MetricViolationSyncBoost:   76000,
			catalog.MetricViolationBoardLimit:  77000,
			catalog.MetricViolationLowUtil:     78000,
			catalog.MetricViolationReliability: 79000,
			catalog.MetricThrottleSWPowerCap:   74000,
			catalog.MetricThrottleSyncBoost:    76000,
			catalog.MetricPCIeReplays:          0,
			catalog.MetricECCSingleVolatile:    0,
			catalog.MetricRemappedCorrectable:  1,
			catalog.MetricECCSingleAggregate:   3,
			catalog.MetricRowRemapPending:      0,
			catalog.MetricRowRemapFailure:      0,
			// GetRetiredPages' lists (3 and 1 pages: more than go-nvml's
			// first guess of one, so the list is grown).
			catalog.MetricRetiredPagesSingle: 3,
			catalog.MetricRetiredPagesDouble: 1,
			// GetNvLinkErrorCounter summed over the 3 links that answer.
			catalog.MetricNVLinkCRCFlitErrors:  3,
			catalog.MetricNVLinkCRCDataErrors:  4,
			catalog.MetricNVLinkReplayErrors:   5,
			catalog.MetricNVLinkRecoveryErrors: 5,
		}
		for _, d := range devs {
			for id, v := range want {
				// Twice: the first read finds the field unsupported and
				// asks the getter, the second goes to the getter at once.
				for range 2 {
					if r := read(d, id)[0]; r.Err != nil || r.Value != v {
						t.Errorf("%s: %v, %v; want %v from its getter", cat.Name(id), r.Value, r.Err, v)
					}
				}
			}
			if r := read(d, catalog.MetricEnergy)[0]; r.Err != nil || r.Value < float64(clk.Now().UnixMilli()-1000) {
				t.Errorf("energy %v, %v; want the fake's mJ clock", r.Value, r.Err)
			}
		}
		// NVLink errors: once the links are known, one call per link
		// and counter.
		nvl := []catalog.MetricID{catalog.MetricNVLinkCRCFlitErrors, catalog.MetricNVLinkCRCDataErrors,
			catalog.MetricNVLinkReplayErrors, catalog.MetricNVLinkRecoveryErrors}
		calls := devs[1].(sampler.CallBreakdown).CallsByFunction()["GetNvLinkErrorCounter"]
		read(devs[1], nvl...)
		if n := devs[1].(sampler.CallBreakdown).CallsByFunction()["GetNvLinkErrorCounter"] - calls; n != 4*3 {
			t.Errorf("GetNvLinkErrorCounter called %d times in a read of the 4 totals, want 12 (3 links × 4)", n)
		}
		// PCIe bytes: GetPcieThroughput (20 ms a call) at most every
		// 10 s, integrated into a counter from the first read.
		d := devs[0]
		pcie := []catalog.MetricID{catalog.MetricPCIeTxBytes, catalog.MetricPCIeRxBytes}
		if r := read(d, pcie...); r[0].Err != nil || r[1].Err != nil || r[0].Value != 0 || r[1].Value != 0 {
			t.Fatalf("first pcie read %+v: want 0 from the start", r)
		}
		clk.Advance(time.Second)
		if r := read(d, pcie...); !errors.Is(r[0].Err, sampler.ErrNothingNew) || !errors.Is(r[1].Err, sampler.ErrNothingNew) {
			t.Errorf("pcie 1 s later %+v: want nothing new (no GetPcieThroughput more often than every 10 s)", r)
		}
		clk.Advance(9 * time.Second)
		if r := read(d, pcie...); r[0].Err != nil || r[0].Value != 8192*1024*10 || r[1].Value != 4096*1024*10 {
			t.Errorf("pcie 10 s later %+v: want 10 s at 8192 and 4096 KiB/s", r)
		}
		if n := d.(sampler.CallBreakdown).CallsByFunction()["GetPcieThroughput"]; n != 4 {
			t.Errorf("GetPcieThroughput called %d times, want 4 (two reads × two directions)", n)
		}
		// What nothing else reads: named once at WARN (reason device),
		// however many devices and reads.
		unreadable := []catalog.MetricID{catalog.MetricPowerInstant, catalog.MetricThrottleSWThermal, catalog.MetricThrottleHWThermal,
			catalog.MetricThrottleHWPowerBrake, catalog.MetricNVLinkTxBytes, catalog.MetricNVLinkRxBytes}
		for _, d := range devs {
			for range 2 {
				for i, r := range read(d, unreadable...) {
					if !errors.Is(r.Err, sampler.ErrNotSupported) || errors.Is(r.Err, sampler.ErrOldDriver) {
						t.Errorf("%s: %v; want not supported by the device", cat.Name(unreadable[i]), r.Err)
					}
				}
			}
		}
		log := logs.String()
		for _, id := range unreadable {
			w := warnLines(log, "metric="+cat.Name(id)+" ")
			if len(w) != 1 || !strings.Contains(w[0], "reason=device") || !strings.Contains(w[0], "no other NVML function reads it") {
				t.Errorf("%s: WARN lines %q; want one, reason device, saying no other function reads it", cat.Name(id), w)
			}
		}
		for id := range want {
			if w := warnLines(log, "metric="+cat.Name(id)+" "); len(w) != 0 {
				t.Errorf("%s is read by its getter, yet warned: %q", cat.Name(id), w)
			}
		}
	case "getters-ns":
		d := devs[0]
		ids := []catalog.MetricID{catalog.MetricEnergy, catalog.MetricTempMemory, catalog.MetricViolationPower, catalog.MetricPCIeTxBytes,
			catalog.MetricRetiredPagesDouble, catalog.MetricNVLinkReplayErrors}
		for range 2 {
			for i, r := range read(d, ids...) {
				if !errors.Is(r.Err, sampler.ErrNotSupported) || errors.Is(r.Err, sampler.ErrOldDriver) {
					t.Errorf("%s: %v; want not supported by the device", cat.Name(ids[i]), r.Err)
				}
			}
		}
		log := logs.String()
		for _, id := range ids {
			w := warnLines(log, "metric="+cat.Name(id)+" ", "reason=device", "not supported by the device")
			if len(w) != 1 {
				t.Errorf("%s: WARN lines %q; want one naming the field and its getter as the device's refusal", cat.Name(id), w)
			}
		}
		if w := warnLines(log, "metric=energy_consumption ", "nvmlDeviceGetTotalEnergyConsumption"); len(w) != 1 {
			t.Errorf("energy WARN does not name its getter:\n%s", log)
		}
	case "buffers-ns-warn":
		for _, d := range devs {
			for bt := catalog.BufferType(0); bt < catalog.NumBufferTypes; bt++ {
				if _, err := d.Drain(bt, 0, nil); !errors.Is(err, sampler.ErrNotSupported) {
					t.Fatalf("drain %s: %v, want not supported", bt, err)
				}
			}
		}
		log := logs.String()
		for _, b := range []string{"total_power", "gpu_util", "memory_util", "sm_clock", "memory_clock", "encoder_util"} {
			if w := warnLines(log, "sample buffer not supported", "buffer="+b+" "); len(w) != 1 {
				t.Errorf("buffer %s: WARN lines %q; want one for %d GPUs", b, w, len(devs))
			}
		}
		if w := warnLines(log, "buffer=module_power "); len(w) != 0 {
			t.Errorf("module power has no point read; the buffer warning must not promise one: %q", w)
		}
	}
	t.Logf("log:\n%s", logs.String())
}
