package sampler

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootTime returns CLOCK_BOOTTIME (time since boot, including suspend).
func bootTime() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
