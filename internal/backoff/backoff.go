// Package backoff is the program's one retry delay: a wait that doubles
// with every attempt from an initial one and never exceeds a cap, spread by
// equal jitter where many clients may retry together. The disk and memory
// buffers, the InfluxDB writer, the plugin supervisor, the engine's event
// watchers and the NVML open retry all wait with it.
package backoff

import (
	"context"
	"time"
)

// maxShift bounds the doubling: past it any positive initial delay has
// reached the cap (or overflowed).
const maxShift = 62

// Delay returns the wait before retry attempt (counted from 0): initial
// doubled attempt times, and maxDelay whenever that is more than maxDelay
// or overflows. A non-positive initial delay yields maxDelay.
func Delay(initial, maxDelay time.Duration, attempt int) time.Duration {
	d := maxDelay
	if attempt < maxShift {
		if x := initial << max(attempt, 0); x > 0 && x < maxDelay {
			d = x
		}
	}
	return d
}

// Jitter spreads d by "equal jitter": d/2 plus r times the other half, r
// uniform in [0, 1), so that waits fall in [d/2, d) and clients that failed
// together do not retry together.
func Jitter(d time.Duration, r float64) time.Duration {
	return d/2 + time.Duration(r*float64(d-d/2))
}

// Backoff is the state of one run of retries: Delay is the wait before the
// next retry, Next moves on to the one after, Reset starts over (after a
// success that lasted). The zero value of the state with Initial and Max
// set is a fresh run. It is not safe for concurrent use.
type Backoff struct {
	// Initial is the first wait; Max caps every wait.
	Initial, Max time.Duration
	attempt      int
}

// Delay returns the wait before the next retry.
func (b *Backoff) Delay() time.Duration { return Delay(b.Initial, b.Max, b.attempt) }

// Next doubles the wait (up to Max) for the retry after.
func (b *Backoff) Next() {
	if b.attempt < maxShift {
		b.attempt++
	}
}

// Reset returns the wait to Initial.
func (b *Backoff) Reset() { b.attempt = 0 }

// Sleep waits d, or until ctx ends: then it returns ctx's error. It is the
// default wait between retries of the buffer, the InfluxDB writer and the
// NVML open retry (their tests inject their own).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
