package bench

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"

	"github.com/gpusampler/gpusampler/catalog"
)

// panel is one chart row of the report: metrics drawn as lines.
type panel struct {
	title   string
	unit    string
	metrics []catalog.MetricID
}

var panels = []panel{
	{"utilization", "%", []catalog.MetricID{catalog.MetricUtilGPU, catalog.MetricUtilMemory}},
	{"power", "W", []catalog.MetricID{catalog.MetricPowerDraw, catalog.MetricPowerInstant}},
	{"SM clock", "MHz", []catalog.MetricID{catalog.MetricClockSM}},
	{"temperature", "°C", []catalog.MetricID{catalog.MetricTempGPU, catalog.MetricTempMemory}},
	{"memory used", "MiB", []catalog.MetricID{catalog.MetricMemoryUsed}},
}

// The report's colours, as bench/README.md documents them: run windows of
// A blue and of B orange, alternate steps in a darker band of the same
// colour; a panel's first line blue, its second red.
const (
	colorA       = "#1f77b4"
	colorB       = "#ff7f0e"
	shadeOpacity = 0.15
	stepOpacity  = 0.20 // drawn over the run's shade
)

var lineColors = []string{"#1f77b4", "#d62728"}

// The layout, in SVG user units (pixels at 96 dpi). Every panel shares the
// left edge and the time scale, so the panels' time axes line up; legends
// sit right of the plot area, never over a curve.
const (
	svgWidth    = 1000
	plotLeft    = 70  // y-axis labels to the left of it
	plotWidth   = 720 // the legend column starts after it
	panelTitleH = 22
	plotHeight  = 120
	panelAxisH  = 30 // x tick labels under each plot
	panelHeight = panelTitleH + plotHeight + panelAxisH
	svgTop      = 10
)

// svgScale maps data to a panel's plot area.
type svgScale struct {
	x0, x1, y0, y1 float64 // data ranges
	top            float64 // the plot area's top edge
}

func (s svgScale) x(v float64) float64 {
	return plotLeft + (v-s.x0)/(s.x1-s.x0)*plotWidth
}

func (s svgScale) y(v float64) float64 {
	return s.top + plotHeight - (v-s.y0)/(s.y1-s.y0)*plotHeight
}

// niceStep returns a 1, 2 or 5 × 10^k step that cuts span into about n
// intervals.
func niceStep(span float64, n int) float64 {
	if span <= 0 || math.IsNaN(span) || math.IsInf(span, 0) {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// yRange is a panel's value range: from 0 (or the minimum, when negative)
// to a whole tick above the maximum.
func yRange(lo, hi float64) (float64, float64) {
	if math.IsInf(lo, 1) { // no data
		return 0, 1
	}
	lo = min(lo, 0)
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep(hi-lo, 4)
	return math.Floor(lo/step) * step, math.Ceil(hi*1.02/step) * step
}

// svgPoint is one vertex of a drawn line.
type svgPoint struct{ x, y float64 }

// decimate keeps, for each pixel column, the first, lowest, highest and
// last point: the line looks the same (spikes stay) at a bounded size.
func decimate(pts []svgPoint) []svgPoint {
	if len(pts) <= 4*plotWidth {
		return pts
	}
	var out []svgPoint
	for i := 0; i < len(pts); {
		col := math.Floor(pts[i].x)
		j := i
		lo, hi := i, i
		for j < len(pts) && math.Floor(pts[j].x) == col {
			if pts[j].y < pts[lo].y {
				lo = j
			}
			if pts[j].y > pts[hi].y {
				hi = j
			}
			j++
		}
		keep := []int{i, lo, hi, j - 1}
		if lo > hi {
			keep[1], keep[2] = hi, lo
		}
		prev := -1
		for _, k := range keep {
			if k != prev {
				out = append(out, pts[k])
				prev = k
			}
		}
		i = j
	}
	return out
}

func fmtTick(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// WriteSVG writes a self-contained SVG report: for every GPU, utilization,
// power, SM clock, temperature and memory over time (seconds since the
// first run), with each run's window shaded (A blue, B orange) and its
// steps shaded in alternating darker bands. All panels share one time axis.
// It references no external resource (fonts are named, not fetched). It
// needs the raw samples of a live benchmark (ErrNoSamples otherwise).
func WriteSVG(w io.Writer, r *Result) error {
	if r.raw == nil {
		return ErrNoSamples
	}
	if len(r.Devices) == 0 {
		return fmt.Errorf("svg: no devices")
	}
	t0 := r.t0()
	sec := func(ns int64) float64 { return float64(ns-t0) / 1e9 }
	// One time range for every panel: the samples and the runs.
	x0, x1 := math.Inf(1), math.Inf(-1)
	for _, d := range r.Devices {
		for _, s := range r.raw[d.Index] {
			x0, x1 = min(x0, sec(s.TimeNS)), max(x1, sec(s.TimeNS))
		}
	}
	for _, b := range r.Benchmarks {
		for _, run := range b.Runs {
			x0, x1 = min(x0, sec(run.StartNS)), max(x1, sec(run.EndNS))
		}
	}
	if math.IsInf(x0, 0) {
		x0, x1 = 0, 1
	}
	if x1 <= x0 {
		x1 = x0 + 1
	}
	xStep := niceStep(x1-x0, 8)

	bw := bufio.NewWriter(w)
	ew := &errWriter{w: bw}
	height := svgTop + panelHeight*len(r.Devices)*len(panels) + 10
	ew.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	ew.printf(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	row := 0
	for _, d := range r.Devices {
		for _, pn := range panels {
			top := float64(svgTop + row*panelHeight + panelTitleH)
			row++
			writePanel(ew, r, d.Index, pn, top, x0, x1, xStep, sec)
		}
	}
	ew.printf("</svg>\n")
	if ew.err != nil {
		return ew.err
	}
	return bw.Flush()
}

func writePanel(ew *errWriter, r *Result, dev int, pn panel, top, x0, x1, xStep float64, sec func(int64) float64) {
	lines := make([][]svgPoint, len(pn.metrics))
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range r.raw[dev] {
		for mi, id := range pn.metrics {
			if s.Metric == id && !math.IsNaN(s.Value) {
				lines[mi] = append(lines[mi], svgPoint{sec(s.TimeNS), s.Value})
				lo, hi = min(lo, s.Value), max(hi, s.Value)
			}
		}
	}
	y0, y1 := yRange(lo, hi)
	if pn.unit == "%" && lo >= 0 && hi <= 100 {
		y0, y1 = 0, 100
	}
	sc := svgScale{x0: x0, x1: x1, y0: y0, y1: y1, top: top}
	title := fmt.Sprintf("GPU %d — %s [%s]", dev, pn.title, pn.unit)
	if math.IsInf(lo, 1) {
		title += " (not reported)"
	}
	ew.printf(`<g class="panel"><text x="%d" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n",
		plotLeft, top-7, html.EscapeString(title))
	ew.printf(`<rect x="%d" y="%.1f" width="%d" height="%d" fill="none" stroke="#888888" stroke-width="1"/>`+"\n",
		plotLeft, top, plotWidth, plotHeight)
	// Run windows and steps, behind everything else.
	for bi, b := range r.Benchmarks {
		c := colorA
		if bi == 1 {
			c = colorB
		}
		for _, run := range b.Runs {
			shade(ew, sc, sec(run.StartNS), sec(run.EndNS), c, shadeOpacity)
			for si, st := range run.Steps {
				if si%2 == 1 {
					shade(ew, sc, sec(st.StartNS), sec(st.EndNS), c, stepOpacity)
				}
			}
		}
	}
	// Grid and ticks.
	for v := math.Ceil(x0/xStep) * xStep; v <= x1+1e-9; v += xStep {
		x := sc.x(v)
		ew.printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0" stroke-width="1"/>`+"\n", x, top, x, top+plotHeight)
		ew.printf(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+plotHeight+14, fmtTick(v))
	}
	ew.printf(`<text x="%d" y="%.1f" text-anchor="end" fill="#555555">s since the first run</text>`+"\n",
		plotLeft+plotWidth, top+plotHeight+27)
	yStep := niceStep(y1-y0, 4)
	for v := y0; v <= y1+1e-9; v += yStep {
		y := sc.y(v)
		ew.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0" stroke-width="1"/>`+"\n", plotLeft, y, plotLeft+plotWidth, y)
		ew.printf(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotLeft-5, y+4, fmtTick(v))
	}
	// Curves, then the legend in its own column.
	ly := top + 12
	for mi, pts := range lines {
		if len(pts) == 0 {
			continue
		}
		c := lineColors[mi%len(lineColors)]
		px := make([]svgPoint, len(pts))
		for i, p := range pts {
			px[i] = svgPoint{sc.x(p.x), sc.y(p.y)}
		}
		ew.printf(`<polyline fill="none" stroke="%s" stroke-width="1.5" stroke-linejoin="round" points="`, c)
		for i, p := range decimate(px) {
			if i > 0 {
				ew.printf(" ")
			}
			ew.printf("%.1f,%.1f", p.x, p.y)
		}
		ew.printf(`"/>` + "\n")
		lx := plotLeft + plotWidth + 15
		ew.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, ly-4, lx+18, ly-4, c)
		ew.printf(`<text x="%d" y="%.1f">%s</text>`+"\n", lx+24, ly, html.EscapeString(r.metricCatalog().Name(pn.metrics[mi])))
		ly += 16
	}
	ew.printf("</g>\n")
}

func shade(ew *errWriter, sc svgScale, from, to float64, color string, opacity float64) {
	a, b := sc.x(max(from, sc.x0)), sc.x(min(to, sc.x1))
	if b <= a {
		return
	}
	ew.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" fill-opacity="%.2f"/>`+"\n",
		a, sc.top, b-a, plotHeight, color, opacity)
}

func (e *errWriter) printf(format string, args ...any) {
	fmt.Fprintf(e, format, args...)
}
