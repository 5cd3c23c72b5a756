package main

import (
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
