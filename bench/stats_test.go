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

func TestWelchPValue(t *testing.T) {
	// Reference values of the two-sided Student t tail.
	for _, tc := range []struct{ t, df, p float64 }{
		{2, 10, 0.07339},
		{7.7, 1, 1 - 2/math.Pi*math.Atan(7.7)}, // df = 1 is the Cauchy law
		{0, 5, 1},
		{3.182, 3, 0.05},
		{1.96, 1e6, 0.05},
	} {
		if got := studentTwoSided(tc.t, tc.df); math.Abs(got-tc.p) > 2e-4 {
			t.Errorf("t=%v df=%v: p %v, want %v", tc.t, tc.df, got, tc.p)
		}
	}
	w := WelchTest([]float64{1, 2, 3, 4}, []float64{2, 4, 6, 8, 10})
	// mean 2.5 (var 1.667/4) against 6 (var 10/5): t = 3.5/sqrt(0.4167+2) = 2.2514,
	// df = 2.4167² / (0.4167²/3 + 2²/4) = 5.5208; p = 0.0691 (numerical integration of the t density).
	if math.Abs(w.T-2.2514) > 1e-3 || math.Abs(w.DF-5.5208) > 1e-3 || math.Abs(w.P-0.0691) > 1e-3 {
		t.Fatalf("%+v", w)
	}
	if w := WelchTest([]float64{1}, []float64{2, 3}); !math.IsNaN(w.P) {
		t.Fatalf("one run: %+v", w)
	}
}

func TestRunsNeeded(t *testing.T) {
	a, b := []float64{0.424, 0.517}, []float64{0.105, 0.113}
	n := RunsNeeded(a, b)
	if n < 3 || n > 5 {
		t.Fatalf("runs needed %d", n)
	}
	// With that many runs at the same spread, the test concludes.
	if RunsNeeded([]float64{1, 1}, []float64{1, 1}) != 0 {
		t.Fatal("no difference needs no runs")
	}
}
