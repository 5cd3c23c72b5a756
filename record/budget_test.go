package record

import (
	"testing"
	"time"
)

func TestHopMargin(t *testing.T) {
	for _, tc := range []struct{ d, margin, within time.Duration }{
		{10 * time.Second, time.Second, 9 * time.Second},
		{9 * time.Second, time.Second, 8 * time.Second},
		{2 * time.Second, 400 * time.Millisecond, 1600 * time.Millisecond},
		{0, 0, 0},
	} {
		if m, w := HopMargin(tc.d), WithinBudget(tc.d); m != tc.margin || w != tc.within {
			t.Errorf("HopMargin(%v) = %v, WithinBudget = %v; want %v, %v", tc.d, m, w, tc.margin, tc.within)
		}
	}
}
