package bench

import (
	"fmt"
	"math"
	"strings"
)

// Comparison is B against A: ratios of means with the half-width of their
// 95% confidence intervals (delta method, Welch degrees of freedom).
type Comparison struct {
	A string `json:"a"`
	B string `json:"b"`
	// Speedup is mean wall(A) / mean wall(B): above 1, B is faster.
	Speedup     Num `json:"speedup"`
	SpeedupCI95 Num `json:"speedup_ci95"`
	// EnergyRatio is mean energy(B) / mean energy(A): below 1, B uses less.
	EnergyRatio     Num `json:"energy_ratio"`
	EnergyRatioCI95 Num `json:"energy_ratio_ci95"`
	// PowerRatio is mean power(B) / mean power(A).
	PowerRatio     Num `json:"power_ratio"`
	PowerRatioCI95 Num `json:"power_ratio_ci95"`
	// Significant is true when the speedup's interval excludes 1.
	Significant bool `json:"significant"`
	// Summary says it in words.
	Summary string `json:"summary"`
}

func wallTimes(b *Benchmark) []float64 {
	out := make([]float64, 0, len(b.Runs))
	for _, r := range b.Runs {
		out = append(out, float64(r.WallS))
	}
	return out
}

func known(xs []float64) []float64 {
	var out []float64
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			out = append(out, x)
		}
	}
	return out
}

func runField(b *Benchmark, f func(*Run) Num) []float64 {
	out := make([]float64, 0, len(b.Runs))
	for i := range b.Runs {
		out = append(out, float64(f(&b.Runs[i])))
	}
	return known(out)
}

// Compare compares benchmark b against a.
func Compare(a, b *Benchmark) Comparison {
	c := Comparison{A: a.Name, B: b.Name}
	sp, spCI := RatioCI95(wallTimes(b), wallTimes(a)) // mean(a)/mean(b)
	c.Speedup, c.SpeedupCI95 = Num(sp), Num(spCI)
	ea, eb := runField(a, func(r *Run) Num { return r.EnergyJ }), runField(b, func(r *Run) Num { return r.EnergyJ })
	if len(ea) > 0 && len(eb) > 0 {
		er, erCI := RatioCI95(ea, eb)
		c.EnergyRatio, c.EnergyRatioCI95 = Num(er), Num(erCI)
	} else {
		c.EnergyRatio, c.EnergyRatioCI95 = Num(math.NaN()), Num(math.NaN())
	}
	pa, pb := runField(a, func(r *Run) Num { return r.PowerMeanW }), runField(b, func(r *Run) Num { return r.PowerMeanW })
	if len(pa) > 0 && len(pb) > 0 {
		pr, prCI := RatioCI95(pa, pb)
		c.PowerRatio, c.PowerRatioCI95 = Num(pr), Num(prCI)
	} else {
		c.PowerRatio, c.PowerRatioCI95 = Num(math.NaN()), Num(math.NaN())
	}
	c.Significant = c.SpeedupCI95.Known() && math.Abs(sp-1) > spCI
	c.Summary = c.words()
	return c
}

// words renders the comparison the way a person acts on it:
// "B is 1.18 ± 0.03× faster than A and uses 0.91× the energy".
func (c Comparison) words() string {
	var b strings.Builder
	sp, ci := float64(c.Speedup), float64(c.SpeedupCI95)
	switch {
	case math.IsNaN(sp):
		fmt.Fprintf(&b, "%s and %s cannot be compared (no wall times)", c.B, c.A)
	case !c.SpeedupCI95.Known():
		fmt.Fprintf(&b, "%s is %.2f× as fast as %s (too few runs for a confidence interval)", c.B, sp, c.A)
	case !c.Significant:
		fmt.Fprintf(&b, "%s and %s take the same time within noise (%s is %.2f ± %.2f× as fast)", c.B, c.A, c.B, sp, ci)
	case sp >= 1:
		fmt.Fprintf(&b, "%s is %.2f ± %.2f× faster than %s", c.B, sp, ci, c.A)
	default:
		// Slower: say it as a slowdown factor with the interval mapped
		// through 1/x (approximately symmetric for small intervals).
		fmt.Fprintf(&b, "%s is %.2f ± %.2f× slower than %s", c.B, 1/sp, ci/(sp*sp), c.A)
	}
	if c.EnergyRatio.Known() {
		er := float64(c.EnergyRatio)
		if c.EnergyRatioCI95.Known() {
			fmt.Fprintf(&b, " and uses %.2f ± %.2f× the energy", er, float64(c.EnergyRatioCI95))
		} else {
			fmt.Fprintf(&b, " and uses %.2f× the energy", er)
		}
	}
	return b.String()
}

// SlowerBy returns how much slower B is than A, in percent of A's mean
// wall time (negative when B is faster).
func (c Comparison) SlowerBy() float64 {
	return (1/float64(c.Speedup) - 1) * 100
}
