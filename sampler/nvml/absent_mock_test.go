//go:build cgo

package nvml

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

// TestOldDriverCause: on a driver without the nvmlGpm* functions (an R520
// one, older than R535), a GPM metric is "not supported" because the driver
// is old, and says what is missing and which driver has it; one the device
// declines is only "not supported". The source names the R535 notice.
func TestOldDriverCause(t *testing.T) {
	s := mockServer(t, "11.520.61.05")
	s.DriverVersion = "520.61.05"
	s.LookupSymbolFunc = func(name string) error {
		if strings.HasPrefix(name, "nvmlGpm") || name == "nvmlDeviceGetTemperatureV" {
			return errors.New("absent")
		}
		return nil
	}
	src, devs := openMock(t, s)
	ids := []catalog.MetricID{catalog.MetricSMActive, catalog.MetricTempGPU}
	out := make([]sampler.Reading, len(ids))
	if err := devs[0].Read(ids, out); err != nil {
		t.Fatal(err)
	}
	err := out[0].Err
	if !errors.Is(err, sampler.ErrOldDriver) || !errors.Is(err, sampler.ErrNotSupported) {
		t.Fatalf("GPM on a driver without nvmlGpm*: %v; want ErrOldDriver and ErrNotSupported", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "nvmlGpm") || !strings.Contains(msg, "is absent from this driver (needs NVML 12.0, driver R525 or newer)") {
		t.Errorf("message %q does not name the missing function and the driver that has it", msg)
	}
	if out[1].Err != nil {
		t.Errorf("temperature: %v", out[1].Err)
	}
	if errors.Is(notSupported("x"), sampler.ErrOldDriver) {
		t.Errorf("a device's NOT_SUPPORTED reads as an old driver")
	}
	n := src.Notices()
	if len(n) != 1 || !strings.Contains(n[0], "driver 520.61.05 (NVML 11.520.61.05) is older than R535 (NVML 12.2)") {
		t.Errorf("notices %q, want the R535 notice", n)
	}
	if n := mustOpen(t, "13.590.44.01").Notices(); n != nil {
		t.Errorf("notices on a current driver: %q", n)
	}
}

func mustOpen(t *testing.T, version string) *Source {
	src, _ := openMock(t, mockServer(t, version))
	return src
}

// TestGPMDriverCause: a driver that exports the GPM functions but answers
// nvmlGpmQueryDeviceSupport with FUNCTION_NOT_FOUND or
// ARGUMENT_VERSION_MISMATCH lacks GPM as the driver, not the (Hopper) GPU:
// the metric's error says so and wraps ErrOldDriver.
func TestGPMDriverCause(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_ARGUMENT_VERSION_MISMATCH} {
		s := mockServer(t, "12.535.54.03")
		for _, dd := range s.Devices {
			dd.(*server.Device).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, ret }
		}
		_, devs := openMock(t, s)
		out := make([]sampler.Reading, 1)
		if err := devs[0].Read([]catalog.MetricID{catalog.MetricSMActive}, out); err != nil {
			t.Fatal(err)
		}
		if err := out[0].Err; !errors.Is(err, sampler.ErrOldDriver) || !errors.Is(err, sampler.ErrNotSupported) ||
			!strings.Contains(err.Error(), "a newer driver has it") {
			t.Errorf("%v: %v; want the driver named as the cause", ret, err)
		}
	}
}
