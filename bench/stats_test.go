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

// The statistics against values computed independently (python3 with math
// only: sample mean and sd; the ratio's 95% half-width t·r·√(sA²/nA/mA² +
// sB²/nB/mB²) at Welch's degrees of freedom, with the t quantile found by
// bisection on Simpson's integral of the t density; Welch's p-value by the
// same integral; runs needed as the smallest n with |mB−mA|/√((sA²+sB²)/n) ≥
// t(df_n) + 0.8416).
func TestStatisticsAgainstReference(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		a, b                    []float64
		meanA, sdA, meanB, sdB  float64
		speedup, speedupHalf    float64 // mean(A)/mean(B)
		tStat, df, p            float64
		runsNeeded              int
		minA, maxA, minB, maxB  float64
		excludesOne, wantSignif bool
	}{
		// The case: A 0.424–0.517 s against B 0.105–0.113 s.
		{"two runs, disjoint", []float64{0.424, 0.517}, []float64{0.105, 0.113},
			0.4705, 0.06576, 0.1090, 0.005657, 4.3165, 5.7821, -7.7456, 1.0148, 0.07952, 3,
			0.424, 0.517, 0.105, 0.113, false, false},
		{"ten noisy runs", []float64{0.103, 0.131, 0.108, 0.187, 0.112, 0.104, 0.151, 0.109, 0.122, 0.106},
			[]float64{0.405, 0.433, 0.412, 0.498, 0.407, 0.451, 0.409, 0.404, 0.428, 0.415},
			0.1233, 0.02690, 0.4262, 0.02940, 0.28934, 0.04418, 24.0386, 17.8703, 0, 0,
			0.103, 0.187, 0.404, 0.498, true, true},
		{"wide, overlapping", []float64{1, 3, 2}, []float64{1.5, 2.5, 4},
			2, 1, 2.6667, 1.2583, 0.75, 0.9474, 0.7184, 3.8059, 0.51412, 47,
			1, 3, 1.5, 4, false, false},
	} {
		near := func(what string, got, want, tol float64) {
			if math.Abs(got-want) > tol {
				t.Errorf("%s: %s %.6g, reference %.6g", tc.name, what, got, want)
			}
		}
		sa, sb := stat(tc.a), stat(tc.b)
		near("mean A", float64(sa.Mean), tc.meanA, 1e-4)
		near("sd A", float64(sa.SD), tc.sdA, 1e-4)
		near("mean B", float64(sb.Mean), tc.meanB, 1e-4)
		near("sd B", float64(sb.SD), tc.sdB, 1e-4)
		near("min A", float64(sa.Min), tc.minA, 0)
		near("max A", float64(sa.Max), tc.maxA, 0)
		near("min B", float64(sb.Min), tc.minB, 0)
		near("max B", float64(sb.Max), tc.maxB, 0)
		sp, half := RatioCI95(tc.b, tc.a)
		near("speedup", sp, tc.speedup, 1e-4)
		// the t table has three decimals: 3.182 for df 3 (exact 3.1824)
		near("speedup half-width", half, tc.speedupHalf, 2e-4*tc.speedup)
		w := WelchTest(tc.a, tc.b)
		near("t", w.T, tc.tStat, 1e-3)
		near("df", w.DF, tc.df, 1e-3)
		near("p", w.P, tc.p, 1e-4)
		a, b := runs(tc.a...), runs(tc.b...)
		c := Compare(a, b)
		if c.RunsNeeded != tc.runsNeeded || c.Significant != tc.wantSignif || (sp-half > 1 || sp+half < 1) != tc.excludesOne {
			t.Errorf("%s: runs needed %d (reference %d), significant %v, interval %.4f ± %.4f excludes 1: %v",
				tc.name, c.RunsNeeded, tc.runsNeeded, c.Significant, sp, half, tc.excludesOne)
		}
	}
}
