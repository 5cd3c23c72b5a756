package bench

import (
	"bytes"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// svgFixture is a result whose drawing is known: utilization at 50 % and
// power at 300 W from 0 to 10 s, run A over 1–3 s (two steps), run B over
// 5–7 s.
func svgFixture() *Result {
	const s = int64(1e9)
	t0 := int64(1_700_000_000) * s
	r := &Result{Devices: []DeviceInfo{{Index: 0}}}
	r.Benchmarks = []Benchmark{
		{Name: "A", Runs: []Run{{StartNS: t0 + 1*s, EndNS: t0 + 3*s,
			Steps: []Step{{Name: "one", StartNS: t0 + 1*s, EndNS: t0 + 2*s}, {Name: "two", StartNS: t0 + 2*s, EndNS: t0 + 3*s}}}}},
		{Name: "B", Runs: []Run{{StartNS: t0 + 5*s, EndNS: t0 + 7*s}}},
	}
	var raw []record.Sample
	for i := int64(0); i <= 1000; i++ {
		ts := t0 - 1*s + i*s/100 // t0-1 s .. t0+9 s
		raw = append(raw, record.Sample{TimeNS: ts, Metric: catalog.MetricUtilGPU, Value: 50},
			record.Sample{TimeNS: ts, Metric: catalog.MetricPowerDraw, Value: 300})
	}
	r.raw = map[int][]record.Sample{0: raw}
	return r
}

// The SVG is rendered to pixels (rsvg-convert, Debian's librsvg2-bin) and
// checked where the data says things are: run shading in the documented
// colours at the runs' times in every panel, the curves at their values,
// and no legend over the plot.
func TestSVGPixels(t *testing.T) {
	conv, err := exec.LookPath("rsvg-convert")
	if err != nil {
		t.Skip("rsvg-convert not installed (Debian: librsvg2-bin)")
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, svgFixture()); err != nil {
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
	rgb := func(x, y float64) (r, g, b int) {
		c := img.At(int(x), int(y))
		R, G, B, _ := c.RGBA()
		return int(R >> 8), int(G >> 8), int(B >> 8)
	}
	// Times are seconds since the first run (t0 + 1 s): samples span -2..8 s.
	for p, pn := range []struct {
		name  string
		value float64
		y0    float64
		y1    float64
	}{{"utilization", 50, 0, 100}, {"power", 300, 0, 400}} {
		top := float64(svgTop + p*panelHeight + panelTitleH)
		sc := svgScale{x0: -2, x1: 8, y0: pn.y0, y1: pn.y1, top: top}
		below := top + plotHeight - 8 // near the bottom, away from curve and grid
		// Run A, first step: blue shade.
		if r, g, b := rgb(sc.x(0.5), below); !(b > r+15 && r < 235 && g < 245) {
			t.Errorf("%s: run A's window at 0.5 s is (%d,%d,%d), want a light blue", pn.name, r, g, b)
		}
		// Run A, second step: a darker blue band.
		ra, _, _ := rgb(sc.x(0.5), below)
		if r, _, b := rgb(sc.x(1.5), below); !(b > r+30 && r < ra-20) {
			t.Errorf("%s: run A's second step at 1.5 s is red %d (first step %d), want a darker blue band", pn.name, r, ra)
		}
		// Run B: orange shade.
		if r, g, b := rgb(sc.x(5), below); !(r > b+20 && g < 245) {
			t.Errorf("%s: run B's window at 5 s is (%d,%d,%d), want a light orange", pn.name, r, g, b)
		}
		// Between the runs: white.
		if r, g, b := rgb(sc.x(3.5), below); r < 245 || g < 245 || b < 245 {
			t.Errorf("%s: between runs at 3.5 s is (%d,%d,%d), want white", pn.name, r, g, b)
		}
		// The curve at its value, blue, and nothing a few pixels off it.
		if r, _, b := rgb(sc.x(3.5), sc.y(pn.value)); !(b > r+60) {
			t.Errorf("%s: no curve at %v (y %.0f): (%d,%d,%d)", pn.name, pn.value, sc.y(pn.value), r, 0, b)
		}
		if r, g, b := rgb(sc.x(3.5), sc.y(pn.value)+6); r < 240 || g < 240 || b < 240 {
			t.Errorf("%s: something drawn 6 px below the curve: (%d,%d,%d)", pn.name, r, g, b)
		}
		// The plot's top-right corner, where a legend used to cover the
		// curves, is empty: legends sit right of the plot.
		if r, g, b := rgb(plotLeft+plotWidth-30, top+6); r < 240 || g < 240 || b < 240 {
			t.Errorf("%s: something drawn in the plot's top-right corner: (%d,%d,%d)", pn.name, r, g, b)
		}
		if r, _, b := rgb(plotLeft+plotWidth+24, top+8); !(b > r+60) {
			t.Errorf("%s: no legend swatch right of the plot: (%d,%d,%d)", pn.name, r, 0, b)
		}
	}
	if !strings.Contains(buf.String(), "utilization_gpu") {
		t.Error("legend lacks the metric name")
	}
}
