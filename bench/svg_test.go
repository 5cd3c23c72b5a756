package bench

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// svgLevel is one drawn line of the fixture: value before before step at s
// seconds since the first run, after after it.
type svgLevel struct {
	metric        catalog.MetricID
	before, after float64
	at            float64
}

// svgFixture is a result whose drawing is known, on two GPUs. Times are
// seconds since the first run (t0 + 1 s): samples every 10 ms over -2..8 s;
// run A over 0–2.3 s in two steps (0–1.2, 1.2–2.3), run B over 4.3–6.7 s.
// Every panel has a curve that steps between the runs (on white), at 3.0 s
// on GPU 0 and 3.6 s on GPU 1; temperature and memory utilization are a
// panel's second (red) line.
func svgFixture() (*Result, map[int][]svgLevel) {
	const s = int64(1e9)
	t0 := int64(1_700_000_000) * s
	at := func(sec float64) int64 { return t0 + s + int64(sec*1e9) }
	r := &Result{Devices: []DeviceInfo{{Index: 0}, {Index: 1}}}
	r.Benchmarks = []Benchmark{
		{Name: "A", Runs: []Run{{StartNS: at(0), EndNS: at(2.3),
			Steps: []Step{{Name: "one", StartNS: at(0), EndNS: at(1.2)}, {Name: "two", StartNS: at(1.2), EndNS: at(2.3)}}}}},
		{Name: "B", Runs: []Run{{StartNS: at(4.3), EndNS: at(6.7)}}},
	}
	levels := map[int][]svgLevel{}
	r.raw = map[int][]record.Sample{}
	for dev, step := range map[int]float64{0: 3.0, 1: 3.6} {
		levels[dev] = []svgLevel{
			{catalog.MetricUtilGPU, 20, 80, step},
			{catalog.MetricUtilMemory, 50, 50, step},
			{catalog.MetricPowerDraw, 300, 500, step},
			{catalog.MetricClockSM, 1400, 1800, step},
			{catalog.MetricTempGPU, 40, 60, step},
			{catalog.MetricTempMemory, 70, 70, step},
			{catalog.MetricMemoryUsed, 1000, 3000, step},
		}
		for i := int64(0); i <= 1000; i++ {
			sec := -2 + float64(i)/100
			for _, l := range levels[dev] {
				v := l.before
				if sec >= l.at {
					v = l.after
				}
				r.raw[dev] = append(r.raw[dev], record.Sample{TimeNS: at(sec), Metric: l.metric, Value: v})
			}
		}
	}
	return r, levels
}

// blend is the colour of hex drawn at opacity over bg.
func blend(bg [3]float64, hex string, opacity float64) [3]float64 {
	c, _ := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	rgb := [3]float64{float64(c >> 16 & 0xff), float64(c >> 8 & 0xff), float64(c & 0xff)}
	for i := range bg {
		bg[i] = bg[i]*(1-opacity) + rgb[i]*opacity
	}
	return bg
}

// The SVG is rendered to pixels (rsvg-convert, Debian's librsvg2-bin) and
// checked where the data says things are, in every panel of both GPUs: run
// shading in the documented colours (bench/README.md) with its edges at the
// runs' times, in the same pixel column in every panel (the time axes line
// up); each curve at its value before and after its step, at the step's
// time; legends right of the plots, and no text inside one.
func TestSVGPixels(t *testing.T) {
	conv, err := exec.LookPath("rsvg-convert")
	if err != nil {
		t.Skip("rsvg-convert not installed (Debian: librsvg2-bin)")
	}
	res, levels := svgFixture()
	var buf bytes.Buffer
	if err := WriteSVG(&buf, res); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "r.svg"), filepath.Join(dir, "r.png")
	if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(conv, "-f", "png", "-o", out, in).CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert: %v\n%s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	rgb := func(x, y float64) [3]float64 {
		R, G, B, _ := img.At(int(x), int(y)).RGBA()
		return [3]float64{float64(R >> 8), float64(G >> 8), float64(B >> 8)}
	}
	close := func(got, want [3]float64, tol float64) bool {
		for i := range got {
			if math.Abs(got[i]-want[i]) > tol {
				return false
			}
		}
		return true
	}
	white := [3]float64{255, 255, 255}
	shadeA := blend(white, "#1f77b4", 0.15)
	stepA := blend(shadeA, "#1f77b4", 0.20)
	shadeB := blend(white, "#ff7f0e", 0.15)
	blue, red := [3]float64{0x1f, 0x77, 0xb4}, [3]float64{0xd6, 0x27, 0x28}
	// The x scale the data implies: samples span -2..8 s.
	xs := svgScale{x0: -2, x1: 8}
	bLeft := -1
	for g := range 2 {
		for p, pn := range panels {
			name := "GPU " + strconv.Itoa(g) + " " + pn.title
			top := float64(svgTop + (g*len(panels)+p)*panelHeight + panelTitleH)
			below := top + plotHeight - 3 // near the bottom, under every curve
			// Shading in the documented colours: A, its second step in a
			// darker band of A's colour, B; white between the runs.
			for _, c := range []struct {
				sec  float64
				want [3]float64
				what string
			}{{0.6, shadeA, "run A (#1f77b4 at 15%)"}, {1.8, stepA, "run A's second step (#1f77b4 at 15% + 20%)"},
				{5.5, shadeB, "run B (#ff7f0e at 15%)"}, {3.3, white, "between the runs"}} {
				if got := rgb(xs.x(c.sec), below); !close(got, c.want, 4) {
					t.Errorf("%s: at %.1f s %v, want %s %v", name, c.sec, got, c.what, c.want)
				}
			}
			// B's left edge: the first column in its colour, the same in
			// every panel, where 4.3 s falls.
			edge := -1
			for x := int(xs.x(3.5)); x < int(xs.x(5)); x++ {
				if close(rgb(float64(x), below), shadeB, 4) {
					edge = x
					break
				}
			}
			if math.Abs(float64(edge)-xs.x(4.3)) > 1.5 {
				t.Errorf("%s: run B's shading starts at x %d, want %.1f (4.3 s)", name, edge, xs.x(4.3))
			}
			if bLeft < 0 {
				bLeft = edge
			} else if edge != bLeft {
				t.Errorf("%s: run B's shading starts at x %d, %d in the first panel: time axes not aligned", name, edge, bLeft)
			}
			// Curves: each of the panel's metrics at its level before and
			// after its step, in its colour, and nothing 6 px off it.
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, l := range levels[g] {
				for _, id := range pn.metrics {
					if l.metric == id {
						lo, hi = min(lo, l.before, l.after), max(hi, l.before, l.after)
					}
				}
			}
			y0, y1 := yRange(lo, hi)
			if pn.unit == "%" {
				y0, y1 = 0, 100
			}
			sc := svgScale{x0: -2, x1: 8, y0: y0, y1: y1, top: top}
			for mi, id := range pn.metrics {
				for _, l := range levels[g] {
					if l.metric != id {
						continue
					}
					col := []string{"blue", "red"}[mi]
					want := [][3]float64{blue, red}[mi]
					for _, c := range []struct{ sec, v float64 }{{l.at - 0.25, l.before}, {l.at + 0.25, l.after}} {
						if got := rgb(sc.x(c.sec), sc.y(c.v)); !close(got, want, 60) {
							t.Errorf("%s: %s at %.2f s: no %s curve at %v (y %.0f): %v", name, res.metricCatalog().Name(id), c.sec, col, c.v, sc.y(c.v), got)
						}
						if l.before != l.after && !close(rgb(sc.x(c.sec), sc.y(l.before+l.after-c.v)), white, 30) {
							t.Errorf("%s: %s at %.2f s: drawn at %v, the other side of its step", name, res.metricCatalog().Name(id), c.sec, l.before+l.after-c.v)
						}
					}
				}
			}
			// The legend's first swatch right of the plot, blue.
			if got := rgb(plotLeft+plotWidth+24, top+8); !close(got, blue, 60) {
				t.Errorf("%s: no legend swatch right of the plot: %v", name, got)
			}
		}
	}
	// No text inside a plot area: legends, titles and tick labels sit
	// outside.
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	var plots []image.Rectangle
	type text struct {
		x, y float64
		s    string
	}
	var texts []text
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		a := map[string]float64{}
		for _, at := range se.Attr {
			a[at.Name.Local], _ = strconv.ParseFloat(at.Value, 64)
		}
		switch se.Name.Local {
		case "rect":
			if a["width"] == plotWidth && a["height"] == plotHeight {
				plots = append(plots, image.Rect(int(a["x"]), int(a["y"]), int(a["x"]+a["width"]), int(a["y"]+a["height"])))
			}
		case "text":
			var s string
			dec.DecodeElement(&s, &se)
			texts = append(texts, text{a["x"], a["y"], s})
		}
	}
	if len(plots) != 2*len(panels) {
		t.Fatalf("%d plot areas, want %d", len(plots), 2*len(panels))
	}
	for _, tx := range texts {
		for _, p := range plots {
			if (image.Point{int(tx.x), int(tx.y)}).In(p) {
				t.Errorf("text %q at (%.0f, %.0f) inside the plot area %v", tx.s, tx.x, tx.y, p)
			}
		}
	}
	if !strings.Contains(buf.String(), ">utilization_gpu</text>") {
		t.Error("legend lacks the metric name")
	}
}
