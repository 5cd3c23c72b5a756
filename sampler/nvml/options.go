package nvml

import (
	"errors"
	"log/slog"
	"time"

	"github.com/gpusampler/gpusampler/sampler"
)

// DefaultLibrary is the library Open loads when Options.LibraryPath is empty.
const DefaultLibrary = "libnvidia-ml.so.1"

// Options configure Open.
type Options struct {
	// LibraryPath is the NVML library to load; empty means DefaultLibrary
	// through the dynamic loader's search path.
	LibraryPath string
	// Logger receives the backend's logs (never per sample). Nil discards.
	Logger *slog.Logger
	// CallHook, when set, is called after every NVML C call a device makes,
	// with the call's name and latency (gpu-check uses it for latency
	// percentiles). It is called from the device loops' goroutines,
	// concurrently for different devices, and must be fast.
	CallHook func(op string, d time.Duration)
	// TwoCallSamples turns off the one-call drain path and uses go-nvml's
	// GetSamples (a size query and a fill per drain). For comparisons
	// (BenchmarkEngineFakeDriver/two-call) and as an escape hatch.
	TwoCallSamples bool
	// Now is the clock of the times the backend stamps or spaces itself
	// (GPM snapshot spacing, driver event times); nil means time.Now. Tests
	// pass the engine's manual clock. Call latencies are always measured
	// on the system clock.
	Now func() time.Time
}

// ErrNoCgo is returned by Open in binaries built without cgo. It wraps
// sampler.ErrLibraryNotFound, so callers that fall back to the simulator
// when the driver is missing do so here too.
var ErrNoCgo = errors.New("gpusampler was built without cgo: the NVML backend needs cgo")

// noCgoError wraps ErrNoCgo and sampler.ErrLibraryNotFound.
type noCgoError struct{}

func (noCgoError) Error() string   { return ErrNoCgo.Error() + " (rebuild with CGO_ENABLED=1 and gcc)" }
func (noCgoError) Unwrap() []error { return []error{ErrNoCgo, sampler.ErrLibraryNotFound} }
