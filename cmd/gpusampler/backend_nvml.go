package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/nvml"
)

// openNVML opens the NVML backend. GPUSAMPLER_NVML_LIBRARY overrides the
// library path (tests point it at a fake driver; operators at a
// non-standard install).
func openNVML(log *slog.Logger) (sampler.Source, error) {
	return nvml.Open(nvml.Options{LibraryPath: os.Getenv("GPUSAMPLER_NVML_LIBRARY"), Logger: log})
}

// openNVMLWait opens the NVML backend, waiting with backoff (about a
// minute in all) while the kernel driver is not loaded yet or does not match
// the library; then it gives up and the command exits 1, so that systemd or
// Kubernetes restarts gpusampler. The process cannot switch to a reloaded
// driver library: stop gpusampler before a driver upgrade.
func openNVMLWait(ctx context.Context, log *slog.Logger) (sampler.Source, error) {
	return nvml.OpenRetry(ctx, nvml.Options{LibraryPath: os.Getenv("GPUSAMPLER_NVML_LIBRARY"), Logger: log},
		nvml.RetryPolicy{OnRetry: func(attempt int, err error) {
			log.Warn("NVML driver not ready; retrying", "attempt", attempt, "err", err)
		}})
}
