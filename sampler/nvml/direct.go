//go:build cgo

package nvml

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*gs_samples_fn)(void *dev, int type, unsigned long long last, int *valType, unsigned int *count, void *samples);
typedef int (*gs_handle_fn)(unsigned int index, void **dev);
typedef int (*gs_uuid_fn)(const char *uuid, void **dev);

static void *gs_open(const char *path) { return dlopen(path, RTLD_LAZY | RTLD_NOLOAD); }
static void *gs_sym(void *lib, const char *name) { return dlsym(lib, name); }
static void gs_close(void *lib) { dlclose(lib); }
static int gs_samples(void *fn, void *dev, int type, unsigned long long last, int *valType, unsigned int *count, void *samples) {
	return ((gs_samples_fn)fn)(dev, type, last, valType, count, samples);
}
static int gs_handle(void *fn, unsigned int index, void **dev) { return ((gs_handle_fn)fn)(index, dev); }
static int gs_by_uuid(void *fn, const char *uuid, void **dev) { return ((gs_uuid_fn)fn)(uuid, dev); }
*/
import "C"

import (
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// direct calls nvmlDeviceGetSamples itself, with a buffer the device keeps,
// in one C call per drain. go-nvml's Device.GetSamples makes two (a size
// query, then the fill) and allocates a slice per drain.
//
// It needs the raw nvmlDevice_t, which go-nvml keeps in an unexported type;
// rather than reading that through reflection (a layout we do not own),
// direct asks the library for its own handles with
// nvmlDeviceGetHandleByIndex_v2 / nvmlDeviceGetHandleByUUID, resolved from
// the library handle go-nvml already opened (dlopen RTLD_NOLOAD: the same
// library instance, already initialized). It depends only on NVML's C ABI,
// which has been stable for these functions since CUDA 10. Every symbol is
// looked up before use; when one is absent, or the library was not loaded
// from a path (go-nvml mocks), the backend falls back to go-nvml's two-call
// GetSamples.
//
// Concurrency: the function pointers are read-only after newDirect; device
// handles belong to their device.
type direct struct {
	lib     unsafe.Pointer
	samples unsafe.Pointer // nvmlDeviceGetSamples
	handle  unsafe.Pointer // nvmlDeviceGetHandleByIndex_v2
	byUUID  unsafe.Pointer // nvmlDeviceGetHandleByUUID (nil when absent)
}

// newDirect resolves the functions in the already loaded library at path;
// nil when that is not possible.
func newDirect(path string) *direct {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	lib := C.gs_open(cpath)
	if lib == nil {
		return nil
	}
	sym := func(name string) unsafe.Pointer {
		c := C.CString(name)
		defer C.free(unsafe.Pointer(c))
		return C.gs_sym(lib, c)
	}
	d := &direct{lib: lib, samples: sym("nvmlDeviceGetSamples"), handle: sym("nvmlDeviceGetHandleByIndex_v2"),
		byUUID: sym("nvmlDeviceGetHandleByUUID")}
	if d.samples == nil || d.handle == nil {
		C.gs_close(lib)
		return nil
	}
	return d
}

// close drops the reference newDirect took on the library.
func (d *direct) close() {
	if d != nil && d.lib != nil {
		C.gs_close(d.lib)
		d.lib = nil
	}
}

// deviceHandle returns the raw handle of device index.
func (d *direct) deviceHandle(index int) (unsafe.Pointer, nvml.Return) {
	var h unsafe.Pointer
	ret := nvml.Return(C.gs_handle(d.handle, C.uint(index), &h))
	return h, ret
}

// handleByUUID returns the raw handle of the device with uuid.
func (d *direct) handleByUUID(uuid string) (unsafe.Pointer, nvml.Return) {
	if d.byUUID == nil {
		return nil, nvml.ERROR_FUNCTION_NOT_FOUND
	}
	c := C.CString(uuid)
	defer C.free(unsafe.Pointer(c))
	var h unsafe.Pointer
	ret := nvml.Return(C.gs_by_uuid(d.byUUID, c, &h))
	return h, ret
}

// capacity is the size query: how many samples buffer type t can return.
func (d *direct) capacity(dev unsafe.Pointer, t int) (int, nvml.Return) {
	var vt C.int
	var n C.uint
	ret := nvml.Return(C.gs_samples(d.samples, dev, C.int(t), 0, &vt, &n, nil))
	return int(n), ret
}

// fill drains buffer type t newer than cursor into buf (one C call) and
// returns the value type and the filled prefix of buf. buf holds no Go
// pointers, so passing it to C is allowed.
func (d *direct) fill(dev unsafe.Pointer, t int, cursor uint64, buf []nvml.Sample) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	var vt C.int
	n := C.uint(len(buf))
	ret := nvml.Return(C.gs_samples(d.samples, dev, C.int(t), C.ulonglong(cursor), &vt, &n, unsafe.Pointer(&buf[0])))
	if ret != nvml.SUCCESS {
		return nvml.ValueType(vt), nil, ret
	}
	return nvml.ValueType(vt), buf[:min(int(n), len(buf))], ret
}
