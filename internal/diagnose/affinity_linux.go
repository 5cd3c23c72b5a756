//go:build linux

package diagnose

import "golang.org/x/sys/unix"

// ProcessCPUs returns the CPUs process pid may run on (sched_getaffinity),
// ascending.
func ProcessCPUs(pid int) ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &set); err != nil {
		return nil, err
	}
	var out []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out = append(out, c)
		}
	}
	return out, nil
}
