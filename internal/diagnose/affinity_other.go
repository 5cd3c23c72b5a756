//go:build !linux

package diagnose

import "errors"

// ProcessCPUs is Linux-only (sched_getaffinity): elsewhere it returns an
// error.
func ProcessCPUs(int) ([]int, error) {
	return nil, errors.New("diagnose: process CPU affinity: not supported on this system")
}
