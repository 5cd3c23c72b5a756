//go:build cgo

package nvml

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/doctor"
	"github.com/gpusampler/gpusampler/sampler"
)

// TestFakeDriverDoctor runs doctor against the fake library on the real
// cgo path: versions, per-group support, buffer depth and period, the boot
// clock, and latency percentiles.
func TestFakeDriverDoctor(t *testing.T) {
	runScenario(t, "doctor", false, "FAKENVML_CLOCK=boottime", "FAKENVML_PERIOD_US=5000", "FAKENVML_DEVICES=2",
		"FAKENVML_UNSUPPORTED=82", "FAKENVML_GETTERS_NS=thermal")
}

// TestFakeDriverDoctorPointReads: without sample buffers doctor says which
// metrics come from point reads, which are not sampled at all, and does not
// advise running under load.
func TestFakeDriverDoctorPointReads(t *testing.T) {
	runScenario(t, "doctor-fallback", false, "FAKENVML_BUFFER_NS=all", "FAKENVML_MEDIA_UTIL=ns")
}

// TestFakeDriverDoctorMedia: without the media engines' sample buffers,
// doctor says their metrics come from point reads at the rare interval and
// counts them so in its call estimate, as the engine reads them.
func TestFakeDriverDoctorMedia(t *testing.T) {
	runScenario(t, "doctor-media", false, "FAKENVML_BUFFER_NS=3,4,8,9")
}

// TestFakeDriverDoctorFieldsNotSupported: where GetFieldValues is not
// supported, doctor counts the getters that stand in for the fields (one
// call each per field tick) in its call estimate.
func TestFakeDriverDoctorFieldsNotSupported(t *testing.T) {
	runScenario(t, "doctor-fields-ns", false, "FAKENVML_FIELDS_NS=1")
}

func childDoctorCost(t *testing.T, src *Source, scenario string) {
	r, err := doctor.Run(src, doctor.Options{LatencyCalls: 10})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := doctor.WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	cost := map[string]float64{}
	for _, c := range r.Recommend.Cost {
		cost[c.Kind] = c.PerSecond
	}
	switch scenario {
	case "doctor-media":
		for _, m := range []string{"utilization_encoder", "utilization_decoder", "utilization_jpeg", "utilization_ofa"} {
			if !strings.Contains(text, "not supported: "+m+" comes from point reads at the rare interval") {
				t.Errorf("text does not say %s is point-read at the rare interval:\n%s", m, text)
			}
		}
		// Four engines, one point read each per 30 s rare interval.
		if got := cost["point reads for missing or idle buffers"]; got < 4.0/30-1e-9 || got > 4.0/30+1e-9 {
			t.Errorf("point-read cost %v, want 4/30 per second: %+v", got, r.Recommend.Cost)
		}
	case "doctor-fields-ns":
		// Energy, memory temperature and six perf-policy violation times:
		// one getter call each (the throttle aliases share theirs).
		if d := r.Devices[0]; d.FieldCalls != 8 {
			t.Errorf("field calls per read %d, want 8", d.FieldCalls)
		}
		if got := cost["fields (GetFieldValues and the getters that stand in for fields)"]; got != 8 {
			t.Errorf("field cost %+v, want 8 calls a second at the 1 s field interval", r.Recommend.Cost)
		}
	}
	t.Logf("doctor report:\n%s", text)
}

func childDoctorFallback(t *testing.T, src *Source) {
	r, err := doctor.Run(src, doctor.Options{LatencyCalls: 10})
	if err != nil {
		t.Fatal(err)
	}
	var point, unsupported []string
	for _, g := range r.Devices[0].Groups {
		point = append(point, g.PointReads...)
		unsupported = append(unsupported, g.Unsupported...)
	}
	slices.Sort(point)
	if want := []string{"clocks_current_memory", "clocks_current_sm", "power_draw", "utilization_gpu", "utilization_memory"}; !slices.Equal(point, want) {
		t.Errorf("point reads %v, want %v", point, want)
	}
	if !slices.Contains(unsupported, "utilization_encoder") || slices.Contains(unsupported, "power_draw") {
		t.Errorf("unsupported %v: want the encoder, not power", unsupported)
	}
	for _, b := range r.Devices[0].Buffers {
		want := doctor.BufferProbe{Type: b.Type, PointReads: map[string]string{"total_power": "power_draw", "gpu_util": "utilization_gpu",
			"memory_util": "utilization_memory", "sm_clock": "clocks_current_sm", "memory_clock": "clocks_current_memory"}[b.Type]}
		if b != want {
			t.Errorf("buffer %+v, want %+v", b, want)
		}
	}
	// Power, GPU and memory utilization (one GetUtilizationRates), SM and
	// memory clocks: 4 calls per field tick, as the engine reads them.
	if n := r.Devices[0].PointCalls; n != 4 {
		t.Errorf("point calls per read %d, want 4", n)
	}
	if why := r.Recommend.Why[0]; !strings.Contains(why, "no sample buffer is supported") || strings.Contains(why, "under load") {
		t.Errorf("drain advice %q", why)
	}
	var buf bytes.Buffer
	if err := doctor.WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	if text := buf.String(); !strings.Contains(text, "not supported: power_draw comes from point reads at the field interval") ||
		!strings.Contains(text, "point reads (no sample buffer): power_draw") {
		t.Errorf("doctor text does not say point reads:\n%s", text)
	}
	t.Logf("doctor report:\n%s", buf.String())
}

func childDoctor(t *testing.T, src *Source) {
	r, err := doctor.Run(src, doctor.Options{LatencyCalls: 100})
	if err != nil {
		t.Fatal(err)
	}
	if r.Backend != "nvml" || r.Simulated || r.NVML != "13.590.44.01" || r.Driver != "590.44.01" || len(r.Devices) != 2 {
		t.Fatalf("report header %q %v %q %q, %d devices", r.Backend, r.Simulated, r.NVML, r.Driver, len(r.Devices))
	}
	for _, d := range r.Devices {
		if d.Clock != "boottime" {
			t.Errorf("gpu %d clock %s, want boottime", d.Device.Index, d.Clock)
		}
		for _, b := range d.Buffers {
			switch b.Type {
			case "module_power":
				if b.Supported {
					t.Errorf("module power supported")
				}
			case "total_power", "gpu_util":
				if b.Depth != 100 || b.Period != 5*time.Millisecond {
					t.Errorf("gpu %d %s: %+v, want depth 100 period 5ms", d.Device.Index, b.Type, b)
				}
			}
		}
		if d.Latency.Calls != 100 || d.Latency.P50 <= 0 || d.Latency.P99 < d.Latency.P50 {
			t.Errorf("latency %+v", d.Latency)
		}
		for _, g := range d.Groups {
			if g.Group == "temperature" && !strings.Contains(strings.Join(g.Unsupported, ","), "temperature_memory") {
				t.Errorf("temperature group %+v: memory temperature (field 82) should be unsupported", g)
			}
			if len(g.Failed) > 0 {
				t.Errorf("group %s: failed probes %v", g.Group, g.Failed)
			}
		}
	}
	// Each of the 9 supported buffer types spans 500 ms: drained every
	// 250 ms, 4 calls a second.
	if c := r.Recommend.Cost; len(c) == 0 || c[0] != (doctor.CallCost{Kind: "buffers (GetSamples)", PerSecond: 36}) {
		t.Errorf("cost %+v, want buffers at 36 calls/s first", c)
	}
	// 100 × 5 ms = 500 ms span → drain every 250 ms.
	if r.Recommend.DrainInterval != 250*time.Millisecond {
		t.Errorf("drain interval %v, want 250ms: %v", r.Recommend.DrainInterval, r.Recommend.Why)
	}
	var buf bytes.Buffer
	if err := doctor.WriteText(&buf, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("doctor report:\n%s", buf.String())
}

// TestDoctorMediaBufferDriverCause: a driver without the JPEG and
// optical-flow point getters, whose sample buffers for them are refused
// (NOT_SUPPORTED) or unknown (INVALID_ARGUMENT, a sampling type newer than
// the driver), makes doctor name the driver as the cause, not the device.
func TestDoctorMediaBufferDriverCause(t *testing.T) {
	s := mockServer(t, "12.535.54.03")
	s.LookupSymbolFunc = func(name string) error {
		switch name {
		case "nvmlDeviceGetJpgUtilization", "nvmlDeviceGetOfaUtilization", "nvmlDeviceGetTemperatureV":
			return errors.New("absent")
		}
		return nil
	}
	_, devs := openMock(t, s)
	s.Devices[0].(*server.Device).GetSamplesFunc = func(st nvml.SamplingType, _ uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
		switch st {
		case nvml.JPG_UTILIZATION_SAMPLES:
			return 0, nil, nvml.ERROR_NOT_SUPPORTED
		case nvml.OFA_UTILIZATION_SAMPLES:
			return 0, nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return 0, nil, nvml.ERROR_NOT_FOUND
	}
	for id, why := range map[catalog.MetricID]string{
		catalog.MetricUtilJPEG: "nvmlDeviceGetJpgUtilization is absent from this driver",
		catalog.MetricUtilOFA:  "get samples ofa_util: not defined in NVML 12.2 (a newer driver has it)",
	} {
		m, _ := catalog.Default().Get(id)
		point, err := doctor.ProbeSupport(devs[0], &m)
		if point || !errors.Is(err, sampler.ErrOldDriver) || !errors.Is(err, sampler.ErrNotSupported) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: point reads %v, %v; want the driver named as the cause (%q)", m.Name, point, err, why)
		}
	}
}
