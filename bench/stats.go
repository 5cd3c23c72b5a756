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
	return ratio, tCrit95(int(df)) * ratio * math.Sqrt(rel)
}
