package bench

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/gpusampler/gpusampler/sampler"
)

// panel is one chart row of the report: metrics drawn as lines.
type panel struct {
	title   string
	unit    string
	metrics []sampler.MetricID
}

var panels = []panel{
	{"utilization", "%", []sampler.MetricID{sampler.MetricUtilGPU, sampler.MetricUtilMemory}},
	{"power", "W", []sampler.MetricID{sampler.MetricPowerDraw, sampler.MetricPowerInstant}},
	{"SM clock", "MHz", []sampler.MetricID{sampler.MetricClockSM}},
	{"temperature", "°C", []sampler.MetricID{sampler.MetricTempGPU, sampler.MetricTempMemory}},
	{"memory used", "MiB", []sampler.MetricID{sampler.MetricMemoryUsed}},
}

var lineColors = []color.Color{color.RGBA{31, 119, 180, 255}, color.RGBA{214, 39, 40, 255}}

// runShade is a plotter that shades run windows (A blue, B orange) and,
// inside them, alternate steps (darker bands), behind the lines.
type runShade struct {
	spans []shadeSpan
}

type shadeSpan struct {
	from, to float64
	c        color.Color
}

// Plot implements plot.Plotter.
func (s runShade) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, sp := range s.spans {
		x0, x1 := trX(max(sp.from, p.X.Min)), trX(min(sp.to, p.X.Max))
		if x1 <= x0 {
			continue
		}
		pts := []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}}
		c.FillPolygon(sp.c, c.ClipPolygonXY(pts))
	}
}

// WriteSVG writes a self-contained SVG report: for every GPU, utilization,
// power, SM clock, temperature and memory over time (seconds since the
// first run), with each run's window shaded (A blue, B orange) and its
// steps shaded in alternating bands. It references no external resource
// (fonts are named, not fetched). It needs the raw samples of a live
// benchmark (ErrNoSamples otherwise).
func WriteSVG(w io.Writer, r *Result) error {
	if r.raw == nil {
		return ErrNoSamples
	}
	t0 := r.t0()
	sec := func(ns int64) float64 { return float64(ns-t0) / 1e9 }
	var shade runShade
	for bi, b := range r.Benchmarks {
		base := color.RGBA{31, 119, 180, 40}
		step := color.RGBA{31, 119, 180, 45}
		if bi == 1 {
			base, step = color.RGBA{255, 127, 14, 40}, color.RGBA{255, 127, 14, 45}
		}
		for _, run := range b.Runs {
			shade.spans = append(shade.spans, shadeSpan{sec(run.StartNS), sec(run.EndNS), base})
			for si, st := range run.Steps {
				if si%2 == 1 {
					shade.spans = append(shade.spans, shadeSpan{sec(st.StartNS), sec(st.EndNS), step})
				}
			}
		}
	}
	var rows [][]*plot.Plot
	for _, d := range r.Devices {
		for _, pn := range panels {
			p := plot.New()
			p.Title.Text = fmt.Sprintf("GPU %d — %s", d.Index, pn.title)
			p.X.Label.Text = "s since the first run"
			p.Y.Label.Text = pn.unit
			p.Add(shade)
			any := false
			for mi, id := range pn.metrics {
				var xys plotter.XYs
				for _, s := range r.raw[d.Index] {
					if s.Metric == id {
						xys = append(xys, plotter.XY{X: sec(s.TimeNS), Y: s.Value})
					}
				}
				if len(xys) == 0 {
					continue
				}
				l, err := plotter.NewLine(xys)
				if err != nil {
					return fmt.Errorf("svg: %w", err)
				}
				l.Color = lineColors[mi%len(lineColors)]
				l.Width = vg.Points(1)
				p.Add(l)
				p.Legend.Add(sampler.DefaultCatalog.Name(id), l)
				any = true
			}
			if !any {
				p.Title.Text += " (not reported)"
			}
			p.Legend.Top = true
			rows = append(rows, []*plot.Plot{p})
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("svg: no devices")
	}
	const width, rowHeight = 10 * vg.Inch, 2.2 * vg.Inch
	cv := vgsvg.New(width, rowHeight*vg.Length(len(rows)))
	dc := draw.New(cv)
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadX: vg.Millimeter * 2, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}
	_, err := cv.WriteTo(w)
	return err
}
