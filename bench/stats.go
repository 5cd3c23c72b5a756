package bench

import (
	"math"
	"slices"
)

// Median returns the median of xs (NaN when empty). xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MeanStd returns the mean and the sample standard deviation of xs.
func MeanStd(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

// tCrit95 is the two-sided 95% Student t critical value for df degrees of
// freedom (table for small df, normal approximation beyond).
func tCrit95(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df < 1 {
		return math.NaN()
	}
	if df < len(table) {
		return table[df]
	}
	return 1.96 + 2.4/float64(df) // close to the exact value for df > 30
}

// MeanCI95 returns the mean of xs and the half-width of its 95% confidence
// interval.
func MeanCI95(xs []float64) (mean, half float64) {
	mean, sd := MeanStd(xs)
	if len(xs) < 2 {
		return mean, math.NaN()
	}
	return mean, tCrit95(len(xs)-1) * sd / math.Sqrt(float64(len(xs)))
}

// Welch is the result of Welch's unequal-variance t-test on two samples.
type Welch struct {
	// T is the t statistic of mean(b) − mean(a).
	T float64
	// DF is the Welch–Satterthwaite degrees of freedom.
	DF float64
	// P is the two-sided p-value: the chance of a difference at least this
	// large if both samples came from populations with equal means.
	P float64
}

// WelchTest runs Welch's t-test on a and b. It fits the small samples a
// benchmark has (it does not assume equal spreads). With fewer than two
// values on a side, or no spread at all, P is NaN.
func WelchTest(a, b []float64) Welch {
	ma, sa := MeanStd(a)
	mb, sb := MeanStd(b)
	if len(a) < 2 || len(b) < 2 {
		return Welch{T: math.NaN(), DF: math.NaN(), P: math.NaN()}
	}
	va, vb := sa*sa/float64(len(a)), sb*sb/float64(len(b))
	se := math.Sqrt(va + vb)
	if se == 0 {
		if ma == mb {
			return Welch{T: 0, DF: math.NaN(), P: 1}
		}
		return Welch{T: math.Inf(sign(mb - ma)), DF: math.NaN(), P: 0}
	}
	t := (mb - ma) / se
	df := (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	return Welch{T: t, DF: df, P: studentTwoSided(t, df)}
}

func sign(x float64) int {
	if x < 0 {
		return -1
	}
	return 1
}

// studentTwoSided returns P(|T| ≥ |t|) for Student's t with df degrees of
// freedom: I_{df/(df+t²)}(df/2, 1/2).
func studentTwoSided(t, df float64) float64 {
	if math.IsNaN(t) || math.IsNaN(df) || df <= 0 {
		return math.NaN()
	}
	return regIncBeta(df/2, 0.5, df/(df+t*t))
}

// regIncBeta is the regularised incomplete beta function I_x(a, b),
// evaluated by its continued fraction (Lentz's method).
func regIncBeta(a, b, x float64) float64 {
	switch {
	case x <= 0:
		return 0
	case x >= 1:
		return 1
	}
	la, _ := math.Lgamma(a)
	lb, _ := math.Lgamma(b)
	lab, _ := math.Lgamma(a + b)
	front := math.Exp(lab - la - lb + a*math.Log(x) + b*math.Log(1-x))
	if x > (a+1)/(a+b+2) {
		return 1 - front*betaCF(b, a, 1-x)/b
	}
	return front * betaCF(a, b, x) / a
}

func betaCF(a, b, x float64) float64 {
	const tiny, eps = 1e-300, 1e-14
	c, d := 1.0, 1-(a+b)*x/(a+1)
	if math.Abs(d) < tiny {
		d = tiny
	}
	d = 1 / d
	h := d
	for m := 1; m <= 300; m++ {
		fm := float64(m)
		for _, num := range [2]float64{
			fm * (b - fm) * x / ((a + 2*fm - 1) * (a + 2*fm)),
			-(a + fm) * (a + b + fm) * x / ((a + 2*fm) * (a + 2*fm + 1)),
		} {
			d = 1 + num*d
			if math.Abs(d) < tiny {
				d = tiny
			}
			c = 1 + num/c
			if math.Abs(c) < tiny {
				c = tiny
			}
			d = 1 / d
			h *= d * c
		}
		if math.Abs(d*c-1) < eps {
			break
		}
	}
	return h
}

// TQuantile returns the p quantile of Student's t distribution with df
// degrees of freedom (0.5 ≤ p < 1; df may be fractional, as Welch's is),
// found by bisection on the exact tail (studentTwoSided), so that a t
// statistic beyond TQuantile(0.975, df) and a p-value below 0.05 are the
// same statement. NaN for df ≤ 0.
func TQuantile(p, df float64) float64 {
	if math.IsNaN(df) || df <= 0 || math.IsNaN(p) || p < 0.5 || p >= 1 {
		return math.NaN()
	}
	tail := 2 * (1 - p) // two-sided tail beyond the quantile
	lo, hi := 0.0, 1.0
	for studentTwoSided(hi, df) > tail && hi < 1e15 {
		lo, hi = hi, hi*2
	}
	for hi-lo > 1e-13*hi {
		mid := (lo + hi) / 2
		if studentTwoSided(mid, df) > tail {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// powerQuantile is the quantile of t whose one-sided tail is 1 − the power
// (80%) a difference is detected with.
const powerQuantile = 0.80

// LogRatio is B against A on the log scale: an estimate of ln(B/A) with its
// standard error and Student t degrees of freedom, from pairs (PairedLogRatio)
// or from two independent samples (WelchLogRatio). exp of the mean is the
// ratio; exp of the interval's ends is the ratio's 95% interval, which is
// why it is not symmetric around the ratio.
type LogRatio struct {
	// Paired is true for a per-pair analysis, false for Welch's.
	Paired bool
	// N is the number of pairs (paired) or the smaller sample's size.
	N int
	// Mean estimates ln(B/A); SE is its standard error, DF the degrees of
	// freedom of its t statistic (n−1 for pairs, Welch–Satterthwaite's
	// otherwise).
	Mean, SE, DF float64
	// T is Mean/SE; P its two-sided p-value against "no difference".
	T, P float64
	// Half is the half-width of Mean's 95% interval, TQuantile(0.975, DF)·SE.
	Half float64
	// sd is the per-pair (paired) spread of the log ratios; sa and sb the
	// per-run spreads of the log values (unpaired): for RunsNeeded.
	sd, sa, sb float64
}

// Ratio is exp(Mean): the geometric mean of the pairs' B/A ratios (paired)
// or the ratio of the geometric means (unpaired).
func (l LogRatio) Ratio() float64 { return math.Exp(l.Mean) }

// Interval returns the 95% interval of the ratio B/A (NaN when fewer than
// two pairs or runs a side).
func (l LogRatio) Interval() (lo, hi float64) {
	return math.Exp(l.Mean - l.Half), math.Exp(l.Mean + l.Half)
}

// Resolution is the smallest relative difference these runs would detect
// at 95% confidence with 80% power at their spread: exp((t₀.₉₇₅ + t₀.₈₀)·SE)
// − 1 (0.02 is 2 %). NaN when there is no spread estimate.
func (l LogRatio) Resolution() float64 {
	if math.IsNaN(l.SE) {
		return math.NaN()
	}
	if l.SE == 0 {
		return 0
	}
	return math.Exp((TQuantile(0.975, l.DF)+TQuantile(powerQuantile, l.DF))*l.SE) - 1
}

// logs are the logs of the values of xs that are positive and finite.
func logs(xs []float64) []float64 {
	out := make([]float64, 0, len(xs))
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 0) {
			out = append(out, math.Log(x))
		}
	}
	return out
}

// PairedLogRatio analyses a[i] and b[i] as pairs (run i of A and run i of
// B, interleaved): the differences d = ln b[i] − ln a[i] cancel what the
// pair shared (machine drift, a noisy neighbour), and Student's paired t on
// d gives the estimate and interval. Pairs with a value that is not
// positive and finite are left out; beyond the shorter slice there are no
// pairs. With fewer than two pairs SE, T, P and Half are NaN.
func PairedLogRatio(a, b []float64) LogRatio {
	var d []float64
	for i := range min(len(a), len(b)) {
		if a[i] > 0 && b[i] > 0 && !math.IsInf(a[i], 0) && !math.IsInf(b[i], 0) {
			d = append(d, math.Log(b[i])-math.Log(a[i]))
		}
	}
	l := LogRatio{Paired: true, N: len(d)}
	l.Mean, l.sd = MeanStd(d)
	if len(d) < 2 {
		l.SE, l.DF, l.T, l.P, l.Half = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
		return l
	}
	n := float64(len(d))
	l.SE, l.DF = l.sd/math.Sqrt(n), n-1
	l.T, l.P, l.Half = tTest(l.Mean, l.SE, l.DF)
	return l
}

// WelchLogRatio analyses a and b as independent samples (runs made at
// different times, e.g. two saved results): Welch's t-test on the log
// values, whose mean difference is the log of the ratio of geometric
// means. Values that are not positive and finite are left out.
func WelchLogRatio(a, b []float64) LogRatio {
	la, lb := logs(a), logs(b)
	l := LogRatio{N: min(len(la), len(lb))}
	ma, sa := MeanStd(la)
	mb, sb := MeanStd(lb)
	l.Mean, l.sa, l.sb = mb-ma, sa, sb
	if len(la) < 2 || len(lb) < 2 {
		l.SE, l.DF, l.T, l.P, l.Half = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
		return l
	}
	va, vb := sa*sa/float64(len(la)), sb*sb/float64(len(lb))
	l.SE = math.Sqrt(va + vb)
	if l.SE > 0 {
		l.DF = (va + vb) * (va + vb) / (va*va/float64(len(la)-1) + vb*vb/float64(len(lb)-1))
	} else {
		l.DF = float64(len(la) + len(lb) - 2)
	}
	l.T, l.P, l.Half = tTest(l.Mean, l.SE, l.DF)
	return l
}

// tTest is the t statistic of mean against 0, its two-sided p-value and
// the half-width of mean's 95% interval. No spread at all (se = 0) is a
// certain difference unless mean is 0.
func tTest(mean, se, df float64) (t, p, half float64) {
	if se == 0 {
		if mean == 0 {
			return 0, 1, 0
		}
		return math.Inf(sign(mean)), 0, 0
	}
	t = mean / se
	return t, studentTwoSided(t, df), TQuantile(0.975, df) * se
}

// RunsNeeded estimates how many runs per side (pairs, when paired) would
// settle a comparison at the spread and difference observed: either show
// the difference at 95% confidence with 80% power, or fit the 95%
// interval within ±margin (a fraction) around no difference, whichever
// needs fewer. 0 when there is no spread to work from; at most 10000.
func (l LogRatio) RunsNeeded(margin float64) int {
	se := func(n float64) (float64, float64) {
		if l.Paired {
			return l.sd / math.Sqrt(n), n - 1
		}
		va, vb := l.sa*l.sa/n, l.sb*l.sb/n
		if va+vb == 0 {
			return 0, 2*n - 2
		}
		return math.Sqrt(va + vb), (va + vb) * (va + vb) / ((va*va + vb*vb) / (n - 1))
	}
	if s, _ := se(2); s == 0 || math.IsNaN(s) || math.IsNaN(l.Mean) {
		return 0
	}
	d := math.Abs(l.Mean)
	bound := math.Log1p(margin) // the tighter side of [1−m, 1+m] on the log scale
	settled := func(n int) bool {
		s, df := se(float64(n))
		t := TQuantile(0.975, df)
		return (d > 0 && d >= (t+TQuantile(powerQuantile, df))*s) || (margin > 0 && d+t*s <= bound)
	}
	// Both conditions only get easier as n grows (the standard error and
	// the t quantiles shrink): bisect for the smallest n.
	const most = 10000
	if !settled(most) {
		return most
	}
	lo, hi := 1, most // settled(hi), and lo is below every n that settles
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if mid >= 2 && settled(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
