// Package accum is the one per-window accumulator of the program: the
// count, sum, minimum, maximum and newest value of a series' samples in a
// window. The aggregating wrapper, the execd gather, the Prometheus window
// gauges and the benchmark's per-run distributions all summarize with it,
// so that a window's mean, min, max and last mean the same everywhere.
//
// A Window is a plain value owned by its caller; it is not safe for
// concurrent use.
package accum

// Window accumulates the samples of one series in one window. The zero
// value is an empty window. Min, Max, Last and LastT are meaningful only
// when Count > 0.
type Window struct {
	// Count is the number of samples added (merged parts add their own).
	Count uint64
	// Sum is the sum of the values, in the order they were added.
	Sum float64
	// Min and Max are the extremes (the built-in min and max: a NaN
	// sample makes them NaN).
	Min, Max float64
	// Last is the value with the newest timestamp, LastT that timestamp;
	// of samples with equal timestamps the one added later wins.
	Last  float64
	LastT int64
}

// Add adds the value v sampled at t (any time unit, as long as the caller
// keeps to one).
func (w *Window) Add(t int64, v float64) {
	if w.Count == 0 {
		w.Min, w.Max, w.Last, w.LastT = v, v, v, t
	} else {
		w.Min, w.Max = min(w.Min, v), max(w.Max, v)
		if t >= w.LastT {
			w.Last, w.LastT = v, t
		}
	}
	w.Sum += v
	w.Count++
}

// Merge adds the samples o summarizes, as if each had been added: the
// counts and sums add up, the extremes combine, and o's last value wins
// when it is at least as new. An empty o changes nothing.
func (w *Window) Merge(o Window) {
	if o.Count == 0 {
		return
	}
	if w.Count == 0 {
		w.Min, w.Max, w.Last, w.LastT = o.Min, o.Max, o.Last, o.LastT
	} else {
		w.Min, w.Max = min(w.Min, o.Min), max(w.Max, o.Max)
		if o.LastT >= w.LastT {
			w.Last, w.LastT = o.Last, o.LastT
		}
	}
	w.Sum += o.Sum
	w.Count += o.Count
}

// Mean is Sum / Count: NaN for an empty window.
func (w *Window) Mean() float64 { return w.Sum / float64(w.Count) }

// Reset empties the window.
func (w *Window) Reset() { *w = Window{} }
