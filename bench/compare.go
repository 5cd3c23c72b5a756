package bench

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Comparison is B against A: wall-time, energy and power ratios B/A with
// their 95% intervals, a verdict on the wall time and one on the energy.
//
// Runs that were interleaved (bench --vs) are analysed as pairs: run i of A
// and run i of B ran back to back, so what drifted on the machine hit both,
// and the per-pair log ratios ln(B/A) carry the difference without that
// drift (Student's paired t). Runs made at different times (bench compare
// of two files) are two independent samples: Welch's t-test on the log
// times. Analysis says which was used.
type Comparison struct {
	A string `json:"a"`
	B string `json:"b"`
	// Analysis is AnalysisPaired or AnalysisUnpaired; Pairs counts the
	// pairs of a paired analysis.
	Analysis string `json:"analysis"`
	Pairs    int    `json:"pairs,omitempty"`
	// Verdict on the wall time: VerdictSlower, VerdictFaster, VerdictSame,
	// VerdictNoDifference, VerdictTooFewRuns or VerdictNotComparable (B
	// against A). EnergyVerdict is the same judgement of the energy
	// ("slower" there means B uses more).
	Verdict       string `json:"verdict"`
	EnergyVerdict string `json:"energy_verdict,omitempty"`
	// TimeRatio is B's wall time over A's (geometric mean of the pairs'
	// ratios, or ratio of geometric means unpaired), with its 95% interval.
	TimeRatio     Num `json:"time_ratio"`
	TimeRatioLow  Num `json:"time_ratio_low"`
	TimeRatioHigh Num `json:"time_ratio_high"`
	// Speedup is 1/TimeRatio (above 1, B is faster); SpeedupCI95 the mean
	// half-width of its interval (1/TimeRatioLow − 1/TimeRatioHigh)/2.
	Speedup     Num `json:"speedup"`
	SpeedupCI95 Num `json:"speedup_ci95"`
	// EnergyRatio is energy(B) / energy(A): below 1, B uses less; Low and
	// High bound its 95% interval, CI95 is their mean half-width.
	EnergyRatio     Num `json:"energy_ratio"`
	EnergyRatioLow  Num `json:"energy_ratio_low"`
	EnergyRatioHigh Num `json:"energy_ratio_high"`
	EnergyRatioCI95 Num `json:"energy_ratio_ci95"`
	// PowerRatio is mean power(B) / mean power(A), as EnergyRatio.
	PowerRatio     Num `json:"power_ratio"`
	PowerRatioLow  Num `json:"power_ratio_low"`
	PowerRatioHigh Num `json:"power_ratio_high"`
	PowerRatioCI95 Num `json:"power_ratio_ci95"`
	// P is the two-sided p-value of the wall-time test (paired t, or
	// Welch's t unpaired); NaN with fewer than two pairs or runs a side.
	P Num `json:"p_value"`
	// Significant is true when the 95% interval of TimeRatio excludes 1
	// (the same as P < 0.05).
	Significant bool `json:"significant"`
	// SameWithinPct is the margin of "the same" (±%): the wall times are
	// the same when TimeRatio's whole 95% interval lies within 1 ± it.
	// SameWithinFrom says where it came from: "--same-within", "default"
	// (ResolutionPct, at most DefaultSameWithinPct) or "--fail-if-slower"
	// (that limit, when smaller).
	SameWithinPct  Num    `json:"same_within_pct"`
	SameWithinFrom string `json:"same_within_from"`
	// ResolutionPct is the smallest difference these runs detect at 95%
	// confidence with 80% power, at their spread (LogRatio.Resolution).
	ResolutionPct Num `json:"resolution_pct"`
	// RangesOverlap is false when every run of one side was faster than
	// every run of the other.
	RangesOverlap bool `json:"ranges_overlap"`
	// RunsNeeded estimates the runs per side that would settle a verdict of
	// no difference at the observed spread (show the difference, or fit
	// the interval within the margin); 0 when not estimable or settled.
	RunsNeeded int `json:"runs_needed,omitempty"`
	// Runs is the smaller of the two sides' run counts.
	Runs int `json:"runs"`
	// Summary says it in words.
	Summary string `json:"summary"`
	// Diagnoses are findings about the difference itself (a slower side
	// that ran with memory near full); Runs name the slower side's runs.
	Diagnoses []Diagnosis `json:"diagnoses,omitempty"`
}

// Analyses of a Comparison.
const (
	// AnalysisPaired: interleaved runs, paired t-test on the per-pair log
	// ratios.
	AnalysisPaired = "paired"
	// AnalysisUnpaired: independent samples, Welch's t-test on log values.
	AnalysisUnpaired = "unpaired"
)

// Verdicts of a Comparison, B against A.
const (
	VerdictSlower        = "slower"
	VerdictFaster        = "faster"
	VerdictSame          = "same"
	VerdictNoDifference  = "no difference detected"
	VerdictTooFewRuns    = "too few runs"
	VerdictNotComparable = "not comparable"
)

// DefaultSameWithinPct caps the default margin of "the same": the margin is
// what the runs resolve, but never wider than this, because "the same"
// with a wider band would hide the few-percent differences benchmarks are
// run to find.
const DefaultSameWithinPct = 1.0

// CompareOptions configure Compare.
type CompareOptions struct {
	// Paired: the runs were interleaved, run i of A and run i of B a pair.
	// Otherwise they are independent samples.
	Paired bool
	// SameWithinPct is the margin of "the same" in percent (2: ±2 %); 0:
	// the default, the difference the runs resolve (ResolutionPct) but at
	// most DefaultSameWithinPct.
	SameWithinPct float64
	// FailIfSlower is set with --fail-if-slower FailIfSlowerPct: the margin
	// is then at most that limit, so that "the same" never passes a
	// difference the limit would fail.
	FailIfSlower    bool
	FailIfSlowerPct float64
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

// runField is f of every run in order, NaN where unknown (so that run i of
// A and run i of B stay aligned for the pairs).
func runField(b *Benchmark, f func(*Run) Num) []float64 {
	out := make([]float64, 0, len(b.Runs))
	for i := range b.Runs {
		out = append(out, float64(f(&b.Runs[i])))
	}
	return out
}

func (o CompareOptions) ratio(a, b []float64) LogRatio {
	if o.Paired {
		return PairedLogRatio(a, b)
	}
	return WelchLogRatio(a, b)
}

// Compare compares benchmark b against a.
func Compare(a, b *Benchmark, o CompareOptions) Comparison {
	c := Comparison{A: a.Name, B: b.Name, Analysis: AnalysisUnpaired}
	if o.Paired {
		c.Analysis = AnalysisPaired
	}
	wa, wb := known(wallTimes(a)), known(wallTimes(b))
	c.Runs = min(len(wa), len(wb))
	c.RangesOverlap = overlap(wa, wb)
	t := o.ratio(wallTimes(a), wallTimes(b))
	if o.Paired {
		c.Pairs = t.N
	}
	c.TimeRatio, c.TimeRatioLow, c.TimeRatioHigh = ratioNums(t)
	c.Speedup = Num(1 / float64(c.TimeRatio))
	c.SpeedupCI95 = Num((1/float64(c.TimeRatioLow) - 1/float64(c.TimeRatioHigh)) / 2)
	c.P = Num(t.P)
	lo, hi := t.Interval()
	c.Significant = t.N >= 2 && (lo > 1 || hi < 1)
	c.ResolutionPct = Num(100 * t.Resolution())
	c.SameWithinPct, c.SameWithinFrom = Num(o.SameWithinPct), "--same-within"
	if o.SameWithinPct <= 0 {
		c.SameWithinPct, c.SameWithinFrom = Num(math.Min(float64(c.ResolutionPct), DefaultSameWithinPct)), "default"
	}
	if o.FailIfSlower && o.FailIfSlowerPct < float64(c.SameWithinPct) {
		c.SameWithinPct, c.SameWithinFrom = Num(o.FailIfSlowerPct), "--fail-if-slower"
	}
	margin := float64(c.SameWithinPct) / 100
	c.Verdict = verdict(t, margin)
	if c.Verdict == VerdictNoDifference {
		c.RunsNeeded = t.RunsNeeded(margin)
	}
	energy := func(r *Run) Num { return r.EnergyJ }
	if e := o.ratio(runField(a, energy), runField(b, energy)); e.N > 0 {
		c.EnergyRatio, c.EnergyRatioLow, c.EnergyRatioHigh = ratioNums(e)
		c.EnergyRatioCI95 = (c.EnergyRatioHigh - c.EnergyRatioLow) / 2
		c.EnergyVerdict = verdict(e, margin)
	} else {
		c.EnergyRatio, c.EnergyRatioLow, c.EnergyRatioHigh, c.EnergyRatioCI95 = nan4()
	}
	power := func(r *Run) Num { return r.PowerMeanW }
	if p := o.ratio(runField(a, power), runField(b, power)); p.N > 0 {
		c.PowerRatio, c.PowerRatioLow, c.PowerRatioHigh = ratioNums(p)
		c.PowerRatioCI95 = (c.PowerRatioHigh - c.PowerRatioLow) / 2
	} else {
		c.PowerRatio, c.PowerRatioLow, c.PowerRatioHigh, c.PowerRatioCI95 = nan4()
	}
	c.Summary = c.words()
	return c
}

func nan4() (Num, Num, Num, Num) {
	n := Num(math.NaN())
	return n, n, n, n
}

// ratioNums are l's ratio and the ends of its 95% interval.
func ratioNums(l LogRatio) (r, lo, hi Num) {
	if l.N == 0 {
		return Num(math.NaN()), Num(math.NaN()), Num(math.NaN())
	}
	a, b := l.Interval()
	return Num(l.Ratio()), Num(a), Num(b)
}

// verdict judges l against the margin (a fraction): a difference when the
// 95% interval of B/A excludes 1; the same when it lies within 1 ± margin
// (an equivalence test: both one-sided tests at 2.5%); otherwise no
// difference detected.
func verdict(l LogRatio, margin float64) string {
	switch {
	case l.N == 0:
		return VerdictNotComparable
	case l.N < 2:
		return VerdictTooFewRuns
	}
	lo, hi := l.Interval()
	// 1e-12: a ratio computed as exp(ln b − ln a) of equal values is 1
	// within rounding.
	const eps = 1e-12
	switch {
	case lo > 1+eps:
		return VerdictSlower
	case hi < 1-eps:
		return VerdictFaster
	case lo >= 1-margin-eps && hi <= 1+margin+eps:
		return VerdictSame
	}
	return VerdictNoDifference
}

func overlap(a, b []float64) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	return slices.Max(a) >= slices.Min(b) && slices.Max(b) >= slices.Min(a)
}

func pText(p float64) string {
	if p < 0.001 {
		return "p < 0.001"
	}
	return fmt.Sprintf("p = %.3f", p)
}

// method names the test and what it ran on, for the summary.
func (c Comparison) method() string {
	if c.Analysis == AnalysisPaired {
		return fmt.Sprintf("paired t-test on the log time ratios of %d interleaved A/B pairs", c.Pairs)
	}
	return fmt.Sprintf("Welch's t-test on log wall times, unpaired (runs not interleaved), %d runs each", c.Runs)
}

// pctOf is a ratio as a signed percentage: 1.08 → "+8.0 %".
func pctOf(r float64) string {
	s := fmtPct((r - 1) * 100)
	if r >= 1 {
		s = "+" + s
	}
	return s + " %"
}

// cannotRuleOut is the largest difference the interval [lo, hi] allows, in
// percent.
func cannotRuleOut(lo, hi float64) float64 {
	return 100 * math.Max(hi-1, 1-lo)
}

// fmtPct formats a percentage with the digits it deserves: 350, 14, 2.5,
// 0.51.
func fmtPct(x float64) string {
	switch ax := math.Abs(x); {
	case ax >= 10:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case ax >= 1:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'g', 2, 64)
}

// marginText says what the margin is and where it came from.
func (c Comparison) marginText() string {
	m := fmtPct(float64(c.SameWithinPct))
	switch c.SameWithinFrom {
	case "default":
		return fmt.Sprintf("margin ±%s %%, the default: what these runs resolve (%s %%), at most %g %%; --same-within sets it",
			m, fmtPct(float64(c.ResolutionPct)), DefaultSameWithinPct)
	case "--fail-if-slower":
		return fmt.Sprintf("margin ±%s %%, from --fail-if-slower", m)
	}
	return fmt.Sprintf("margin ±%s %%, from --same-within", m)
}

// words renders the comparison the way a person acts on it: the verdict,
// the ratio with its 95% interval and the test that made the call, then
// the energy.
func (c Comparison) words() string {
	var b strings.Builder
	r, lo, hi := float64(c.TimeRatio), float64(c.TimeRatioLow), float64(c.TimeRatioHigh)
	stats := fmt.Sprintf("time B/A %.3f, 95%% interval %.3f–%.3f; %s: %s", r, lo, hi, c.method(), pText(float64(c.P)))
	switch c.Verdict {
	case VerdictNotComparable:
		fmt.Fprintf(&b, "%s and %s cannot be compared (no wall times)", c.B, c.A)
	case VerdictTooFewRuns:
		fmt.Fprintf(&b, "%s takes %.2f× %s's time, but one run per side is too few to conclude (at least 2 each, more for a verdict)",
			c.B, r, c.A)
	case VerdictSlower:
		fmt.Fprintf(&b, "%s is %s %% slower than %s (%s)", c.B, fmtPct((r-1)*100), c.A, stats)
	case VerdictFaster:
		fmt.Fprintf(&b, "%s is %s %% faster than %s: %.2f× as fast (%s)", c.B, fmtPct((1-r)*100), c.A, 1/r, stats)
	case VerdictSame:
		fmt.Fprintf(&b, "%s and %s take the same time within ±%s %% (%s; %s)", c.B, c.A, fmtPct(float64(c.SameWithinPct)), stats, c.marginText())
	default:
		fmt.Fprintf(&b, "no difference detected between %s and %s", c.B, c.A)
		if !c.RangesOverlap {
			dir := "faster"
			if r > 1 {
				dir = "slower"
			}
			fmt.Fprintf(&b, ", although every run of %s was %s than every run of %s", c.B, dir, c.A)
		}
		fmt.Fprintf(&b, "; the interval cannot rule out ±%s %% (%s; %s)", fmtPct(cannotRuleOut(lo, hi)), stats, c.marginText())
		if c.RunsNeeded > c.Runs {
			fmt.Fprintf(&b, "; about %d runs each would settle it at the observed spread", c.RunsNeeded)
		}
	}
	if e := c.energyText(); e != "" {
		b.WriteString(". " + e)
	}
	return b.String()
}

// energyText is the energy's verdict and ratio, "" when unknown.
func (c Comparison) energyText() string {
	r, lo, hi := float64(c.EnergyRatio), float64(c.EnergyRatioLow), float64(c.EnergyRatioHigh)
	if !c.EnergyRatio.Known() {
		return ""
	}
	iv := fmt.Sprintf("energy B/A %.3f, 95%% interval %.3f–%.3f", r, lo, hi)
	switch c.EnergyVerdict {
	case VerdictSlower:
		return fmt.Sprintf("Energy: %s uses %s %% more (%s)", c.B, fmtPct((r-1)*100), iv)
	case VerdictFaster:
		return fmt.Sprintf("Energy: %s uses %s %% less (%s)", c.B, fmtPct((1-r)*100), iv)
	case VerdictSame:
		return fmt.Sprintf("Energy: the same within ±%s %% (%s)", fmtPct(float64(c.SameWithinPct)), iv)
	case VerdictNoDifference:
		return fmt.Sprintf("Energy: no difference detected; the interval cannot rule out ±%s %% (%s)", fmtPct(cannotRuleOut(lo, hi)), iv)
	}
	return fmt.Sprintf("Energy: %s uses %.2f× %s's", c.B, r, c.A) + " energy"
}

// SlowerBy returns how much slower B is than A, in percent of A's wall
// time (negative when B is faster): (TimeRatio − 1) × 100.
func (c Comparison) SlowerBy() float64 {
	return (float64(c.TimeRatio) - 1) * 100
}

// Regression is the verdict of --fail-if-slower PCT on c: failed when the
// verdict is VerdictSlower and B is more than pct percent slower. It never
// disagrees with the verdict: "the same" and "faster" never fail, and a
// failure is always a difference the summary calls slower. msg explains a
// failure, or, when it did not fail but the interval reaches beyond the
// limit (no difference detected), says that more runs are needed to
// rule a regression out; "" otherwise.
func (c Comparison) Regression(pct float64) (failed bool, msg string) {
	hi := float64(c.TimeRatioHigh)
	switch {
	case c.Verdict == VerdictSlower && c.SlowerBy() > pct:
		return true, fmt.Sprintf("regression: %s is %s %% slower than %s (limit %g %%; 95%% interval %s to %s, %s)",
			c.B, fmtPct(c.SlowerBy()), c.A, pct, pctOf(float64(c.TimeRatioLow)), pctOf(hi), pText(float64(c.P)))
	case (c.Verdict == VerdictNoDifference || c.Verdict == VerdictTooFewRuns) && !(hi <= 1+pct/100):
		msg = fmt.Sprintf("not failed: no difference detected, but the interval allows %s up to %s, beyond the %g %% limit", c.B,
			pctOf(hi), pct)
		if c.RunsNeeded > c.Runs {
			msg += fmt.Sprintf("; about %d runs each would settle it", c.RunsNeeded)
		}
		return false, msg
	}
	return false, ""
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
func CompareResults(ra *Result, a *Benchmark, rb *Result, b *Benchmark, o CompareOptions) Comparison {
	c := Compare(a, b, o)
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
	if c.Verdict != VerdictSlower && c.Verdict != VerdictFaster && c.RangesOverlap {
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
