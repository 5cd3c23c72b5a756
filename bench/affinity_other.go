//go:build !linux

package bench

import "errors"

// processCPUs is Linux-only (sched_getaffinity).
func processCPUs(int) ([]int, error) {
	return nil, errors.New("bench: process CPU affinity: not supported on this system")
}
