package plugins

import (
	"testing"
	"time"
)

// The crash window marks failing at the limit-th restart within the
// window and clears once the window holds fewer.
func TestCrashWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := crashWindow{window: time.Minute, limit: 3}
	steps := []struct {
		at             time.Duration
		entered, state bool
		count          int
	}{
		{0, false, false, 1},
		{10 * time.Second, false, false, 2},
		{20 * time.Second, true, true, 3},  // third within a minute: failing
		{30 * time.Second, false, true, 4}, // still failing: not entered again
	}
	for _, s := range steps {
		now := t0.Add(s.at)
		if got := w.add(now); got != s.entered {
			t.Errorf("add at %v: entered %v, want %v", s.at, got, s.entered)
		}
		if got := w.failing(now); got != s.state {
			t.Errorf("at %v: failing %v, want %v", s.at, got, s.state)
		}
		if got := w.count(now); got != s.count {
			t.Errorf("at %v: %d restarts in the window, want %d", s.at, got, s.count)
		}
	}
	// 70 s: the restarts at 0 and 10 s left the window; 20 and 30 s remain
	if now := t0.Add(70 * time.Second); w.failing(now) || w.count(now) != 2 {
		t.Errorf("at 70s: failing %v with %d restarts, want not failing with 2", w.failing(now), w.count(now))
	}
	if now := t0.Add(75 * time.Second); !w.add(now) {
		t.Error("a third restart within the window again: want entered")
	}
}
