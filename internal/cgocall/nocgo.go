//go:build !cgo

package cgocall

// Available reports whether the cgo baseline is compiled in.
const Available = false

// Empty does nothing without cgo; benchmarks skip when !Available.
func Empty() {}
