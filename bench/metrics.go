package bench

import (
	"math"
	"slices"
	"strings"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/record"
)

// point is one (time, value) pair of a series.
type point struct {
	t int64
	v float64
}

// series is one metric's samples on one device, sorted by time.
type series []point

func pick(samples []record.Sample, id catalog.MetricID) series {
	var s series
	for _, x := range samples {
		if x.Metric == id {
			s = append(s, point{x.TimeNS, x.Value})
		}
	}
	return s
}

// within returns the points with from ≤ t ≤ to.
func (s series) within(from, to int64) series {
	i, _ := slices.BinarySearchFunc(s, from, func(p point, t int64) int { return cmp64(p.t, t) })
	j := i
	for j < len(s) && s[j].t <= to {
		j++
	}
	return s[i:j]
}

// withPrior is within plus the last point at or before from (slow state
// read once a second may have no point inside a short window).
func (s series) withPrior(from, to int64) series {
	in := s.within(from, to)
	i, _ := slices.BinarySearchFunc(s, from, func(p point, t int64) int { return cmp64(p.t, t) })
	if i > 0 && (len(in) == 0 || in[0].t > from) {
		return append(series{s[i-1]}, in...)
	}
	return in
}

func cmp64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s series) values() []float64 {
	out := make([]float64, len(s))
	for i, p := range s {
		out[i] = p.v
	}
	return out
}

// window accumulates the series' points.
func (s series) window() accum.Window {
	var w accum.Window
	for _, p := range s {
		w.Add(p.t, p.v)
	}
	return w
}

// max is the largest value (NaN when the series is empty).
func (s series) max() float64 {
	w := s.window()
	if w.Count == 0 {
		return math.NaN()
	}
	return w.Max
}

// at interpolates linearly at t; NaN when t lies outside the series.
func (s series) at(t int64) float64 {
	if len(s) == 0 || t < s[0].t || t > s[len(s)-1].t {
		return math.NaN()
	}
	i, found := slices.BinarySearchFunc(s, t, func(p point, t int64) int { return cmp64(p.t, t) })
	if found {
		return s[i].v
	}
	a, b := s[i-1], s[i]
	return a.v + (b.v-a.v)*float64(t-a.t)/float64(b.t-a.t)
}

// holdAt is the value at t, interpolated inside the series and held
// (nearest value) outside it.
func (s series) holdAt(t int64) float64 {
	switch {
	case len(s) == 0:
		return math.NaN()
	case t <= s[0].t:
		return s[0].v
	case t >= s[len(s)-1].t:
		return s[len(s)-1].v
	}
	return s.at(t)
}

// integrate returns ∫ v dt over [from, to] in value·seconds (trapezoids,
// interpolated at the edges, held beyond the series' ends). NaN when the
// series is empty.
func (s series) integrate(from, to int64) float64 {
	if len(s) == 0 || to <= from {
		if to == from && len(s) > 0 {
			return 0
		}
		return math.NaN()
	}
	pts := []point{{from, s.holdAt(from)}}
	for _, p := range s.within(from, to) {
		if p.t > from && p.t < to {
			pts = append(pts, p)
		}
	}
	pts = append(pts, point{to, s.holdAt(to)})
	var sum float64
	for i := 1; i < len(pts); i++ {
		sum += (pts[i].v + pts[i-1].v) / 2 * float64(pts[i].t-pts[i-1].t) / 1e9
	}
	return sum
}

// updatePeriodNS is the median time between changes of a counter's value
// (NaN with fewer than two changes).
func (s series) updatePeriodNS() float64 {
	var changes []float64
	last := int64(-1)
	for i := 1; i < len(s); i++ {
		if s[i].v != s[i-1].v {
			if last >= 0 {
				changes = append(changes, float64(s[i].t-last))
			}
			last = s[i].t
		}
	}
	return Median(changes)
}

// Percentile returns the p-th percentile (0–100) of xs by linear
// interpolation between order statistics (NaN when empty).
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	r := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(r))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(r-float64(lo))
}

// dist is the distribution of the series' values: mean, extremes and
// percentiles (NaN when the series is empty).
func dist(s series) Dist {
	w := s.window()
	if w.Count == 0 {
		nan := Num(math.NaN())
		return Dist{Mean: nan, Min: nan, P5: nan, P50: nan, P95: nan, Max: nan}
	}
	xs := s.values()
	return Dist{N: int(w.Count), Mean: Num(w.Mean()), Min: Num(w.Min), P5: Num(Percentile(xs, 5)),
		P50: Num(Percentile(xs, 50)), P95: Num(Percentile(xs, 95)), Max: Num(w.Max)}
}

// coarseFraction: a counter that updates less often than a fifth of the
// window cannot resolve the window's energy well.
const coarseFraction = 0.2

// deviceWindow computes one device's numbers over [from, to] from its
// samples (which may extend beyond the window: edges are interpolated).
type deviceWindow struct {
	cat     *catalog.Catalog
	samples []record.Sample
	power   series // instant power (field) when present, else the buffer's
	energy  series // mJ counter
	useCtr  bool   // the counter is fine for the whole run
}

func newDeviceWindow(cat *catalog.Catalog, samples []record.Sample) *deviceWindow {
	w := &deviceWindow{cat: cat, samples: samples}
	w.power = pick(samples, catalog.MetricPowerInstant)
	if len(w.power) < 2 {
		w.power = pick(samples, catalog.MetricPowerDraw)
	}
	w.energy = pick(samples, catalog.MetricEnergy)
	return w
}

// energyJ returns the energy over [from, to] from the counter and from
// integrated power.
func (w *deviceWindow) energyOver(from, to int64) Energy {
	e := Energy{Source: "none"}
	ctr := (w.energy.at(to) - w.energy.at(from)) / 1000
	e.CounterJ = Num(ctr)
	e.IntegratedJ = Num(w.power.integrate(from, to))
	up := w.energy.within(from-int64(5e9), to+int64(5e9)).updatePeriodNS()
	e.CounterUpdateMS = Num(up / 1e6)
	if !math.IsNaN(up) && up > coarseFraction*float64(to-from) {
		e.Coarse = true
	}
	if e.CounterJ.Known() && e.IntegratedJ.Known() && e.IntegratedJ > 0 {
		e.Discrepancy = Num(math.Abs(float64(e.CounterJ-e.IntegratedJ)) / float64(e.IntegratedJ))
	} else {
		e.Discrepancy = Num(math.NaN())
	}
	switch {
	case e.CounterJ.Known() && !e.Coarse:
		e.J, e.Source = e.CounterJ, "counter"
	case e.IntegratedJ.Known():
		e.J, e.Source = e.IntegratedJ, "integrated_power"
	case e.CounterJ.Known():
		e.J, e.Source = e.CounterJ, "counter"
	default:
		e.J = Num(math.NaN())
	}
	return e
}

// energyBetween is the energy over a sub-window with the source chosen for
// the whole run, so that steps add up to the run.
func (w *deviceWindow) energyBetween(from, to int64) float64 {
	if w.useCtr {
		return (w.energy.at(to) - w.energy.at(from)) / 1000
	}
	return w.power.integrate(from, to)
}

func (w *deviceWindow) utilOver(from, to int64) series {
	return pick(w.samples, catalog.MetricUtilGPU).within(from, to)
}

// compute fills a RunDevice for [from, to]; idleW is the device's
// baseline power (NaN when unknown).
func (w *deviceWindow) compute(idx int, from, to int64, idleW float64) RunDevice {
	d := RunDevice{Index: idx, ThrottleMS: map[string]Num{}}
	d.Energy = w.energyOver(from, to)
	w.useCtr = d.Energy.Source == "counter"
	dur := float64(to-from) / 1e9
	d.PowerMeanW = Num(float64(d.Energy.J) / dur)
	if dur <= 0 {
		d.PowerMeanW = Num(math.NaN())
	}
	d.EnergyAboveIdleJ = Num(float64(d.Energy.J) - idleW*dur)
	peak := math.Max(pick(w.samples, catalog.MetricPowerInstant).within(from, to).max(),
		pick(w.samples, catalog.MetricPowerDraw).within(from, to).max())
	d.PowerPeakW = Num(peak)
	d.Util = dist(w.utilOver(from, to))
	d.MemUtil = dist(pick(w.samples, catalog.MetricUtilMemory).within(from, to))
	d.SMClock = dist(pick(w.samples, catalog.MetricClockSM).within(from, to))
	d.MemoryPeakMiB = Num(pick(w.samples, catalog.MetricMemoryUsed).withPrior(from, to).max())
	d.TempPeakC = Num(pick(w.samples, catalog.MetricTempGPU).withPrior(from, to).max())
	d.MemTempPeakC = Num(pick(w.samples, catalog.MetricTempMemory).withPrior(from, to).max())
	for _, m := range w.cat.All() {
		if m.Group != catalog.GroupThrottle || m.Kind != catalog.Counter {
			continue
		}
		c := pick(w.samples, m.ID)
		if len(c) == 0 {
			continue
		}
		delta := c.holdAt(to) - c.holdAt(from)
		d.ThrottleMS[strings.TrimPrefix(m.Name, "throttle_")] = Num(math.Max(delta, 0) / 1e6)
	}
	d.SMActive = gpmDist(w, from, to, "sm_active")
	d.Tensor = gpmDist(w, from, to, "tensor")
	d.Samples = len(w.within(from, to))
	return d
}

func (w *deviceWindow) within(from, to int64) []record.Sample {
	var out []record.Sample
	for _, s := range w.samples {
		if s.TimeNS >= from && s.TimeNS <= to {
			out = append(out, s)
		}
	}
	return out
}

// gpmDist summarizes the first catalog metric whose name contains key
// (GPM metrics: sm_active, tensor activity), or nil when the catalog or
// the device has none.
func gpmDist(w *deviceWindow, from, to int64, key string) *Dist {
	for _, m := range w.cat.All() {
		if !strings.Contains(m.Name, key) {
			continue
		}
		s := pick(w.samples, m.ID).within(from, to)
		if len(s) == 0 {
			continue
		}
		d := dist(s)
		return &d
	}
	return nil
}

// stat summarizes xs (NaNs skipped).
func stat(xs []float64) Stat {
	var ok []float64
	for _, x := range xs {
		if !math.IsNaN(x) {
			ok = append(ok, x)
		}
	}
	nan := Num(math.NaN())
	if len(ok) == 0 {
		return Stat{Mean: nan, SD: nan, Min: nan, Max: nan, Median: nan, CI95: nan}
	}
	m, sd := MeanStd(ok)
	_, ci := MeanCI95(ok)
	return Stat{N: len(ok), Mean: Num(m), SD: Num(sd), Min: Num(slices.Min(ok)), Max: Num(slices.Max(ok)),
		Median: Num(Median(ok)), CI95: Num(ci)}
}

// Outliers returns the indexes of xs beyond 1.5 interquartile ranges from
// the quartiles (none with fewer than 4 values).
func Outliers(xs []float64) []int {
	if len(xs) < 4 {
		return nil
	}
	q1, q3 := Percentile(xs, 25), Percentile(xs, 75)
	// A floor of 2% of the median keeps near-identical runs (a tight IQR)
	// from flagging scheduler noise.
	iqr := math.Max(q3-q1, 0.02*math.Abs(Median(xs)))
	var out []int
	for i, x := range xs {
		if x < q1-1.5*iqr || x > q3+1.5*iqr {
			out = append(out, i)
		}
	}
	return out
}
