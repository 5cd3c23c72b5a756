//go:build linux

package sim

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// allowedCPUs returns the CPUs this process may run on
// (sched_getaffinity), ascending; 0..NumCPU-1 when unreadable.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return firstCPUs(runtime.NumCPU())
	}
	var out []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return firstCPUs(runtime.NumCPU())
	}
	return out
}
