//go:build !cgo

package nvml

import (
	"errors"
	"testing"

	"github.com/gpusampler/gpusampler/sampler"
)

func TestOpenWithoutCgo(t *testing.T) {
	_, err := Open(Options{})
	if !errors.Is(err, ErrNoCgo) || !errors.Is(err, sampler.ErrLibraryNotFound) {
		t.Fatalf("err = %v, want ErrNoCgo wrapping ErrLibraryNotFound", err)
	}
}
