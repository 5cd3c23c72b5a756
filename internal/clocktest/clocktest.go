// Package clocktest provides a manual sampler.Clock for tests: time stands
// still until the test moves it, and a test can wait until the goroutines
// under test are parked on their timers before it does. Scheduling then
// follows the test's steps, not the machine's speed.
package clocktest

import (
	"slices"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/sampler"
)

// Clock is a manual clock. The zero value is not usable; call New. All
// methods are safe from any goroutine.
type Clock struct {
	mu     sync.Mutex
	cond   *sync.Cond
	now    time.Time
	timers []*timer // armed timers
	onMove []func(time.Time)
}

var _ sampler.Clock = (*Clock)(nil)

// New returns a manual clock that reads start until moved.
func New(start time.Time) *Clock {
	c := &Clock{now: start}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// OnMove registers f to be called with the new time each time the clock
// moves, before any timer fires (a fake driver that must agree with the
// clock follows it this way).
func (c *Clock) OnMove(f func(time.Time)) {
	c.mu.Lock()
	c.onMove = append(c.onMove, f)
	c.mu.Unlock()
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock reaches now+d (at once
// when d <= 0).
func (c *Clock) NewTimer(d time.Duration) sampler.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Armed returns how many timers are armed: goroutines waiting for the clock.
func (c *Clock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntil waits until at least n timers are armed.
func (c *Clock) BlockUntil(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers) < n {
		c.cond.Wait()
	}
}

// Next returns the earliest armed deadline, and false when none is armed.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].at, true
}

// Deadlines returns the deadlines of the armed timers, earliest first.
func (c *Clock) Deadlines() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, len(c.timers))
	for i, t := range c.timers {
		out[i] = t.at
	}
	return out
}

// Advance moves the clock forward by d, firing every timer due on the way.
func (c *Clock) Advance(d time.Duration) { c.AdvanceTo(c.Now().Add(d)) }

// AdvanceTo moves the clock to t (never backwards) and fires every timer
// whose deadline is at or before t.
func (c *Clock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	now := c.now
	hooks := slices.Clone(c.onMove)
	c.mu.Unlock()
	for _, f := range hooks {
		f(now)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(now) {
			keep = append(keep, tm)
			continue
		}
		tm.armed = false
		select {
		case tm.ch <- now:
		default:
		}
	}
	clear(c.timers[len(keep):])
	c.timers = keep
	c.cond.Broadcast()
}

// Step waits until at least n timers are armed, then moves the clock to the
// earliest deadline among them, firing it. It returns the new time.
func (c *Clock) Step(n int) time.Time {
	c.BlockUntil(n)
	next, _ := c.Next()
	c.AdvanceTo(next)
	return c.Now()
}

type timer struct {
	c     *Clock
	ch    chan time.Time
	at    time.Time
	armed bool // guarded by c.mu
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Reset(d time.Duration) {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(t)
	select { // a value not received yet is stale now
	case <-t.ch:
	default:
	}
	t.at = c.now.Add(d)
	if d <= 0 {
		t.ch <- c.now
		return
	}
	t.armed = true
	i, _ := slices.BinarySearchFunc(c.timers, t.at, func(x *timer, at time.Time) int { return x.at.Compare(at) })
	for i < len(c.timers) && c.timers[i].at.Equal(t.at) {
		i++ // equal deadlines fire in arming order
	}
	c.timers = slices.Insert(c.timers, i, t)
	c.cond.Broadcast()
}

func (t *timer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.armed
	c.remove(t)
	select {
	case <-t.ch:
	default:
	}
	return was
}

// remove disarms t; c.mu is held.
func (c *Clock) remove(t *timer) {
	if !t.armed {
		return
	}
	t.armed = false
	if i := slices.Index(c.timers, t); i >= 0 {
		c.timers = slices.Delete(c.timers, i, i+1)
	}
	c.cond.Broadcast()
}
