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

// Timebase converts raw driver timestamps (µs) to Unix ns for one device.
// Not safe for concurrent use; each device loop owns one.
type Timebase struct {
	Kind     ClockKind
	offsetNS int64
	checked  time.Time
	// clocks, replaceable in tests.
	realtime func() time.Time
	boottime func() (time.Duration, bool)
}

// NewTimebase returns an unclassified timebase on the system clocks.
func NewTimebase() *Timebase { return newTimebase(SystemClock()) }

// newTimebase returns an unclassified timebase that reads wall time from
// clk.
func newTimebase(clk Clock) *Timebase {
	return &Timebase{realtime: clk.Now, boottime: bootTime}
}

// Observe classifies (or re-checks) the clock from the newest raw timestamp
// of a drain. It returns true when the classification changed.
func (tb *Timebase) Observe(newestUS uint64) bool {
	now := tb.realtime()
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
		if bt, ok := tb.boottime(); ok && absDur(bt-raw) < clockTolerance {
			tb.Kind, tb.offsetNS = ClockBoottime, int64(nowRT-bt)
		} else {
			tb.Kind = ClockAnchored
			tb.offsetNS = int64(nowRT - raw)
		}
	}
	tb.checked = now
	return prev != tb.Kind
}

// ToNS converts a raw timestamp to Unix ns with the current offset.
func (tb *Timebase) ToNS(rawUS uint64) int64 {
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
