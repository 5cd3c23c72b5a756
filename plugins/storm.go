package plugins

import "time"

// crashWindow counts a plugin's restarts (crashes and wedges) within a
// sliding window: a plugin restarted Limit times within Window is failing,
// until the window holds fewer again. The delay between restarts stays
// capped at BackoffMax meanwhile: the supervisor keeps trying at that pace
// rather than waiting ever longer.
//
// A crashWindow is used under its Client's mutex.
type crashWindow struct {
	window time.Duration
	limit  int
	times  []time.Time // restarts within the window, oldest first
}

// add records a restart at now; it reports whether this restart made the
// plugin failing (it was not before).
func (w *crashWindow) add(now time.Time) bool {
	was := w.failing(now)
	w.times = append(w.times, now)
	return !was && w.failing(now)
}

// failing reports whether the window ending at now holds limit restarts.
func (w *crashWindow) failing(now time.Time) bool {
	i := 0
	for i < len(w.times) && now.Sub(w.times[i]) >= w.window {
		i++
	}
	w.times = w.times[i:]
	return w.limit > 0 && len(w.times) >= w.limit
}

// count returns the restarts within the window ending at now.
func (w *crashWindow) count(now time.Time) int {
	w.failing(now)
	return len(w.times)
}
