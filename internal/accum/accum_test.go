package accum

import (
	"math"
	"testing"
)

type sample struct {
	t int64
	v float64
}

func addAll(xs []sample) Window {
	var w Window
	for _, x := range xs {
		w.Add(x.t, x.v)
	}
	return w
}

// same compares windows field by field, NaN equal to NaN and -0 distinct
// from +0 (the accumulator must keep both as its users did).
func same(a, b Window) bool {
	eq := func(x, y float64) bool {
		return math.Float64bits(x) == math.Float64bits(y) || (math.IsNaN(x) && math.IsNaN(y))
	}
	return a.Count == b.Count && a.LastT == b.LastT && eq(a.Sum, b.Sum) && eq(a.Min, b.Min) && eq(a.Max, b.Max) && eq(a.Last, b.Last)
}

func TestAdd(t *testing.T) {
	nan := math.NaN()
	negZero := math.Copysign(0, -1)
	for _, tc := range []struct {
		name string
		in   []sample
		want Window
	}{
		{"empty", nil, Window{}},
		{"one", []sample{{5, 2}}, Window{Stats: Stats{Count: 1, Sum: 2, Min: 2, Max: 2}, Last: 2, LastT: 5}},
		{"in order", []sample{{1, 3}, {2, 1}, {3, 2}}, Window{Stats: Stats{Count: 3, Sum: 6, Min: 1, Max: 3}, Last: 2, LastT: 3}},
		{"out of order: last is the newest", []sample{{3, 7}, {1, 9}, {2, -1}}, Window{Stats: Stats{Count: 3, Sum: 15, Min: -1, Max: 9}, Last: 7, LastT: 3}},
		{"equal times: the later added wins", []sample{{4, 1}, {4, 2}}, Window{Stats: Stats{Count: 2, Sum: 3, Min: 1, Max: 2}, Last: 2, LastT: 4}},
		{"negative times", []sample{{-10, 1}, {-20, 5}}, Window{Stats: Stats{Count: 2, Sum: 6, Min: 1, Max: 5}, Last: 1, LastT: -10}},
		{"NaN spreads to sum and extremes", []sample{{1, 1}, {2, nan}, {3, 3}}, Window{Stats: Stats{Count: 3, Sum: nan, Min: nan, Max: nan}, Last: 3, LastT: 3}},
		{"negative zero sums to +0, extremes keep it", []sample{{1, negZero}}, Window{Stats: Stats{Count: 1, Sum: 0, Min: negZero, Max: negZero}, Last: negZero, LastT: 1}},
		{"infinities", []sample{{1, math.Inf(1)}, {2, math.Inf(-1)}}, Window{Stats: Stats{Count: 2, Sum: nan, Min: math.Inf(-1), Max: math.Inf(1)}, Last: math.Inf(-1), LastT: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := addAll(tc.in); !same(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMean(t *testing.T) {
	w := addAll([]sample{{1, 1}, {2, 2}, {3, 4}})
	if got := w.Mean(); got != 7.0/3 {
		t.Errorf("Mean = %v, want %v", got, 7.0/3)
	}
	var empty Window
	if got := empty.Mean(); !math.IsNaN(got) {
		t.Errorf("empty Mean = %v, want NaN", got)
	}
}

// Merging the windows of any split of a series gives the window of the
// whole series, whatever the order of the parts.
func TestMergeEqualsAdd(t *testing.T) {
	series := []sample{{10, 4}, {11, -2}, {13, 8}, {12, 8}, {13, 1}, {20, 0.5}, {15, 3}}
	whole := addAll(series)
	for cut1 := 0; cut1 <= len(series); cut1++ {
		for cut2 := cut1; cut2 <= len(series); cut2++ {
			parts := []Window{addAll(series[:cut1]), addAll(series[cut1:cut2]), addAll(series[cut2:])}
			var got Window
			for _, p := range parts {
				got.Merge(p)
			}
			// Sums may round differently when regrouped; these values
			// are exact in binary.
			if !same(got, whole) {
				t.Errorf("cuts %d,%d: merged %+v, want %+v", cut1, cut2, got, whole)
			}
		}
	}
}

func TestMergeEmpty(t *testing.T) {
	w := addAll([]sample{{1, 2}})
	before := w
	w.Merge(Window{})
	if !same(w, before) {
		t.Errorf("merging an empty window changed %+v to %+v", before, w)
	}
	var empty Window
	empty.Merge(before)
	if !same(empty, before) {
		t.Errorf("merging into an empty window: got %+v, want %+v", empty, before)
	}
}

// Stats merges pre-aggregated parts (counts, sums, extremes) as Window
// merges windows: the Stats of a merged Window is the merge of the parts'
// Stats.
func TestStatsMerge(t *testing.T) {
	series := []sample{{10, 4}, {11, -2}, {13, 8}, {12, math.Inf(1)}, {20, 0.5}}
	whole := addAll(series)
	var st Stats
	for _, x := range series {
		st = st.Merge(addAll([]sample{x}).Stats)
	}
	st = st.Merge(Stats{})
	if !same(Window{Stats: st, Last: whole.Last, LastT: whole.LastT}, whole) {
		t.Errorf("merged stats %+v, want %+v", st, whole.Stats)
	}
	var added Stats
	for _, x := range series {
		added = added.Add(x.v)
	}
	if added != whole.Stats {
		t.Errorf("added stats %+v, want %+v", added, whole.Stats)
	}
	if m := st.Mean(); !math.IsInf(m, 1) {
		t.Errorf("mean %v, want +Inf", m)
	}
}

func TestReset(t *testing.T) {
	w := addAll([]sample{{1, 2}, {2, 3}})
	w.Reset()
	if !same(w, Window{}) {
		t.Errorf("after Reset: %+v", w)
	}
	w.Add(7, -1)
	if want := (Window{Stats: Stats{Count: 1, Sum: -1, Min: -1, Max: -1}, Last: -1, LastT: 7}); !same(w, want) {
		t.Errorf("after Reset and Add: got %+v, want %+v", w, want)
	}
}
