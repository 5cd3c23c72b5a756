//go:build cgo

// Package cgocall holds the baseline for benchmarks that compare a Go code
// path against the cost of one empty cgo call (the floor of any NVML call).
// It exists because _test.go files cannot import "C".
package cgocall

/*
static void gpusampler_empty(void) {}
*/
import "C"

// Available reports whether the cgo baseline is compiled in.
const Available = true

// Empty makes one empty C call.
func Empty() { C.gpusampler_empty() }
