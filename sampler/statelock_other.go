//go:build !linux

package sampler

import "os"

// lockFile is a no-op off Linux: the state directory has no owner lock
// there, and two processes sharing one must not be run.
func lockFile(*os.File) error { return nil }
