package sampler

import "time"

// BootTime exposes the boot clock to the external tests.
func BootTime() (time.Duration, bool) { return bootTime() }
