package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/gpusampler/gpusampler/sampler"
)

// cmdVersion prints the version, the commit and Go version it was built
// from, and the driver and NVML versions where the library loads.
func cmdVersion(stdout io.Writer) error {
	fmt.Fprintf(stdout, "gpusampler %s\n", version)
	commit, modified, cgo := "unknown", false, "off"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if buildCommit == "" {
					commit = s.Value
				}
			case "vcs.modified":
				modified = modified || s.Value == "true"
			case "CGO_ENABLED":
				if s.Value == "1" {
					cgo = "on"
				}
			}
		}
	}
	if buildCommit != "" {
		// Set by the Makefile from git: present even where the Go
		// toolchain stamps no VCS information (-buildvcs=false).
		commit = buildCommit
	}
	if modified {
		commit += " (modified)"
	}
	fmt.Fprintf(stdout, "commit  %s\ngo      %s %s/%s, cgo %s\n", commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, cgo)
	src, err := openNVML(slog.New(slog.DiscardHandler))
	if err != nil {
		if lib := os.Getenv("GPUSAMPLER_NVML_LIBRARY"); lib != "" {
			// The library the user named: run fails on it too, so no
			// talk of a simulator.
			fmt.Fprintf(stdout, "driver  not loaded: GPUSAMPLER_NVML_LIBRARY=%s: %v\n", lib, err)
			return nil
		}
		why := "not loaded"
		if errors.Is(err, sampler.ErrDriverNotLoaded) {
			why = "library loads, kernel driver not loaded"
		}
		fmt.Fprintf(stdout, "driver  %s (gpusampler runs on simulated GPUs here)\n", why)
		return nil
	}
	defer src.Close()
	if v, ok := src.(interface{ Versions() (string, string) }); ok {
		d, n := v.Versions()
		fmt.Fprintf(stdout, "driver  %s\nnvml    %s\n", orUnknown(d), orUnknown(n))
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
