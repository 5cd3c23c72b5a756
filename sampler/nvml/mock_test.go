//go:build cgo

package nvml

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

// mockServer returns a dgxh200 mock with the telemetry functions the backend
// calls set on every device. nvmlDeviceGetTemperatureV is reported absent:
// go-nvml's TemperatureHandler would call the C library directly.
func mockServer(t *testing.T, nvmlVersion string) *server.Server {
	t.Helper()
	s := dgxh200.New()
	if nvmlVersion != "" {
		s.NvmlVersion = nvmlVersion
	}
	s.LookupSymbolFunc = func(name string) error {
		if name == "nvmlDeviceGetTemperatureV" {
			return errors.New("absent")
		}
		return nil
	}
	s.SystemGetCudaDriverVersion_v2Func = func() (int, nvml.Return) { return 12040, nvml.SUCCESS }
	for i, dd := range s.Devices {
		d := dd.(*server.Device)
		busID := d.PciBusID
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for j := 0; j < len(busID); j++ {
				p.BusId[j] = int8(busID[j])
			}
			return p, nvml.SUCCESS
		}
		d.GetSerialFunc = func() (string, nvml.Return) { return "serial-" + string(rune('0'+i)), nvml.SUCCESS }
		d.GetVbiosVersionFunc = func() (string, nvml.Return) { return "96.00.74.00.0" + string(rune('1'+i)), nvml.SUCCESS }
		d.GetTemperatureThresholdFunc = func(th nvml.TemperatureThresholds) (uint32, nvml.Return) {
			switch th {
			case nvml.TEMPERATURE_THRESHOLD_SHUTDOWN:
				return 92, nvml.SUCCESS
			case nvml.TEMPERATURE_THRESHOLD_SLOWDOWN:
				return 89, nvml.SUCCESS
			case nvml.TEMPERATURE_THRESHOLD_GPU_MAX:
				return 87, nvml.SUCCESS
			}
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 41, nvml.SUCCESS }
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: 97, Memory: 55}, nvml.SUCCESS
		}
		d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
			return nvml.Memory_v2{Total: 143771 << 20, Reserved: 512 << 20, Free: 100000 << 20, Used: 43259 << 20}, nvml.SUCCESS
		}
		d.GetFanSpeedFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
		d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
		d.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return nvml.DEVICE_ARCH_HOPPER, nvml.SUCCESS }
		d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS }
		d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
			return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
	}
	return s
}

func openMock(t *testing.T, s *server.Server) (*Source, []sampler.DeviceSource) {
	t.Helper()
	src, err := open(s, "mock", Options{})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	return src, devs
}

func value(b []byte) (v [8]byte) { copy(v[:], b); return v }

func u32(x uint32) [8]byte {
	var b [8]byte
	binary.NativeEndian.PutUint32(b[:4], x)
	binary.NativeEndian.PutUint32(b[4:], 0xdeadbeef) // garbage in the high bytes
	return b
}

func u64(x uint64) [8]byte {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], x)
	return b
}

func TestMockOpen(t *testing.T) {
	s := mockServer(t, "")
	// GPU 2: no architecture read; another compute mode.
	d2 := s.Devices[2].(*server.Device)
	d2.GetArchitectureFunc = func() (nvml.DeviceArchitecture, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d2.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, nvml.SUCCESS }
	src, devs := openMock(t, s)
	if src.Name() != "nvml" {
		t.Errorf("Name = %q", src.Name())
	}
	drv, nv := src.Versions()
	if drv != "550.54.15" || nv != "12.550.54.15" {
		t.Errorf("Versions = %q, %q", drv, nv)
	}
	if got := src.NVMLVersion().API; got != api12_4 {
		t.Errorf("API = %v, want 12.4", got)
	}
	if len(devs) != 8 {
		t.Fatalf("%d devices, want 8", len(devs))
	}
	id, err := devs[3].Identity()
	if err != nil {
		t.Fatal(err)
	}
	want := s.Devices[3].(*server.Device)
	if id.Index != 3 || id.UUID != want.UUID || id.Backend != "nvml" || id.PCIBusID != want.PciBusID ||
		!strings.Contains(id.Name, "H200") || id.Serial != "serial-3" || id.DriverVersion != "550.54.15" ||
		id.CUDAVersion != "12.4" || id.VBIOSVersion != "96.00.74.00.04" {
		t.Errorf("identity = %+v", id)
	}
	if id.Architecture != "Hopper" || id.ComputeMode != "Default" {
		t.Errorf("identity architecture/compute mode = %q/%q, want Hopper/Default", id.Architecture, id.ComputeMode)
	}
	if id2, _ := devs[2].Identity(); id2.Architecture != "" || id2.ComputeMode != "Exclusive_Process" {
		t.Errorf("GPU 2 architecture/compute mode = %q/%q, want unknown/Exclusive_Process", id2.Architecture, id2.ComputeMode)
	}
	if id.MemoryTotalMiB == 0 || id.SlowdownTempC != 89 || id.ShutdownTempC != 92 || id.MaxOperatingTempC != 87 || id.MemoryMaxTempC != 0 {
		t.Errorf("identity thresholds/memory = %+v", id)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMockOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		ret  nvml.Return
		want error
		text string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, sampler.ErrLibraryNotFound, "install the NVIDIA driver"},
		{nvml.ERROR_DRIVER_NOT_LOADED, sampler.ErrDriverNotLoaded, "kernel module"},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, sampler.ErrDriverNotLoaded, "reboot"},
		{nvml.ERROR_NO_PERMISSION, sampler.ErrNoPermission, "no permission"},
	} {
		s := mockServer(t, "")
		s.InitFunc = func() nvml.Return { return tc.ret }
		s.LookupSymbolFunc = func(string) error { t.Fatal("LookupSymbol after a failed Init"); return nil }
		_, err := open(s, "libnvidia-ml.so.1", Options{})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("Init %d: err = %v, want %v containing %q", tc.ret, err, tc.want, tc.text)
		}
	}
}

func TestOpenLibraryMissing(t *testing.T) {
	_, err := Open(Options{LibraryPath: t.TempDir() + "/libnvidia-ml.so.1"})
	if !errors.Is(err, sampler.ErrLibraryNotFound) {
		t.Fatalf("err = %v, want ErrLibraryNotFound", err)
	}
	if !strings.Contains(err.Error(), "install the NVIDIA driver") || strings.Count(err.Error(), "\n") != 0 {
		t.Errorf("error is not one line saying how to fix it: %q", err)
	}
}

// An explicit library that exists but does not load (corrupt, wrong
// architecture) is reported with the loader's own reason, never as "not
// found"; a missing one says not found, with the loader's reason too.
func TestOpenLibraryCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	if err := os.WriteFile(path, []byte("this is not an ELF shared object, but it is long enough to be read as a header"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(Options{LibraryPath: path})
	if !errors.Is(err, sampler.ErrLibraryNotFound) {
		t.Fatalf("err = %v", err)
	}
	want := "nvml: cannot load " + path + ": the file is there but does not load (loader: " + path +
		": invalid ELF header): point at the driver's own libnvidia-ml.so.1"
	if msg := err.Error(); msg != want {
		t.Fatalf("error\n%q\nwant\n%q", msg, want)
	}
	_, err = Open(Options{LibraryPath: path + ".missing"})
	want = "nvml: cannot load " + path + ".missing (loader: " + path + ".missing: cannot open shared object file: No such file or directory): " +
		"sampler: driver library not found: install the NVIDIA driver, run on a host with an NVIDIA GPU, or set the NVML library path to libnvidia-ml.so.1"
	if !errors.Is(err, sampler.ErrLibraryNotFound) || err.Error() != want {
		t.Fatalf("error\n%v\nwant\n%q", err, want)
	}
}

func TestMockDrain(t *testing.T) {
	s := mockServer(t, "")
	_, devs := openMock(t, s)
	d := s.Devices[0].(*server.Device)
	var ret nvml.Return
	var vt nvml.ValueType
	var samples []nvml.Sample
	d.GetSamplesFunc = func(st nvml.SamplingType, last uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
		return vt, samples, ret
	}
	dev := devs[0]
	cc := dev.(sampler.CallCounter)

	// Power: unsigned int mW with garbage in the high bytes → W; the
	// sample at the cursor is not returned again.
	vt, ret = nvml.VALUE_TYPE_UNSIGNED_INT, nvml.SUCCESS
	samples = []nvml.Sample{{TimeStamp: 100, SampleValue: u32(1000)}, {TimeStamp: 200, SampleValue: u32(250500)}, {TimeStamp: 300, SampleValue: u32(700000)}}
	got, err := dev.Drain(catalog.BufferTotalPower, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []sampler.RawSample{{TimeUS: 200, Value: 250.5}, {TimeUS: 300, Value: 700}}; !slices.Equal(got, want) {
		t.Errorf("power drain = %v, want %v", got, want)
	}
	if c := cc.CallStats().Calls; c != 2+2 { // handle + MIG mode at open + GetSamples(size, fill)
		t.Errorf("calls = %d, want 4", c)
	}

	// Other value types decode by their own width.
	for _, tc := range []struct {
		vt   nvml.ValueType
		v    [8]byte
		want float64
	}{
		{nvml.VALUE_TYPE_DOUBLE, u64(math.Float64bits(12.5)), 12.5},
		{nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, u64(1 << 40), 1 << 40},
		{nvml.VALUE_TYPE_SIGNED_LONG_LONG, u64(uint64(1<<64 - 5)), -5},
		{nvml.VALUE_TYPE_SIGNED_INT, u32(uint32(1<<32 - 7)), -7},
		{nvml.VALUE_TYPE_UNSIGNED_SHORT, value([]byte{0x34, 0x12, 0xff, 0xff}), 0x1234},
	} {
		vt, samples = tc.vt, []nvml.Sample{{TimeStamp: 5, SampleValue: tc.v}}
		got, err := dev.Drain(catalog.BufferSMClock, 0, nil)
		if err != nil || len(got) != 1 || got[0].Value != tc.want {
			t.Errorf("value type %d: got %v, %v; want %v", tc.vt, got, err, tc.want)
		}
	}

	before := cc.CallStats().Calls
	for _, tc := range []struct {
		ret  nvml.Return
		want error
		msg  string
	}{
		{nvml.ERROR_NOT_FOUND, sampler.ErrNothingNew, "get samples gpu_util: nothing new"},
		{nvml.ERROR_NOT_SUPPORTED, sampler.ErrNotSupported, "get samples gpu_util: not supported"},
		{nvml.ERROR_GPU_IS_LOST, sampler.ErrGPULost, "get samples gpu_util: gpu is lost"},
		{nvml.ERROR_NO_PERMISSION, sampler.ErrNoPermission, "get samples gpu_util: no permission"},
		{nvml.ERROR_TIMEOUT, sampler.ErrTimeout, "get samples gpu_util: timeout"},
	} {
		ret, samples = tc.ret, nil
		_, err := dev.Drain(catalog.BufferGPUUtil, 7, nil)
		if !errors.Is(err, tc.want) || err.Error() != tc.msg {
			t.Errorf("ret %d: err = %v, want %q (%v)", tc.ret, err, tc.msg, tc.want)
		}
	}
	if c := cc.CallStats().Calls - before; c != 5 {
		t.Errorf("failed size queries counted %d calls, want 5", c)
	}
	// Everything at or before the cursor: nothing new, not an empty success.
	ret, vt = nvml.SUCCESS, nvml.VALUE_TYPE_UNSIGNED_INT
	samples = []nvml.Sample{{TimeStamp: 7, SampleValue: u32(1)}}
	if _, err := dev.Drain(catalog.BufferGPUUtil, 7, nil); !errors.Is(err, sampler.ErrNothingNew) {
		t.Errorf("stale drain: err = %v, want ErrNothingNew", err)
	}
}

// fieldServer makes device 0 answer GetFieldValues from vals (missing ids:
// NOT_SUPPORTED) and records the ids of every batch.
func fieldServer(t *testing.T, version string, vals map[uint32]nvml.FieldValue) (*server.Server, *[][]uint32) {
	s := mockServer(t, version)
	var batches [][]uint32
	s.Devices[0].(*server.Device).GetFieldValuesFunc = func(fv []nvml.FieldValue) nvml.Return {
		var ids []uint32
		for i := range fv {
			ids = append(ids, fv[i].FieldId)
			v, ok := vals[fv[i].FieldId]
			if !ok {
				fv[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
				continue
			}
			v.FieldId = fv[i].FieldId
			fv[i] = v
		}
		batches = append(batches, ids)
		return nvml.SUCCESS
	}
	return s, &batches
}

func TestMockReadFields(t *testing.T) {
	vals := map[uint32]nvml.FieldValue{
		186: {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_INT), Value: u32(312250), Timestamp: 1_700_000_000_000_000},
		83:  {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG), Value: u64(123456789)},
		138: {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG), Value: u64(10)},
		74:  {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG), Value: u64(5000)},
		82:  {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_INT), Value: u32(48)},
		197: {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG), Value: u64(1 << 33)},
		252: {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG), Value: u64(900)},
		270: {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG), Value: u64(700)},
		3:   {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG), Value: u64(2)},
		142: {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_INT), Value: u32(1)},
		143: {ValueType: uint32(nvml.VALUE_TYPE_UNSIGNED_INT), Value: u32(0)},
	}
	ids := []catalog.MetricID{catalog.MetricPowerInstant, catalog.MetricEnergy, catalog.MetricNVLinkTxBytes,
		catalog.MetricThrottleSWPowerCap, catalog.MetricViolationPower, catalog.MetricTempMemory,
		catalog.MetricPCIeTxBytes, catalog.MetricThrottleHWThermal, catalog.MetricNVLinkRxBytes,
		catalog.MetricECCSingleVolatile, catalog.MetricRemappedCorrectable, catalog.MetricRemappedUncorrectable}
	for _, tc := range []struct {
		version   string
		hwThermal float64 // 0: not supported
		field     uint32
	}{
		{"12.550.54.15", 0, 0},     // 12.4: no throttle-time fields, none asked for
		{"12.575.51.03", 900, 252}, // 12.9: 251–253
		{"13.590.10.01", 700, 270}, // 13.1: 269–271
	} {
		s, batches := fieldServer(t, tc.version, vals)
		_, devs := openMock(t, s)
		out := make([]sampler.Reading, len(ids))
		calls0 := devs[0].(sampler.CallCounter).CallStats().Calls
		if err := devs[0].Read(ids, out); err != nil {
			t.Fatal(err)
		}
		if c := devs[0].(sampler.CallCounter).CallStats().Calls - calls0; c != 1 {
			t.Errorf("%s: %d calls for one field read, want 1", tc.version, c)
		}
		check := func(i int, want float64) {
			t.Helper()
			if out[i].Err != nil || out[i].Value != want {
				t.Errorf("%s: %s = %v, %v; want %v", tc.version, catalog.Default().Name(ids[i]), out[i].Value, out[i].Err, want)
			}
		}
		check(0, 312.25)
		if out[0].TimeNS != 1_700_000_000_000_000_000 {
			t.Errorf("field timestamp = %d", out[0].TimeNS)
		}
		check(1, 123456789)
		check(2, 10*1024)
		check(3, 5000)
		check(4, 5000) // same field as SW power cap, asked once
		check(5, 48)
		check(6, 1<<33)
		if tc.hwThermal == 0 {
			if !errors.Is(out[7].Err, sampler.ErrNotSupported) {
				t.Errorf("%s: hw thermal err = %v, want not supported", tc.version, out[7].Err)
			}
		} else {
			check(7, tc.hwThermal)
		}
		if !errors.Is(out[8].Err, sampler.ErrNotSupported) || !strings.Contains(out[8].Err.Error(), "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX") {
			t.Errorf("nvlink rx err = %v", out[8].Err)
		}
		check(9, 2)
		check(10, 1)
		check(11, 0)
		got := (*batches)[0]
		for _, bad := range []uint32{251, 252, 253, 269, 270, 271} {
			if slices.Contains(got, bad) && bad != tc.field && bad != tc.field-1 && bad != tc.field+1 {
				t.Errorf("%s: asked for field %d: %v", tc.version, bad, got)
			}
		}
		if n := len(got); n != len(slices.Compact(slices.Sorted(slices.Values(got)))) {
			t.Errorf("%s: duplicate field ids in batch %v", tc.version, got)
		}
		// Not supported once: not asked again.
		if err := devs[0].Read(ids, out); err != nil {
			t.Fatal(err)
		}
		if slices.Contains((*batches)[1], 139) {
			t.Errorf("%s: field 139 asked again after not supported", tc.version)
		}
	}
}

func TestMockReadQueries(t *testing.T) {
	s := mockServer(t, "")
	_, devs := openMock(t, s)
	memCalls := 0
	d := s.Devices[0].(*server.Device)
	inner := d.GetMemoryInfo_v2Func
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { memCalls++; return inner() }
	ids := []catalog.MetricID{catalog.MetricMemoryUsed, catalog.MetricMemoryFree, catalog.MetricMemoryTotal,
		catalog.MetricMemoryReserved, catalog.MetricTempGPU, catalog.MetricFanSpeed, catalog.MetricPowerLimit,
		catalog.MetricUtilGPU, catalog.MetricUtilMemory}
	out := make([]sampler.Reading, len(ids))
	if err := devs[0].Read(ids, out); err != nil {
		t.Fatal(err)
	}
	want := []float64{43259, 100000, 143771, 512, 41, 0, 700, 97, 55}
	for i, w := range want {
		if i == 5 {
			if !errors.Is(out[i].Err, sampler.ErrNotSupported) {
				t.Errorf("fan err = %v, want not supported", out[i].Err)
			}
			continue
		}
		if out[i].Err != nil || out[i].Value != w {
			t.Errorf("%s = %v, %v; want %v", catalog.Default().Name(ids[i]), out[i].Value, out[i].Err, w)
		}
	}
	if memCalls != 1 {
		t.Errorf("memory info called %d times for 4 metrics, want 1", memCalls)
	}
	fanCalls := len(d.GetFanSpeedCalls())
	if err := devs[0].Read(ids, out); err != nil {
		t.Fatal(err)
	}
	if n := len(d.GetFanSpeedCalls()); n != fanCalls {
		t.Errorf("fan speed asked again after not supported")
	}
	// A lost GPU fails the whole read.
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }
	err := devs[0].Read(ids, out)
	if !errors.Is(err, sampler.ErrGPULost) || !strings.Contains(err.Error(), "read device 0") {
		t.Errorf("lost: err = %v", err)
	}
}
