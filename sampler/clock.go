package sampler

import "time"

// Clock is the engine's source of time: when samples are due, when a driver
// call is overdue, when a lost device is probed again, and the wall time
// that driver timestamps are classified against. The zero Config uses the
// system clock; tests inject a manual one (internal/clocktest) so that
// scheduling is driven step by step instead of by the machine's speed.
//
// A Clock is used from many goroutines at once (one per device loop, the
// watchdog, the event watchers).
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d
	// has passed (at once when d <= 0).
	NewTimer(d time.Duration) Timer
}

// Timer is a Clock's one-shot timer, like time.Timer. It is owned by the
// goroutine that created it.
type Timer interface {
	// C is the channel the timer fires on.
	C() <-chan time.Time
	// Reset rearms the timer to fire once d has passed; a value not yet
	// received from C is discarded.
	Reset(d time.Duration)
	// Stop disarms the timer; it reports whether the timer was armed.
	Stop() bool
}

// SystemClock returns the clock of the operating system (time.Now and
// time.Timer).
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time   { return t.t.C }
func (t systemTimer) Reset(d time.Duration) { t.t.Reset(d) } // Go ≥ 1.23: no stale value survives Reset
func (t systemTimer) Stop() bool            { return t.t.Stop() }

// sleep waits d on clk, or until done is closed; it reports whether the
// whole wait passed.
func sleep(clk Clock, d time.Duration, done <-chan struct{}) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C():
		return true
	}
}
