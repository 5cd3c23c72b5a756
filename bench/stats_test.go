package bench

import (
	"math"
	"math/rand/v2"
	"strings"
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

func TestTQuantile(t *testing.T) {
	// Student t quantiles (two-sided 5% and one-sided 20% tails), as printed
	// in statistical tables; df = 1 is the Cauchy law, tan(π(p − ½)).
	for _, tc := range []struct{ p, df, want float64 }{
		{0.975, 1, 12.7062}, {0.975, 2, 4.3027}, {0.975, 9, 2.2622}, {0.975, 30, 2.0423}, {0.975, 1e7, 1.9600},
		{0.80, 9, 0.8834}, {0.80, 1, math.Tan(math.Pi * 0.3)}, {0.5, 4, 0},
	} {
		if got := TQuantile(tc.p, tc.df); math.Abs(got-tc.want) > 1e-4 {
			t.Errorf("TQuantile(%v, %v) = %.6f, want %.4f", tc.p, tc.df, got, tc.want)
		}
	}
	// the quantile and the p-value are one statement: t beyond the 97.5%
	// quantile has p below 0.05, fractional df included
	for _, df := range []float64{1, 2.5, 5.5208, 17.98, 100} {
		q := TQuantile(0.975, df)
		if p := studentTwoSided(q, df); math.Abs(p-0.05) > 1e-9 {
			t.Errorf("df %v: p at the 97.5%% quantile %v", df, p)
		}
	}
	if !math.IsNaN(TQuantile(0.975, 0)) || !math.IsNaN(TQuantile(1, 3)) {
		t.Error("TQuantile outside its domain is not NaN")
	}
}

// refT is a second implementation of Student's t, independent of
// studentTwoSided and TQuantile (which go through the incomplete beta
// function): the density integrated by Simpson's rule, the quantile by
// bisection on that integral.
type refT struct{ df float64 }

func (r refT) pdf(x float64) float64 {
	v := r.df
	lg1, _ := math.Lgamma((v + 1) / 2)
	lg2, _ := math.Lgamma(v / 2)
	return math.Exp(lg1-lg2) / math.Sqrt(v*math.Pi) * math.Pow(1+x*x/v, -(v+1)/2)
}

// central is P(0 < T < x).
func (r refT) central(x float64) float64 {
	const n = 4000
	h := x / n
	s := r.pdf(0) + r.pdf(x)
	for i := 1; i < n; i++ {
		w := 2.0
		if i%2 == 1 {
			w = 4
		}
		s += w * r.pdf(float64(i)*h)
	}
	return s * h / 3
}

func (r refT) twoSided(t float64) float64 { return math.Max(0, 1-2*r.central(math.Abs(t))) }

func (r refT) quantile(p float64) float64 {
	lo, hi := 0.0, 50.0
	for range 50 {
		m := (lo + hi) / 2
		if 0.5+r.central(m) < p {
			lo = m
		} else {
			hi = m
		}
	}
	return (lo + hi) / 2
}

// refRatio is the second implementation of the comparison: the mean of
// the per-pair log ratios (paired) or the difference of the mean logs
// (Welch), its standard error from the sums of squares, and the ratio with
// its 95% interval, p-value and resolution from refT.
func refRatio(a, b []float64, paired bool) (ratio, lo, hi, p, resolution float64) {
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	variance := func(xs []float64) float64 {
		m, s := mean(xs), 0.0
		for _, x := range xs {
			s += (x - m) * (x - m)
		}
		return s / float64(len(xs)-1)
	}
	var m, se, df float64
	if paired {
		d := make([]float64, len(a))
		for i := range a {
			d[i] = math.Log(b[i] / a[i])
		}
		m, se, df = mean(d), math.Sqrt(variance(d)/float64(len(d))), float64(len(d)-1)
	} else {
		la, lb := make([]float64, len(a)), make([]float64, len(b))
		for i := range a {
			la[i] = math.Log(a[i])
		}
		for i := range b {
			lb[i] = math.Log(b[i])
		}
		va, vb := variance(la)/float64(len(la)), variance(lb)/float64(len(lb))
		m, se = mean(lb)-mean(la), math.Sqrt(va+vb)
		df = (va + vb) * (va + vb) / (va*va/float64(len(la)-1) + vb*vb/float64(len(lb)-1))
	}
	r := refT{df}
	q := r.quantile(0.975)
	p = 0
	if se > 1e-12 {
		p = r.twoSided(m / se)
	}
	return math.Exp(m), math.Exp(m - q*se), math.Exp(m + q*se), p, math.Exp((q+r.quantile(0.80))*se) - 1
}

// The fixtures of the reference checks. A is ten wall times spread 0.85–
// 1.15 s (mean 1.000 s); e is a fixed pair noise of sd 0.51 % and mean 0.
var (
	fixtureA = []float64{1.017, 0.883, 1.117, 0.95, 1.15, 0.85, 1.05, 0.917, 0.983, 1.083}
	fixtureE = []float64{0.005, -0.004, 0.006, -0.007, 0.002, -0.003, 0.008, -0.005, 0.001, -0.003}
)

// scaled is A's runs × f × (1 + noise[i]) (noise nil: none).
func scaled(f float64, noise []float64) []float64 {
	out := make([]float64, len(fixtureA))
	for i, a := range fixtureA {
		out[i] = a * f
		if noise != nil {
			out[i] *= 1 + noise[i]
		}
	}
	return out
}

// referenceCases are the fixtures with their expected verdicts and the
// values computed independently: python3 with the math module only
// (Simpson's rule on the t density, bisection for quantiles; the script's
// output is pinned here), and refRatio above in Go.
var referenceCases = []struct {
	name          string
	a, b          []float64
	paired        bool
	sameWithin    float64 // percent; 0: the default
	ratio, lo, hi float64 // B/A and its 95% interval
	p             float64
	resolutionPct float64
	verdict       string
}{
	// The 8 % case: B = each A run × 1.08, the noise shared by
	// each pair. Every pair's log ratio is ln 1.08: no spread, so the
	// interval is the point 1.08 and p is 0. Welch on the same numbers
	// (as before): t = 0.0770/0.0454 = 1.694 at df 18.0, p = 0.1076,
	// interval 0.982–1.188: no difference detected, never "the same".
	{name: "8% slower, noise shared by each pair (paired)", a: fixtureA, b: scaled(1.08, nil), paired: true,
		ratio: 1.08, lo: 1.08, hi: 1.08, p: 0, resolutionPct: 0, verdict: VerdictSlower},
	{name: "8% slower, the same runs unpaired (Welch)", a: fixtureA, b: scaled(1.08, nil),
		ratio: 1.08, lo: 0.981667, hi: 1.188183, p: 0.107553, resolutionPct: 14.4119, verdict: VerdictNoDifference},
	// 2 % at n = 10 with 0.5 % pair noise: d̄ = 0.019790, sd(d) =
	// 0.005139, SE = 0.001625, t = 12.18 at df 9 (p ≈ 1e-6); interval
	// exp(0.019790 ± 2.2622 × 0.001625) = 1.0162–1.0237.
	{name: "2% slower, 0.5% pair noise (paired)", a: fixtureA, b: scaled(1.02, fixtureE), paired: true,
		ratio: 1.019988, lo: 1.016245, hi: 1.023745, p: 1e-6, resolutionPct: 0.5125, verdict: VerdictSlower},
	{name: "2% slower, 0.5% pair noise, unpaired (Welch)", a: fixtureA, b: scaled(1.02, fixtureE),
		ratio: 1.019988, lo: 0.925669, hi: 1.123917, p: 0.673341, resolutionPct: 14.6645, verdict: VerdictNoDifference},
	// A true null: B = A × (1 + e). d̄ = −0.0000119, SE = 0.001625:
	// interval 0.9963–1.0037, within the default margin, which is the
	// resolution (2.2622 + 0.8834) × 0.001625 → 0.51 %, under its 1 % cap.
	{name: "true null, 0.5% pair noise (paired)", a: fixtureA, b: scaled(1, fixtureE), paired: true,
		ratio: 0.999988, lo: 0.996318, hi: 1.003671, p: 0.994322, resolutionPct: 0.5125, verdict: VerdictSame},
	// The same null against a stated margin narrower than the interval:
	// not "the same" — the interval cannot rule out ±0.37 %.
	{name: "true null, --same-within 0.2", a: fixtureA, b: scaled(1, fixtureE), paired: true, sameWithin: 0.2,
		ratio: 0.999988, lo: 0.996318, hi: 1.003671, p: 0.994322, resolutionPct: 0.5125, verdict: VerdictNoDifference},
	{name: "true null, unpaired (Welch)", a: fixtureA, b: scaled(1, fixtureE),
		ratio: 0.999988, lo: 0.907519, hi: 1.101879, p: 0.999797, resolutionPct: 14.6645, verdict: VerdictNoDifference},
}

func TestStatisticsAgainstReference(t *testing.T) {
	for _, tc := range referenceCases {
		t.Run(tc.name, func(t *testing.T) {
			near := func(what string, got, want, tol float64) {
				t.Helper()
				if math.Abs(got-want) > tol {
					t.Errorf("%s %.7g, reference %.7g", what, got, want)
				}
			}
			// the second implementation agrees with the pinned values
			rr, rlo, rhi, rp, rres := refRatio(tc.a, tc.b, tc.paired)
			near("reference ratio", rr, tc.ratio, 1e-6)
			near("reference low", rlo, tc.lo, 1e-6)
			near("reference high", rhi, tc.hi, 1e-6)
			near("reference p", rp, tc.p, 1e-6)
			near("reference resolution", 100*rres, tc.resolutionPct, 1e-3)
			// and the production statistics agree with both
			l := WelchLogRatio(tc.a, tc.b)
			if tc.paired {
				l = PairedLogRatio(tc.a, tc.b)
			}
			lo, hi := l.Interval()
			near("ratio", l.Ratio(), rr, 1e-9)
			near("low", lo, rlo, 1e-7)
			near("high", hi, rhi, 1e-7)
			near("p", l.P, rp, 1e-6)
			near("resolution %", 100*l.Resolution(), 100*rres, 1e-5)
			c := Compare(runs(tc.a...), runs(tc.b...), CompareOptions{Paired: tc.paired, SameWithinPct: tc.sameWithin})
			if c.Verdict != tc.verdict {
				t.Errorf("verdict %q, want %q: %s", c.Verdict, tc.verdict, c.Summary)
			}
			t.Logf("| %s | %s | p %s, B/A %.4f (95%% interval %.4f–%.4f), margin ±%.2g %% | %s |", tc.name, tc.verdict,
				pText(float64(c.P))[2:], float64(c.TimeRatio), float64(c.TimeRatioLow), float64(c.TimeRatioHigh),
				float64(c.SameWithinPct), c.Verdict)
		})
	}
}

// The runs needed to settle "no difference detected", by its definition:
// the smallest n at which the observed difference would be shown (|d̄| ≥
// (t₀.₉₇₅ + t₀.₈₀)·s/√n) or the interval would fit in the margin (|d̄| +
// t₀.₉₇₅·s/√n ≤ ln(1 + m)), by a linear search with t at n − 1 degrees of
// freedom (TQuantile, itself checked against refT above).
func TestRunsNeeded(t *testing.T) {
	for _, tc := range []struct {
		d, sd, margin float64
	}{{0.02, 0.05, 0.01}, {0.001, 0.01, 0.01}, {0.005, 0.03, 0.01}, {0.0, 0.02, 0.01}} {
		want := 0
		for n := 2; n <= 10000 && want == 0; n++ {
			df := float64(n - 1)
			se := tc.sd / math.Sqrt(float64(n))
			if (tc.d > 0 && tc.d >= (TQuantile(0.975, df)+TQuantile(0.80, df))*se) || tc.d+TQuantile(0.975, df)*se <= math.Log1p(tc.margin) {
				want = n
			}
		}
		l := LogRatio{Paired: true, Mean: tc.d, sd: tc.sd}
		if got := l.RunsNeeded(tc.margin); got != want {
			t.Errorf("d %v sd %v margin %v: %d runs, reference %d", tc.d, tc.sd, tc.margin, got, want)
		}
	}
	if (LogRatio{Paired: true, Mean: 0.1}).RunsNeeded(0.01) != 0 {
		t.Error("no spread: runs needed not 0")
	}
}

// The verdict and --fail-if-slower never disagree, on the same data: a
// failure is always a comparison the summary calls slower by more than the
// limit, "the same" never fails (its margin is at most the limit) and
// "faster" never fails. Checked over a grid of synthetic comparisons (a
// fixed seed: true effects −10 … +10 %, pair noise 0 … 8 %, 2 … 15 runs,
// paired and not, margins default/1/5 %, limits 0 … 10 %) and on the
// issue's 8 % case.
func TestVerdictAndFailIfSlowerAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 8))
	checked := map[string]int{}
	for range 100 {
		n := 2 + rng.IntN(14)
		effect := 1 + (rng.Float64()*20-10)/100
		noise := rng.Float64() * 0.08
		a, b := make([]float64, n), make([]float64, n)
		for i := range n {
			base := 0.85 + 0.3*rng.Float64() // drift shared by the pair
			a[i] = base * (1 + noise*rng.NormFloat64()/2)
			b[i] = base * effect * (1 + noise*rng.NormFloat64()/2)
		}
		for _, paired := range []bool{true, false} {
			for _, same := range []float64{0, 1, 5} {
				for _, pct := range []float64{0, 1, 2, 3, 5, 8, 10} {
					ra, rb := runs(a...), runs(b...)
					ra.Name, rb.Name = "A", "B"
					c := Compare(ra, rb, CompareOptions{Paired: paired, SameWithinPct: same, FailIfSlower: true, FailIfSlowerPct: pct})
					failed, msg := c.Regression(pct)
					checked[c.Verdict]++
					switch {
					case failed != (c.Verdict == VerdictSlower && c.SlowerBy() > pct):
						t.Fatalf("limit %g%%: failed %v (%s) with verdict %q, B %.2f%% slower: %s", pct, failed, msg, c.Verdict, c.SlowerBy(), c.Summary)
					case failed && !strings.Contains(c.Summary, " slower than "):
						t.Fatalf("limit %g%%: failed, but the summary does not say slower: %s", pct, c.Summary)
					case c.Verdict == VerdictSame && float64(c.SameWithinPct) > pct:
						t.Fatalf("limit %g%%: the same within a wider margin ±%v: %s", pct, c.SameWithinPct, c.Summary)
					case c.Verdict == VerdictSame && float64(c.TimeRatioHigh) > 1+pct/100+1e-9:
						t.Fatalf("limit %g%%: the same, but the interval reaches %v: %s", pct, c.TimeRatioHigh, c.Summary)
					}
				}
			}
		}
	}
	for _, v := range []string{VerdictSlower, VerdictFaster, VerdictSame, VerdictNoDifference} {
		if checked[v] == 0 {
			t.Errorf("the grid never produced the verdict %q: %v", v, checked)
		}
	}
	// The case: interleaved, B = A × 1.08. Slower, and the limit
	// of 3 % fails; the same runs unpaired are no difference detected and
	// do not fail, but say the interval reaches beyond the limit.
	a, b8 := runs(fixtureA...), runs(scaled(1.08, nil)...)
	a.Name, b8.Name = "A", "B"
	c := Compare(a, b8, CompareOptions{Paired: true, FailIfSlower: true, FailIfSlowerPct: 3})
	if failed, msg := c.Regression(3); c.Verdict != VerdictSlower || !failed ||
		msg != "regression: B is 8.0 % slower than A (limit 3 %; 95% interval +8.0 % to +8.0 %, p < 0.001)" {
		t.Errorf("paired 8%%: verdict %q, failed %v: %q", c.Verdict, failed, msg)
	}
	c = Compare(a, b8, CompareOptions{FailIfSlower: true, FailIfSlowerPct: 3})
	if failed, msg := c.Regression(3); c.Verdict != VerdictNoDifference || failed ||
		msg != "not failed: no difference detected, but the interval allows B up to +19 %, beyond the 3 % limit; about 29 runs each would settle it" {
		t.Errorf("unpaired 8%%: verdict %q, failed %v: %q", c.Verdict, failed, msg)
	}
	// A margin wider than the limit is narrowed to it, and says so.
	c = Compare(a, runs(scaled(1, fixtureE)...), CompareOptions{Paired: true, SameWithinPct: 5, FailIfSlower: true, FailIfSlowerPct: 0.3})
	if c.SameWithinFrom != "--fail-if-slower" || float64(c.SameWithinPct) != 0.3 || c.Verdict != VerdictNoDifference {
		t.Errorf("margin ±%v from %s, verdict %q", c.SameWithinPct, c.SameWithinFrom, c.Verdict)
	}
}
