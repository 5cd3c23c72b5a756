package lineproto

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// With DeviceStrings every sample line also carries the device's
// nvidia_smi tags arch and compute_mode and string fields (driver_version,
// cuda_version, serial, vbios_version, current_ecc), each where known,
// escaped; what the device lacks (an unsupported ECC mode, a driver without
// the CUDA or VBIOS call) is left out as Telegraf leaves out nvidia-smi's
// "N/A". Without it no line has them.
func TestEncodeDeviceStrings(t *testing.T) {
	devs := []record.Device{
		{Index: 0, UUID: "GPU-0", DriverVersion: "550.54.15", Serial: `S"1 2`, ECCMode: record.ModeEnabled,
			CUDAVersion: "12.4", VBIOSVersion: "95.02.5D.00.01", Architecture: "Ada Lovelace", ComputeMode: "Exclusive_Process"},
		{Index: 1, UUID: "GPU-1", DriverVersion: "550.54.15", ECCMode: record.ModeDisabled},
		{Index: 2, UUID: "GPU-2", ECCMode: record.ModeUnsupported},
	}
	var samples []record.Sample
	for i := range devs {
		samples = append(samples, record.Sample{TimeNS: 1e18, Value: 97, Device: uint16(i), Metric: catalog.MetricUtilGPU})
	}
	samples = append(samples, record.Sample{TimeNS: 1e18, Value: 3, Device: 0, Metric: catalog.MetricPState})
	for _, tc := range []struct {
		strs bool
		want string
	}{
		{true, `nvidia_smi,arch=Ada\ Lovelace,compute_mode=Exclusive_Process,index=0,uuid=GPU-0 utilization_gpu=97i,driver_version="550.54.15",cuda_version="12.4",serial="S\"1 2",vbios_version="95.02.5D.00.01",current_ecc="Enabled" 1000000000000000000` + "\n" +
			`nvidia_smi,index=1,uuid=GPU-1 utilization_gpu=97i,driver_version="550.54.15",current_ecc="Disabled" 1000000000000000000` + "\n" +
			`nvidia_smi,index=2,uuid=GPU-2 utilization_gpu=97i 1000000000000000000` + "\n"},
		{false, `nvidia_smi,index=0,uuid=GPU-0 utilization_gpu=97i 1000000000000000000` + "\n" +
			`nvidia_smi,index=1,uuid=GPU-1 utilization_gpu=97i 1000000000000000000` + "\n" +
			`nvidia_smi,index=2,uuid=GPU-2 utilization_gpu=97i 1000000000000000000` + "\n"},
	} {
		e := New(Options{DeviceStrings: tc.strs})
		e.Encode(&record.Batch{Devices: devs, Samples: samples})
		if got := string(e.Bytes()); got != tc.want || e.Err() != nil {
			t.Errorf("DeviceStrings=%v: got\n%s(err %v)\nwant\n%s", tc.strs, got, e.Err(), tc.want)
		}
	}
}

// A device string that is not valid UTF-8 cannot be a field: the device's
// lines are skipped with an error naming the field, other devices' lines
// are written.
func TestEncodeDeviceStringsInvalid(t *testing.T) {
	e := New(Options{DeviceStrings: true})
	e.Encode(&record.Batch{
		Devices: []record.Device{{Index: 0, UUID: "GPU-0", Serial: "bad\xff"}, {Index: 1, UUID: "GPU-1", DriverVersion: "1.0"}},
		Samples: []record.Sample{{TimeNS: 1e18, Value: 97, Device: 0, Metric: catalog.MetricUtilGPU},
			{TimeNS: 1e18, Value: 98, Device: 1, Metric: catalog.MetricUtilGPU}},
	})
	want := `nvidia_smi,index=1,uuid=GPU-1 utilization_gpu=98i,driver_version="1.0" 1000000000000000000` + "\n"
	if got := string(e.Bytes()); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if err := e.Err(); err == nil || !strings.Contains(err.Error(), "device 0: field serial") {
		t.Errorf("err = %v, want one naming device 0's serial field", err)
	}
}

// SetStats puts NAME+Suffix fields, in the metric's naming and type, on
// every later sample line of the device until the next SetStats; metrics
// the catalog lacks are left out, and nil clears them.
func TestEncodeStats(t *testing.T) {
	e := New(Options{})
	line := func(v float64) {
		e.Encode(&record.Batch{Samples: []record.Sample{{TimeNS: 1e18, Value: v, Device: 0, Metric: catalog.MetricUtilGPU}}})
	}
	e.SetStats(0, []Stat{{Metric: catalog.MetricUtilGPU, Suffix: "_min", Value: 40}, {Metric: catalog.MetricUtilGPU, Suffix: "_max", Value: 99},
		{Metric: catalog.MetricID(60000), Suffix: "_min", Value: 1}})
	line(70)
	line(71)
	e.SetStats(0, nil)
	line(72)
	want := `nvidia_smi,index=0 utilization_gpu=70i,utilization_gpu_min=40i,utilization_gpu_max=99i 1000000000000000000` + "\n" +
		`nvidia_smi,index=0 utilization_gpu=71i,utilization_gpu_min=40i,utilization_gpu_max=99i 1000000000000000000` + "\n" +
		`nvidia_smi,index=0 utilization_gpu=72i 1000000000000000000` + "\n"
	if got := string(e.Bytes()); got != want || e.Err() != nil {
		t.Errorf("got\n%s(err %v)\nwant\n%s", got, e.Err(), want)
	}
}

// With DeviceStrings a two-state metric Telegraf writes as text is
// Telegraf's string field (both of its names where it has two), a value
// other than 0 or 1 is left out like nvidia-smi's "N/A", and a line with
// only such a value still has its other fields; without DeviceStrings the
// metric is its integer under our own name.
func TestEncodeTelegrafText(t *testing.T) {
	at := int64(1e18)
	samples := []record.Sample{
		{TimeNS: at, Value: 1, Device: 0, Metric: catalog.MetricRowRemapPending},
		{TimeNS: at, Value: 0, Device: 0, Metric: catalog.MetricRowRemapFailure},
		{TimeNS: at, Value: 0, Device: 0, Metric: catalog.MetricRetiredPagesPending},
		{TimeNS: at, Value: 1, Device: 0, Metric: catalog.MetricDisplayMode},
		{TimeNS: at, Value: 7, Device: 0, Metric: catalog.MetricDisplayActive},
		{TimeNS: at, Value: 2, Device: 0, Metric: catalog.MetricEncoderSessions},
	}
	for _, tc := range []struct {
		strs bool
		want string
	}{
		{true, `nvidia_smi,index=0,uuid=GPU-0 remapped_rows_pending="Yes",remapped_rows_failure="No",display_mode="Enabled",` +
			`encoder_stats_session_count=2i,retired_pages_pending="No",retired_pages_blacklist="No" 1000000000000000000` + "\n"},
		{false, `nvidia_smi,index=0,uuid=GPU-0 row_remap_pending=1i,row_remap_failure=0i,display_enabled=1i,display_in_use=7i,` +
			`encoder_stats_session_count=2i,page_retirement_pending=0i 1000000000000000000` + "\n"},
	} {
		e := New(Options{DeviceStrings: tc.strs})
		sorted := slices.Clone(samples)
		slices.SortStableFunc(sorted, func(a, b record.Sample) int { return cmp.Compare(a.Metric, b.Metric) })
		e.Encode(&record.Batch{Devices: []record.Device{{Index: 0, UUID: "GPU-0"}}, Samples: sorted})
		if got := string(e.Bytes()); got != tc.want || e.Err() != nil {
			t.Errorf("DeviceStrings=%v: got\n%s(err %v)\nwant\n%s", tc.strs, got, e.Err(), tc.want)
		}
	}
}
