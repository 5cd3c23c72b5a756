package nvml

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpusampler/gpusampler/internal/backoff"
	"github.com/gpusampler/gpusampler/sampler"
)

// RetryPolicy says how OpenRetry waits for a driver that is not loaded yet
// (the service started before the kernel module) or whose kernel module and
// library differ (a driver upgrade without a reboot). The zero value means
// the defaults.
type RetryPolicy struct {
	// Attempts is the number of Open calls in all (default 6).
	Attempts int
	// Initial is the first wait (default 1 s); each next wait doubles it,
	// and no wait exceeds Max (default 30 s).
	Initial, Max time.Duration
	// Sleep waits d or until ctx ends; nil means a timer. Tests inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnRetry, when set, is called before each wait with the attempt that
	// failed (from 1) and its error.
	OnRetry func(attempt int, err error)
}

// OpenRetry opens the NVML backend like Open, retrying with backoff while
// the driver is not loaded (sampler.ErrDriverNotLoaded: DRIVER_NOT_LOADED,
// LIB_RM_VERSION_MISMATCH). A missing library (no driver installed) returns
// at once. Only nvmlInit is called until one succeeds: no other NVML
// function is safe after a failed Init. Other errors return at once; so
// does the last attempt's error, for the caller (cmd) to exit non-zero so
// that systemd or Kubernetes restarts the process. A process cannot switch
// to a reloaded driver library: stop gpusampler before a driver upgrade.
func OpenRetry(ctx context.Context, opts Options, p RetryPolicy) (sampler.Source, error) {
	if p.Attempts <= 0 {
		p.Attempts = 6
	}
	if p.Initial <= 0 {
		p.Initial = time.Second
	}
	if p.Max <= 0 {
		p.Max = 30 * time.Second
	}
	if p.Sleep == nil {
		p.Sleep = backoff.Sleep
	}
	bo := backoff.Backoff{Initial: p.Initial, Max: p.Max}
	for attempt := 1; ; attempt++ {
		src, err := Open(opts)
		if err == nil {
			return src, nil
		}
		if !errors.Is(err, sampler.ErrDriverNotLoaded) {
			return nil, err
		}
		if attempt >= p.Attempts {
			return nil, fmt.Errorf("%w (gave up after %d attempts)", err, attempt)
		}
		if p.OnRetry != nil {
			p.OnRetry(attempt, err)
		}
		if err := p.Sleep(ctx, bo.Delay()); err != nil {
			return nil, fmt.Errorf("nvml: waiting for the driver: %w", err)
		}
		bo.Next()
	}
}
