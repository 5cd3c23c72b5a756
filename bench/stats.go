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

// RatioCI95 returns mean(b)/mean(a) and the half-width of its 95%
// confidence interval (delta method with Welch's degrees of freedom).
func RatioCI95(a, b []float64) (ratio, half float64) {
	ma, sa := MeanStd(a)
	mb, sb := MeanStd(b)
	ratio = mb / ma
	if len(a) < 2 || len(b) < 2 {
		return ratio, math.NaN()
	}
	va, vb := sa*sa/float64(len(a)), sb*sb/float64(len(b))
	// relative variance of a ratio of independent means
	rel := va/(ma*ma) + vb/(mb*mb)
	df := (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	if math.IsNaN(df) || df < 1 {
		df = float64(min(len(a), len(b)) - 1)
	}
	// df rounded down to a table row; the epsilon keeps 6 computed as
	// 5.9999999 on row 6.
	return ratio, tCrit95(int(df+1e-9)) * ratio * math.Sqrt(rel)
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

// RunsNeeded estimates how many runs per side would show the observed
// difference between a and b at 95% confidence with 80% power, at the
// observed spread. It returns 0 when there is no difference or no spread
// to work from.
func RunsNeeded(a, b []float64) int {
	ma, sa := MeanStd(a)
	mb, sb := MeanStd(b)
	d := math.Abs(mb - ma)
	v := sa*sa + sb*sb
	if d == 0 || math.IsNaN(d) || v == 0 || math.IsNaN(v) {
		return 0
	}
	const zPower = 0.8416 // one-sided 80% power
	for n := 2; n <= 10000; n++ {
		fn := float64(n)
		va, vb := sa*sa/fn, sb*sb/fn
		df := (va + vb) * (va + vb) / (va*va/(fn-1) + vb*vb/(fn-1))
		if d/math.Sqrt(v/fn) >= tCrit95(int(df))+zPower {
			return n
		}
	}
	return 10000
}
