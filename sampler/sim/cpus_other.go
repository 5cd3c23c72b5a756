//go:build !linux

package sim

import "runtime"

// allowedCPUs returns 0..NumCPU-1: without sched_getaffinity the CPUs a
// process may use are not known by number.
func allowedCPUs() []int { return firstCPUs(runtime.NumCPU()) }
