package bench

import (
	"math"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) not NaN")
	}
}

func TestMeanCI(t *testing.T) {
	m, sd := MeanStd([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if m != 5 || math.Abs(sd-2.138) > 0.001 {
		t.Fatalf("mean %v sd %v", m, sd)
	}
	_, half := MeanCI95([]float64{2, 4, 4, 4, 5, 5, 7, 9})
	if math.Abs(half-2.365*2.138/math.Sqrt(8)) > 0.01 {
		t.Fatalf("half-width %v", half)
	}
}

func TestRatioCI(t *testing.T) {
	a := []float64{1.0, 1.01, 0.99, 1.0, 1.02, 0.98}
	b := []float64{2.0, 2.02, 1.98, 2.0, 2.04, 1.96}
	r, half := RatioCI95(a, b)
	if math.Abs(r-2) > 1e-9 || half <= 0 || half > 0.05 {
		t.Fatalf("ratio %v ± %v", r, half)
	}
}
