//go:build cgo

package nvml

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

static const char *gs_try_load(const char *path) {
	void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
	if (h == NULL) {
		return dlerror();
	}
	dlclose(h);
	return NULL;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/gpusampler/gpusampler/sampler"
)

// loaderMessage returns the dynamic loader's own message for why path does
// not load ("cannot open shared object file: No such file or directory",
// "invalid ELF header", a missing dependency), or "" when it loads. go-nvml
// reports every one of those as ERROR_LIBRARY_NOT_FOUND, which tells a user
// who pointed at a corrupt file the wrong story.
func loaderMessage(path string) string {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if msg := C.gs_try_load(cpath); msg != nil {
		return C.GoString(msg)
	}
	return ""
}

// unloadableError is a library file that exists but does not load
// (corrupt, truncated, built for another architecture, a dependency
// missing). It wraps sampler.ErrLibraryNotFound, as every library that
// does not load does, but its text says what the loader said instead of
// "not found".
type unloadableError struct{ path, loader string }

func (e *unloadableError) Error() string {
	return fmt.Sprintf("nvml: cannot load %s: the file is there but does not load (loader: %s): "+
		"point at the driver's own libnvidia-ml.so.1", e.path, e.loader)
}

func (e *unloadableError) Unwrap() error { return sampler.ErrLibraryNotFound }
