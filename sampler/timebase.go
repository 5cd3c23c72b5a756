package sampler

import (
	"time"
)

// ClockKind says which clock a device's buffer timestamps run on.
type ClockKind uint8

const (
	// ClockUnknown: not classified yet.
	ClockUnknown ClockKind = iota
	// ClockRealtime: timestamps are Unix time (offset 0).
	ClockRealtime
	// ClockBoottime: timestamps count from boot; one offset (realtime −
	// boottime) converts them.
	ClockBoottime
	// ClockAnchored: neither matched; each batch is anchored to the read
	// time (its newest sample = now). A fallback: batches may shift.
	ClockAnchored
)

func (k ClockKind) String() string {
	switch k {
	case ClockRealtime:
		return "realtime"
	case ClockBoottime:
		return "boottime"
	case ClockAnchored:
		return "anchored"
	}
	return "unknown"
}

// clockTolerance is how far the newest buffered sample may lie from a clock
// and still be on it. Buffers hold up to tens of seconds of history, so the
// newest sample is close to now on the right clock; the wrong clock is off by
// the machine's uptime or by decades.
const clockTolerance = 120 * time.Second

// recheckEvery is how often the classification and the boot offset are
// re-checked (the realtime clock can be stepped by NTP).
const recheckEvery = time.Minute

// timebase converts raw driver timestamps (µs) to Unix ns for one device.
// Not safe for concurrent use; each device loop owns one. Boot-time
// timestamps are converted with the host's one realtime − boottime offset,
// which the engine's timebases share (and processes on the same boot,
// through an anchor file): a boot-time timestamp maps to the same
// nanosecond on every device and in every process. That offset changes
// only when the realtime clock is stepped by more than ClockStepThreshold.
type timebase struct {
	Kind ClockKind
	// Stepped is the clock step (ns) that this timebase's last Observe
	// re-anchored the host offset for, 0 when none: the caller reports it
	// (record.EventClockStep), once per host.
	Stepped  int64
	offsetNS int64
	checked  time.Time
	// clocks, replaceable in tests.
	realtime func() time.Time
	host     *hostOffset
}

// newTimebase returns an unclassified timebase that reads wall time from
// clk and converts boot-time timestamps with host.
func newTimebase(clk Clock, host *hostOffset) *timebase {
	return &timebase{realtime: clk.Now, host: host}
}

// Observe classifies (or re-checks) the clock from the newest raw timestamp
// of a drain, and takes up the host's boot offset as it is now. It returns
// true when the classification changed.
func (tb *timebase) Observe(newestUS uint64) bool {
	now := tb.realtime()
	tb.Stepped = 0
	if tb.Kind == ClockBoottime {
		if off, ok, step := tb.host.offset(now); ok {
			tb.offsetNS, tb.Stepped = off, step
		}
	}
	if tb.Kind != ClockUnknown && tb.Kind != ClockAnchored && now.Sub(tb.checked) < recheckEvery {
		return false
	}
	prev := tb.Kind
	raw := time.Duration(newestUS) * time.Microsecond
	nowRT := time.Duration(now.UnixNano())
	switch {
	case absDur(nowRT-raw) < clockTolerance:
		tb.Kind, tb.offsetNS = ClockRealtime, 0
	default:
		if off, ok, step := tb.host.offset(now); ok && absDur(nowRT-raw-time.Duration(off)) < clockTolerance {
			tb.Kind, tb.offsetNS = ClockBoottime, off
			tb.Stepped += step
		} else {
			tb.Kind = ClockAnchored
			tb.offsetNS = int64(nowRT - raw)
		}
	}
	tb.checked = now
	return prev != tb.Kind
}

// ToNS converts a raw timestamp to Unix ns with the current offset.
func (tb *timebase) ToNS(rawUS uint64) int64 {
	return int64(rawUS)*1000 + tb.offsetNS
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// BootTime returns the time since boot (CLOCK_BOOTTIME on Linux), and false
// where the platform has no such clock. Doctor uses it to name the clock
// of the driver's sample timestamps.
func BootTime() (time.Duration, bool) { return bootTime() }
