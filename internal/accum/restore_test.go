package accum

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// A histogram restored from another's state and given more values equals
// the one that took every value (a window taken up from a journal).
func TestExpHistogramRestore(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var all, first ExpHistogram
	for i := range 500 {
		v := rng.Float64() * 700
		if i%11 == 0 {
			v = -v
		}
		if i%50 == 3 {
			v *= 1e7 // forces downscales after the restore too
		}
		all.Add(v)
		first.Add(v)
		if i == 199 {
			var r ExpHistogram
			r.Restore(first.Scale, first.ZeroCount, first.Positive, first.Negative)
			first = r
		}
	}
	if !reflect.DeepEqual(all, first) {
		t.Fatalf("restored and continued:\n%+v\nwant\n%+v", first, all)
	}
	var empty ExpHistogram
	empty.Restore(0, 0, ExpBuckets{}, ExpBuckets{})
	empty.Add(1)
	var direct ExpHistogram
	direct.Add(1)
	if !reflect.DeepEqual(empty, direct) {
		t.Fatalf("restored empty then 1: %+v, want %+v", empty, direct)
	}
}
