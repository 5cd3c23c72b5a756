// Package accum is the one per-window accumulator of the program: the
// count, sum, minimum, maximum and newest value of a series' samples in a
// window. The aggregating wrapper, the execd gather, the Prometheus window
// gauges and the benchmark's per-run distributions all summarize with it,
// so that a window's mean, min, max and last mean the same everywhere.
//
// Stats holds the count, sum and extremes; Window adds the newest value.
// Stats is a value whose methods return the new value: with four fields
// and its address never taken, a loop merging thousands of parts (a
// Prometheus scrape) keeps it in registers. Window, kept per series, is
// changed in place.
//
// Both are plain values owned by their caller, not safe for concurrent
// use; the zero value is empty.
package accum

// Stats accumulates the count, sum and extremes of a series' values. Min
// and Max are meaningful only when Count > 0.
type Stats struct {
	// Count is the number of values added (merged parts add their own).
	Count uint64
	// Sum is the sum of the values, in the order they were added.
	Sum float64
	// Min and Max are the extremes (the built-in min and max: a NaN value
	// makes them NaN).
	Min, Max float64
}

// Add returns s with the value v added.
func (s Stats) Add(v float64) Stats {
	if s.Count == 0 {
		s.Min, s.Max = v, v
	} else {
		s.Min, s.Max = min(s.Min, v), max(s.Max, v)
	}
	s.Sum += v
	s.Count++
	return s
}

// Merge returns s with the values o summarizes added, as if each had been
// added: the counts and sums add up and the extremes combine. An empty o
// changes nothing.
func (s Stats) Merge(o Stats) Stats {
	if o.Count == 0 {
		return s
	}
	if s.Count == 0 {
		s.Min, s.Max = o.Min, o.Max
	} else {
		s.Min, s.Max = min(s.Min, o.Min), max(s.Max, o.Max)
	}
	s.Sum += o.Sum
	s.Count += o.Count
	return s
}

// Mean is Sum / Count: NaN when empty.
func (s Stats) Mean() float64 { return s.Sum / float64(s.Count) }

// Window accumulates the samples of one series in one window: its Stats
// and the value with the newest timestamp. Last and LastT are meaningful
// only when Count > 0.
type Window struct {
	Stats
	// Last is the value with the newest timestamp, LastT that timestamp;
	// of samples with equal timestamps the one added later wins.
	Last  float64
	LastT int64
}

// Add adds the value v sampled at t (any time unit, as long as the caller
// keeps to one).
func (w *Window) Add(t int64, v float64) {
	if w.Count == 0 || t >= w.LastT {
		w.Last, w.LastT = v, t
	}
	w.Stats = w.Stats.Add(v)
}

// Merge adds the samples o summarizes, as if each had been added: see
// Stats.Merge; o's last value wins when it is at least as new. An empty o
// changes nothing.
func (w *Window) Merge(o Window) {
	if o.Count == 0 {
		return
	}
	if w.Count == 0 || o.LastT >= w.LastT {
		w.Last, w.LastT = o.Last, o.LastT
	}
	w.Stats = w.Stats.Merge(o.Stats)
}

// Reset empties the window.
func (w *Window) Reset() { *w = Window{} }
