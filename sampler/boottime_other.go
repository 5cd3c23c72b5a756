//go:build !linux

package sampler

import "time"

// bootTime is unavailable off Linux; buffers on a boot-time clock are then
// anchored per batch.
func bootTime() (time.Duration, bool) { return 0, false }
