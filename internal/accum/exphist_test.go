package accum

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The histogram of a set of values is the values binned directly at the
// final scale, the finest scale whose buckets fit MaxSize: downscaling
// while adding loses nothing and merges correctly.
func TestExpHistogram(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		vals func(i int) float64
		n    int
		size int
	}{
		{"utilization ratios", func(i int) float64 { return float64(rng.IntN(101)) / 100 }, 1000, 160},
		{"power watts", func(i int) float64 { return 100 + 600*rng.Float64() }, 5000, 160},
		{"one value", func(i int) float64 { return 250.5 }, 10, 160},
		{"wide range, few buckets", func(i int) float64 { return math.Pow(10, rng.Float64()*12-3) }, 2000, 8},
		{"both signs and zeros", func(i int) float64 { return float64(rng.IntN(7)-3) * 1.5 }, 500, 20},
		{"powers of two", func(i int) float64 { return math.Ldexp(1, i%16-4) }, 64, 160},
	} {
		h := ExpHistogram{MaxSize: tc.size}
		var vals []float64
		for i := range tc.n {
			v := tc.vals(i)
			vals = append(vals, v)
			if !h.Add(v) {
				t.Fatalf("%s: Add(%v) refused", tc.name, v)
			}
		}
		if h.Count() != uint64(tc.n) {
			t.Errorf("%s: count %d, want %d", tc.name, h.Count(), tc.n)
		}
		// Bin every value directly at the final scale.
		want := map[bool]map[int32]uint64{true: {}, false: {}}
		var zeros uint64
		for _, v := range vals {
			if v == 0 {
				zeros++
				continue
			}
			want[v > 0][ExpIndex(math.Abs(v), h.Scale)]++
		}
		if zeros != h.ZeroCount {
			t.Errorf("%s: zero count %d, want %d", tc.name, h.ZeroCount, zeros)
		}
		for pos, b := range map[bool]ExpBuckets{true: h.Positive, false: h.Negative} {
			got := map[int32]uint64{}
			for i, c := range b.Counts {
				if c > 0 {
					got[b.Offset+int32(i)] = c
				}
			}
			if len(got) != len(want[pos]) {
				t.Errorf("%s (positive %v): buckets %v, want %v", tc.name, pos, got, want[pos])
				continue
			}
			for k, c := range want[pos] {
				if got[k] != c {
					t.Errorf("%s (positive %v): bucket %d holds %d, want %d", tc.name, pos, k, got[k], c)
				}
			}
			if len(b.Counts) > tc.size {
				t.Errorf("%s: %d buckets, more than %d", tc.name, len(b.Counts), tc.size)
			}
		}
		// The finest that fits: one scale finer needs more than MaxSize.
		if h.Scale < MaxExpScale {
			fits := true
			for _, pos := range []bool{true, false} {
				lo, hi := int32(math.MaxInt32), int32(math.MinInt32)
				for _, v := range vals {
					if v != 0 && (v > 0) == pos {
						i := ExpIndex(math.Abs(v), h.Scale+1)
						lo, hi = min(lo, i), max(hi, i)
					}
				}
				if lo <= hi && int(hi-lo)+1 > tc.size {
					fits = false
				}
			}
			if fits {
				t.Errorf("%s: scale %d, but %d would fit in %d buckets", tc.name, h.Scale, h.Scale+1, tc.size)
			}
		}
	}
}

// ExpIndex puts a value in the bucket (base^i, base^(i+1)].
func TestExpIndex(t *testing.T) {
	for _, scale := range []int32{-3, -1, 0, 1, 3, 8, 20} {
		for _, v := range []float64{0.001, 0.5, 1, 1.5, 2, 3, 4, 100, 250.5, 1 << 20, 1e12} {
			i := ExpIndex(v, scale)
			base := math.Ldexp(1, -int(scale)) // log2(base)
			lo, hi := float64(i)*base, float64(i+1)*base
			l := math.Log2(v)
			if !(l > lo-1e-9 && l <= hi+1e-9) {
				t.Errorf("scale %d: %v in bucket %d = (2^%v, 2^%v]", scale, v, i, lo, hi)
			}
		}
	}
	if ExpIndex(1, 0) != -1 || ExpIndex(2, 0) != 0 || ExpIndex(3, 0) != 1 || ExpIndex(4, 1) != 3 {
		t.Errorf("powers of two: %d %d %d %d", ExpIndex(1, 0), ExpIndex(2, 0), ExpIndex(3, 0), ExpIndex(4, 1))
	}
}
