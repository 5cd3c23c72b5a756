//go:build !cgo

package nvml

import (
	"github.com/gpusampler/gpusampler/sampler"
)

// Source is the NVML backend. In this build (no cgo) it cannot be opened.
type Source struct{}

// Open always fails in a build without cgo: the error wraps ErrNoCgo and
// sampler.ErrLibraryNotFound.
func Open(opts Options) (sampler.Source, error) { return nil, noCgoError{} }

// Name returns "nvml".
func (s *Source) Name() string { return "nvml" }

// Devices fails: there is no NVML without cgo.
func (s *Source) Devices() ([]sampler.DeviceSource, error) { return nil, noCgoError{} }

// Close does nothing.
func (s *Source) Close() error { return nil }

// Versions returns empty strings without cgo.
func (s *Source) Versions() (driver, nvml string) { return "", "" }
