//go:build cgo

package nvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/sampler"
)

// callError is an NVML return code with the operation that got it. It
// unwraps to the sampler sentinel for the code (errors.Is(err,
// sampler.ErrNotSupported)), so the mapping happens once, here.
type callError struct {
	op  string
	ret nvml.Return
	is  error // the sentinel; nil when none fits
}

func (e *callError) Error() string { return e.op + ": " + returnText(e.ret) }
func (e *callError) Unwrap() error { return e.is }

// newError returns the error for a failed call of op.
func newError(op string, ret nvml.Return) error {
	return &callError{op: op, ret: ret, is: sentinel(ret)}
}

// sentinel maps an NVML return code to the sampler's sentinel errors.
func sentinel(ret nvml.Return) error {
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return sampler.ErrNotSupported
	case nvml.ERROR_NOT_FOUND, nvml.ERROR_NO_DATA:
		return sampler.ErrNothingNew
	case nvml.ERROR_GPU_IS_LOST, nvml.ERROR_GPU_NOT_FOUND, nvml.ERROR_RESET_REQUIRED:
		return sampler.ErrGPULost
	case nvml.ERROR_NO_PERMISSION:
		return sampler.ErrNoPermission
	case nvml.ERROR_TIMEOUT:
		return sampler.ErrTimeout
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return sampler.ErrLibraryNotFound
	case nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_LIB_RM_VERSION_MISMATCH, nvml.ERROR_UNINITIALIZED:
		return sampler.ErrDriverNotLoaded
	}
	return nil
}

// returnText describes a return code without calling into the library
// (nvmlErrorString is one more symbol and one more C call).
func returnText(ret nvml.Return) string {
	switch ret {
	case nvml.SUCCESS:
		return "success"
	case nvml.ERROR_UNINITIALIZED:
		return "nvml not initialized"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "invalid argument"
	case nvml.ERROR_NOT_SUPPORTED:
		return "not supported"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission"
	case nvml.ERROR_NOT_FOUND:
		return "nothing new"
	case nvml.ERROR_INSUFFICIENT_SIZE:
		return "insufficient size"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "nvidia kernel driver not loaded"
	case nvml.ERROR_TIMEOUT:
		return "timeout"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "library not found"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "function not found in the driver library"
	case nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
		return "argument version mismatch"
	case nvml.ERROR_GPU_IS_LOST:
		return "gpu is lost"
	case nvml.ERROR_RESET_REQUIRED:
		return "gpu requires reset"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "driver library and kernel module versions differ (driver upgraded without reboot?)"
	case nvml.ERROR_NO_DATA:
		return "no data"
	case nvml.ERROR_GPU_NOT_FOUND:
		return "gpu not found"
	case nvml.ERROR_UNKNOWN:
		return "unknown driver error"
	}
	return fmt.Sprintf("nvml error %d", int32(ret))
}
