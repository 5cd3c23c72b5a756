package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
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
	// P is the two-sided p-value of Welch's t-test on the wall times (NaN
	// with fewer than two runs on a side).
	P Num `json:"p_value"`
	// Significant is true when Welch's test rejects equal mean wall times
	// at the 5% level.
	Significant bool `json:"significant"`
	// RangesOverlap is false when every run of one side was faster than
	// every run of the other.
	RangesOverlap bool `json:"ranges_overlap"`
	// RunsNeeded estimates the runs per side that would show the observed
	// difference at 95% confidence (80% power) at the observed spread; 0
	// when not estimable.
	RunsNeeded int `json:"runs_needed,omitempty"`
	// Runs is the smaller of the two sides' run counts.
	Runs int `json:"runs"`
	// Summary says it in words.
	Summary string `json:"summary"`
	// Diagnoses are findings about the difference itself (a slower side
	// that ran with memory near full); Runs name the slower side's runs.
	Diagnoses []Diagnosis `json:"diagnoses,omitempty"`
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
	wa, wb := known(wallTimes(a)), known(wallTimes(b))
	c.Runs = min(len(wa), len(wb))
	w := WelchTest(wa, wb)
	c.P = Num(w.P)
	c.Significant = !math.IsNaN(w.P) && w.P < 0.05
	c.RangesOverlap = overlap(wa, wb)
	if !c.Significant {
		c.RunsNeeded = RunsNeeded(wa, wb)
	}
	c.Summary = c.words()
	return c
}

func overlap(a, b []float64) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	return slices.Max(a) >= slices.Min(b) && slices.Max(b) >= slices.Min(a)
}

// sameWithin is the largest interval half-width (as a fraction of the
// ratio) for which "the same within noise" is a claim: a wider interval
// could hide a real difference, so the verdict is "too few runs".
const sameWithin = 0.10

func (c Comparison) pText() string {
	p := float64(c.P)
	if p < 0.001 {
		return "p < 0.001"
	}
	return fmt.Sprintf("p = %.3f", p)
}

func (c Comparison) needText() string {
	if c.RunsNeeded > c.Runs {
		return fmt.Sprintf("; about %d runs each would be needed at the observed spread", c.RunsNeeded)
	}
	return ""
}

// words renders the comparison the way a person acts on it: "B is 1.18 ±
// 0.03× faster than A and uses 0.91 ± 0.02× the energy (95% intervals;
// Welch's t-test on wall time: p < 0.001)". A verdict that is not a
// difference says why, and how many runs would settle it.
func (c Comparison) words() string {
	var b strings.Builder
	sp, ci := float64(c.Speedup), float64(c.SpeedupCI95)
	welch := "Welch's t-test on wall time: " + c.pText()
	switch {
	case math.IsNaN(sp):
		fmt.Fprintf(&b, "%s and %s cannot be compared (no wall times)", c.B, c.A)
	case c.Runs < 2:
		fmt.Fprintf(&b, "%s is %.2f× as fast as %s, but %d run per side is too few to conclude (at least 2 each, more for a verdict)",
			c.B, sp, c.A, c.Runs)
	case c.Significant:
		dir, f, fci := "faster", sp, ci
		if sp < 1 {
			// Slower: said as a slowdown factor, the interval mapped
			// through 1/x (about symmetric for small intervals).
			dir, f, fci = "slower", 1/sp, ci/(sp*sp)
		}
		fmt.Fprintf(&b, "%s is %.2f ± %.2f× %s than %s", c.B, f, fci, dir, c.A)
		if e := c.energyText(); e != "" {
			b.WriteString(" and " + e)
		}
		fmt.Fprintf(&b, " (95%% intervals; %s)", welch)
		return b.String()
	case !c.RangesOverlap:
		// Every run of one side beat every run of the other, yet the test
		// cannot conclude: never call that "the same".
		dir, f := "faster", sp
		if sp < 1 {
			dir, f = "slower", 1/sp
		}
		fmt.Fprintf(&b, "%s looks %.2f× %s than %s (the run ranges do not overlap), but %d runs each are too few to conclude (%s)%s",
			c.B, f, dir, c.A, c.Runs, welch, c.needText())
	case c.SpeedupCI95.Known() && ci <= sameWithin*sp:
		fmt.Fprintf(&b, "%s and %s take the same time within noise: %s is %.2f ± %.2f× as fast as %s (95%% interval; %s)",
			c.B, c.A, c.B, sp, ci, c.A, welch)
	default:
		fmt.Fprintf(&b, "too few runs to conclude: %s is %.2f ± %.2f× as fast as %s (95%% interval; %s)%s",
			c.B, sp, ci, c.A, welch, c.needText())
	}
	if e := c.energyText(); e != "" {
		fmt.Fprintf(&b, ". %s %s of %s", c.B, e, c.A)
	}
	return b.String()
}

// energyText is "uses 0.91 ± 0.02× the energy", "" when unknown.
func (c Comparison) energyText() string {
	if !c.EnergyRatio.Known() {
		return ""
	}
	if c.EnergyRatioCI95.Known() {
		return fmt.Sprintf("uses %.2f ± %.2f× the energy", float64(c.EnergyRatio), float64(c.EnergyRatioCI95))
	}
	return fmt.Sprintf("uses %.2f× the energy", float64(c.EnergyRatio))
}

// SlowerBy returns how much slower B is than A, in percent of A's mean
// wall time (negative when B is faster).
func (c Comparison) SlowerBy() float64 {
	return (1/float64(c.Speedup) - 1) * 100
}

// FindingMemorySwap names the comparison finding of the field guide's
// ResNet-50 story: the bigger batch ran slower because it filled the GPU's
// memory and triggered swapping.
const FindingMemorySwap = "memory_swap"

// SwapMemoryPct: a side whose peak memory use reached this share of the
// GPU's memory ran with memory near full.
const SwapMemoryPct = 95

// CompareResults compares benchmark b (of result rb) against a (of ra), as
// Compare does, and adds the findings that need both sides: the slower
// side ran with memory near full (≥ SwapMemoryPct on a GPU) where the
// faster one did not — the field guide's bigger batch that got slower
// because memory swapped. ra and rb may be the same result (an A/B run).
func CompareResults(ra *Result, a *Benchmark, rb *Result, b *Benchmark) Comparison {
	c := Compare(a, b)
	c.Diagnoses = memorySwap(&c, ra, a, rb, b)
	return c
}

// peakMemoryPct is each device's highest memory use over a benchmark's
// runs, in percent of its total (devices whose total is unknown are left
// out).
func peakMemoryPct(r *Result, b *Benchmark) map[int]float64 {
	total := map[int]float64{}
	for _, d := range r.Devices {
		total[d.Index] = d.MemoryTotalMiB
	}
	out := map[int]float64{}
	for _, run := range b.Runs {
		for _, d := range run.Devices {
			if t := total[d.Index]; t > 0 && d.MemoryPeakMiB.Known() {
				out[d.Index] = math.Max(out[d.Index], 100*float64(d.MemoryPeakMiB)/t)
			}
		}
	}
	return out
}

func memorySwap(c *Comparison, ra *Result, a *Benchmark, rb *Result, b *Benchmark) []Diagnosis {
	sp := float64(c.Speedup)
	if math.IsNaN(sp) || sp == 1 || (!c.Significant && c.RangesOverlap) {
		return nil // no difference shown: nothing to explain
	}
	slowR, slow, fastR, fast := ra, a, rb, b
	if sp < 1 {
		slowR, slow, fastR, fast = rb, b, ra, a
	}
	slowPct, fastPct := peakMemoryPct(slowR, slow), peakMemoryPct(fastR, fast)
	var out []Diagnosis
	for _, dev := range slices.Sorted(maps.Keys(slowPct)) {
		sPct := slowPct[dev]
		fPct, ok := fastPct[dev]
		if sPct < SwapMemoryPct || !ok || fPct >= SwapMemoryPct {
			continue
		}
		var runs []int
		var start, end int64
		for _, run := range slow.Runs {
			for _, d := range run.Devices {
				if d.Index == dev && 100*float64(d.MemoryPeakMiB) >= SwapMemoryPct*peakTotal(slowR, dev) {
					runs = append(runs, run.Index)
					if start == 0 {
						start = run.StartNS
					}
					end = run.EndNS
				}
			}
		}
		slower := math.Max(sp, 1/sp)
		out = append(out, Diagnosis{Finding: FindingMemorySwap, Kind: "memory swap", Device: dev, StartNS: start, EndNS: end,
			Message: fmt.Sprintf("%s is %.2f× slower than %s and ran with memory near full (%.1f%% against %.1f%%): "+
				"a bigger batch that no longer fits swaps memory and loses throughput (the field guide's ResNet-50 "+
				"batch 256 → 512). Keep the batch that fits and emulate the bigger one with gradient accumulation",
				slow.Name, slower, fast.Name, sPct, fPct),
			Evidence: map[string]string{"slower": slow.Name, "faster": fast.Name, "slowdown": strconv.FormatFloat(math.Round(slower*100)/100, 'f', -1, 64),
				"slower_memory_peak_pct": strconv.FormatFloat(math.Round(sPct*10)/10, 'f', -1, 64),
				"faster_memory_peak_pct": strconv.FormatFloat(math.Round(fPct*10)/10, 'f', -1, 64),
				"threshold_pct":          strconv.Itoa(SwapMemoryPct)},
			Runs: runs})
	}
	return out
}

// peakTotal is device dev's total memory in r (MiB), NaN when unknown.
func peakTotal(r *Result, dev int) float64 {
	for _, d := range r.Devices {
		if d.Index == dev {
			return d.MemoryTotalMiB
		}
	}
	return math.NaN()
}
