package bench

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

func TestCollectorConformance(t *testing.T) {
	var last *Collector
	outputtest.Run(t, outputtest.Harness{
		New: func(t *testing.T) record.Output { last = NewCollector(nil); return last },
		Received: func(t *testing.T) []record.Sample {
			return last.Samples(outputtest.Device.Index, math.MinInt64, math.MaxInt64)
		},
	})
}

func TestSeriesIntegrateIsAdditive(t *testing.T) {
	s := series{{0, 100}, {1e8, 200}, {3e8, 150}, {7e8, 400}, {1e9, 100}}
	whole := s.integrate(5e7, 9e8)
	cuts := []int64{5e7, 12e7, 3e8, 31e7, 9e8}
	var sum float64
	for i := 1; i < len(cuts); i++ {
		sum += s.integrate(cuts[i-1], cuts[i])
	}
	if math.Abs(whole-sum) > 1e-9 {
		t.Fatalf("whole %v, sum of parts %v", whole, sum)
	}
	// Held beyond the ends: a constant 100 W for 1 s before the series.
	if got := s.integrate(-1e9, 0); math.Abs(got-100) > 1e-9 {
		t.Fatalf("held integral %v, want 100", got)
	}
	if got := s.at(5e7); got != 150 {
		t.Fatalf("at %v, want 150", got)
	}
	if !math.IsNaN(s.at(2e9)) {
		t.Fatal("at beyond the series should be NaN")
	}
}

func TestEnergyCounterVersusIntegrated(t *testing.T) {
	// 300 W constant; the counter updates every 100 ms.
	var samples []record.Sample
	for i := int64(0); i <= 40; i++ {
		tn := i * 5e7
		samples = append(samples, record.Sample{TimeNS: tn, Value: 300, Metric: catalog.MetricPowerInstant})
		samples = append(samples, record.Sample{TimeNS: tn, Value: float64(1e6 + (tn/1e8)*30000), Metric: catalog.MetricEnergy})
	}
	w := newDeviceWindow(catalog.Default(), samples)
	long := w.energyOver(2e8, 18e8) // 1.6 s
	if long.Source != "counter" || long.Coarse || math.Abs(float64(long.J)-480) > 40 || math.Abs(float64(long.IntegratedJ)-480) > 1e-6 {
		t.Fatalf("long window %+v", long)
	}
	short := w.energyOver(2e8, 3e8) // 100 ms: counter period is 100 ms
	if !short.Coarse || short.Source != "integrated_power" || math.Abs(float64(short.J)-30) > 1e-6 {
		t.Fatalf("short window %+v", short)
	}
}

func TestPercentileAndOutliers(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5}
	if p := Percentile(xs, 50); p != 3 {
		t.Fatalf("p50 %v", p)
	}
	if p := Percentile(xs, 5); math.Abs(p-1.2) > 1e-9 {
		t.Fatalf("p5 %v", p)
	}
	got := Outliers([]float64{1.00, 1.01, 0.99, 1.00, 1.02, 2.5})
	if len(got) != 1 || got[0] != 5 {
		t.Fatalf("outliers %v", got)
	}
	if got := Outliers([]float64{1, 1.001, 0.999, 1}); got != nil {
		t.Fatalf("near-identical runs flagged: %v", got)
	}
}

func TestParseMark(t *testing.T) {
	for _, tc := range []struct {
		line     string
		name     string
		ns       int64
		received bool
		bad      bool
	}{
		{"step 12 1732960000.123456", "step 12", 1732960000123456000, false, false},
		{`{"name":"eval","t":1732960001.5}`, "eval", 1732960001500000000, false, false},
		{"warmup", "warmup", 42, true, false},
		{`{"t":1}`, "", 0, false, true},
		{"{bad json", "", 0, false, true},
		{"   ", "", 0, false, true},
	} {
		m, err := ParseMark(tc.line, 42)
		if (err != nil) != tc.bad {
			t.Fatalf("%q: err %v", tc.line, err)
		}
		if tc.bad {
			continue
		}
		if m.Name != tc.name || m.TimeNS != tc.ns || m.Received != tc.received {
			t.Fatalf("%q: %+v", tc.line, m)
		}
	}
}

func TestMarkReaderGroupsPerRun(t *testing.T) {
	m, err := NewMarkReader()
	if err != nil {
		t.Skip("no FIFOs here:", err)
	}
	defer m.Close()
	write := func(s string) {
		f, err := os.OpenFile(m.Path(), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	write("stale 1700000000.0\n")
	m.Begin()
	write("a 1700000001.0\nb 1700000002.0\n")
	write("not a mark {\n")
	got, bad := m.End(5 * time.Second)
	if len(got) != 3 || got[0].Name != "a" || got[1].Name != "b" || bad != 0 {
		// "not a mark {" parses as a bare name (reception time).
		t.Fatalf("marks %+v bad %d", got, bad)
	}
	if !got[2].Received {
		t.Fatalf("a mark without a timestamp should be flagged: %+v", got[2])
	}
	m.Begin()
	if got, _ := m.End(5 * time.Second); len(got) != 0 {
		t.Fatalf("marks leaked into the next run: %+v", got)
	}
}

func runs(walls ...float64) *Benchmark {
	b := &Benchmark{}
	for i, w := range walls {
		b.Runs = append(b.Runs, Run{Index: i, WallS: Num(w), EnergyJ: Num(w * 100), PowerMeanW: 100})
	}
	return b
}

func TestCompareWords(t *testing.T) {
	a := runs(1.00, 1.02, 0.98, 1.01, 0.99)
	b := runs(0.85, 0.84, 0.86, 0.85, 0.85)
	a.Name, b.Name = "A", "B"
	c := Compare(a, b, CompareOptions{})
	if c.Verdict != VerdictFaster || !c.Significant || float64(c.Speedup) < 1.15 || float64(c.Speedup) > 1.2 {
		t.Fatalf("%+v", c)
	}
	if !strings.HasPrefix(c.Summary, "B is 15 % faster than A: 1.18× as fast") || !strings.Contains(c.Summary, "Energy: B uses 15 % less") {
		t.Fatalf("summary %q", c.Summary)
	}
	if c.SlowerBy() > 0 {
		t.Fatalf("slower by %v", c.SlowerBy())
	}
	slow := Compare(b, a, CompareOptions{})
	if slow.Verdict != VerdictSlower || !strings.Contains(slow.Summary, "slower") || slow.SlowerBy() < 15 {
		t.Fatalf("%+v", slow)
	}
}

func TestReadResultRejectsMalformed(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"not json", "invalid JSON"},
		{`{"schema":"other","schema_version":1}`, "schema"},
		{`{"schema":"gpusampler.bench","schema_version":99,"benchmarks":[{}]}`, "schema_version 99"},
		{`{"schema":"gpusampler.bench","schema_version":1,"benchmarks":[]}`, "no benchmarks"},
		{`{"schema":"gpusampler.bench","schema_version":1,"benchmarks":[{"name":"A","runs":[{"wall_s":"x"}]}]}`, "not a number"},
	} {
		_, err := ReadResult(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestNumJSONRoundTrip(t *testing.T) {
	r := &Result{Schema: Schema, SchemaVersion: SchemaVersion,
		Benchmarks: []Benchmark{{Name: "A", Runs: []Run{{WallS: 1.5, EnergyJ: Num(math.NaN())}}}}}
	var b strings.Builder
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"energy_j": null`) {
		t.Fatalf("NaN not written as null:\n%s", b.String())
	}
	back, err := ReadResult(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if back.Benchmarks[0].Runs[0].WallS != 1.5 || back.Benchmarks[0].Runs[0].EnergyJ.Known() {
		t.Fatalf("%+v", back.Benchmarks[0].Runs[0])
	}
}

// The verdicts are pinned on fixed, synthetic wall times: no test depends on
// how fast this machine runs anything. Each summary is compared whole; its
// numbers are checked against an independent computation in
// TestStatisticsAgainstReference. (runs gives every run energy = 100 × wall
// time, so the energy ratio is the time ratio.)
func TestCompareVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a, b   []float64
		paired bool
		want   string
	}{
		// The case a reader was once told "the same within noise (4.33 ± 5.79×)".
		{"disjoint ranges, two runs", []float64{0.424, 0.517}, []float64{0.105, 0.113}, false,
			"B is 77 % faster than A: 4.30× as fast (time B/A 0.233, 95% interval 0.102–0.532; Welch's t-test on log wall times, unpaired (runs not interleaved), 2 runs each: p = 0.024). Energy: B uses 77 % less (energy B/A 0.233, 95% interval 0.102–0.532)"},
		// sleep 0.1 against sleep 0.4, two runs each, on a quiet machine.
		{"two tight runs", []float64{0.102, 0.101}, []float64{0.407, 0.403}, false,
			"B is 299 % slower than A (time B/A 3.990, 95% interval 3.872–4.112; Welch's t-test on log wall times, unpaired (runs not interleaved), 2 runs each: p < 0.001). Energy: B uses 299 % more (energy B/A 3.990, 95% interval 3.872–4.112)"},
		// The same with ten runs each on a loaded machine.
		{"ten noisy runs", []float64{0.103, 0.131, 0.108, 0.187, 0.112, 0.104, 0.151, 0.109, 0.122, 0.106},
			[]float64{0.405, 0.433, 0.412, 0.498, 0.407, 0.451, 0.409, 0.404, 0.428, 0.415}, true,
			"B is 251 % slower than A (time B/A 3.514, 95% interval 3.136–3.937; paired t-test on the log time ratios of 10 interleaved A/B pairs: p < 0.001). Energy: B uses 251 % more (energy B/A 3.514, 95% interval 3.136–3.937)"},
		{"faster", []float64{1.00, 1.02, 0.98, 1.01, 0.99}, []float64{0.85, 0.84, 0.86, 0.85, 0.85}, false,
			"B is 15 % faster than A: 1.18× as fast (time B/A 0.850, 95% interval 0.834–0.867; Welch's t-test on log wall times, unpaired (runs not interleaved), 5 runs each: p < 0.001). Energy: B uses 15 % less (energy B/A 0.850, 95% interval 0.834–0.867)"},
		{"slower, paired", []float64{0.85, 0.84, 0.86, 0.85, 0.85}, []float64{1.00, 1.02, 0.98, 1.01, 0.99}, true,
			"B is 18 % slower than A (time B/A 1.176, 95% interval 1.142–1.211; paired t-test on the log time ratios of 5 interleaved A/B pairs: p < 0.001). Energy: B uses 18 % more (energy B/A 1.176, 95% interval 1.142–1.211)"},
		{"8% slower, pair noise shared", fixtureA, scaled(1.08, nil), true,
			"B is 8.0 % slower than A (time B/A 1.080, 95% interval 1.080–1.080; paired t-test on the log time ratios of 10 interleaved A/B pairs: p < 0.001). Energy: B uses 8.0 % more (energy B/A 1.080, 95% interval 1.080–1.080)"},
		{"8% slower, unpaired", fixtureA, scaled(1.08, nil), false,
			"no difference detected between B and A; the interval cannot rule out ±19 % (time B/A 1.080, 95% interval 0.982–1.188; Welch's t-test on log wall times, unpaired (runs not interleaved), 10 runs each: p = 0.108; margin ±1.0 %, the default: what these runs resolve (14 %), at most 1 %; --same-within sets it); about 29 runs each would settle it at the observed spread. Energy: no difference detected; the interval cannot rule out ±19 % (energy B/A 1.080, 95% interval 0.982–1.188)"},
		{"2% slower, 0.5% pair noise", fixtureA, scaled(1.02, fixtureE), true,
			"B is 2.0 % slower than A (time B/A 1.020, 95% interval 1.016–1.024; paired t-test on the log time ratios of 10 interleaved A/B pairs: p < 0.001). Energy: B uses 2.0 % more (energy B/A 1.020, 95% interval 1.016–1.024)"},
		{"true null", fixtureA, scaled(1, fixtureE), true,
			"B and A take the same time within ±0.51 % (time B/A 1.000, 95% interval 0.996–1.004; paired t-test on the log time ratios of 10 interleaved A/B pairs: p = 0.994; margin ±0.51 %, the default: what these runs resolve (0.51 %), at most 1 %; --same-within sets it). Energy: the same within ±0.51 % (energy B/A 1.000, 95% interval 0.996–1.004)"},
		{"wide and overlapping", []float64{1, 3, 2}, []float64{1.5, 2.5, 4}, false,
			"no difference detected between B and A; the interval cannot rule out ±348 % (time B/A 1.357, 95% interval 0.411–4.485; Welch's t-test on log wall times, unpaired (runs not interleaved), 3 runs each: p = 0.515; margin ±1.0 %, the default: what these runs resolve (395 %), at most 1 %; --same-within sets it); about 48 runs each would settle it at the observed spread. Energy: no difference detected; the interval cannot rule out ±348 % (energy B/A 1.357, 95% interval 0.411–4.485)"},
		// Every run of B beat every run of A, yet the test cannot
		// conclude: never the same.
		{"disjoint, inconclusive", []float64{0.3, 0.6}, []float64{0.1, 0.28}, false,
			"no difference detected between B and A, although every run of B was faster than every run of A; the interval cannot rule out ±747 % (time B/A 0.394, 95% interval 0.018–8.473; Welch's t-test on log wall times, unpaired (runs not interleaved), 2 runs each: p = 0.289; margin ±1.0 %, the default: what these runs resolve (4148 %), at most 1 %; --same-within sets it); about 9 runs each would settle it at the observed spread. Energy: no difference detected; the interval cannot rule out ±747 % (energy B/A 0.394, 95% interval 0.018–8.473)"},
		{"one run", []float64{1}, []float64{2}, true,
			"B takes 2.00× A's time, but one run per side is too few to conclude (at least 2 each, more for a verdict). Energy: B uses 2.00× A's energy"},
	} {
		a, b := runs(tc.a...), runs(tc.b...)
		a.Name, b.Name = "A", "B"
		if c := Compare(a, b, CompareOptions{Paired: tc.paired}); c.Summary != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, c.Summary, tc.want)
		}
	}
}

// Runs are numbered from 1 everywhere; an outlier says why where a reason is
// known; a coarse energy counter is one warning per GPU, not one per run.
func TestRunNumbersOutlierReasonsCoarseOnce(t *testing.T) {
	b := &Benchmark{Name: "A"}
	for i := range 10 {
		wall := 1.0 + float64(i%3)*0.001
		rd := RunDevice{Index: 0, TempPeakC: 60, Energy: Energy{Coarse: true, CounterUpdateMS: 100}}
		if i == 6 {
			wall = 1.5 // a slow run: it throttled and ran hot
			rd.TempPeakC = 75
			rd.ThrottleMS = map[string]Num{"sw_thermal_slowdown": 420}
		}
		b.Runs = append(b.Runs, Run{Index: i + 1, WallS: Num(wall), Devices: []RunDevice{rd}})
	}
	summarize(b)
	if !slices.Equal(b.Summary.Outliers, []int{7}) || !b.Runs[6].Outlier {
		t.Fatalf("outliers %v", b.Summary.Outliers)
	}
	if r := b.Runs[6].OutlierReason; !strings.Contains(r, "sw_thermal_slowdown 420 ms") || !strings.Contains(r, "peak 75 °C against a median of 60 °C") {
		t.Fatalf("reason %q", r)
	}
	w := coarseEnergyWarnings([]Benchmark{*b})
	if want := []string{"GPU 0: energy counter updates every 100 ms, too coarse for all 10 runs (up to 1.500 s): integrated power used"}; !slices.Equal(w, want) {
		t.Fatalf("coarse warnings %q, want %q", w, want)
	}
	// In an A/B, still one warning per GPU, naming both sides.
	other := Benchmark{Name: "B", Runs: slices.Clone(b.Runs[:2])}
	w = coarseEnergyWarnings([]Benchmark{*b, other})
	if want := []string{"GPU 0: energy counter updates every 100 ms, too coarse for all 10 runs of A and all 2 runs of B (up to 1.500 s): integrated power used"}; !slices.Equal(w, want) {
		t.Fatalf("A/B coarse warnings %q, want %q", w, want)
	}
	var sb strings.Builder
	r := &Result{Schema: Schema, SchemaVersion: SchemaVersion, Benchmarks: []Benchmark{*b}}
	if err := WriteTable(&sb, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "outliers (beyond 1.5 IQR): run 7 (GPU 0 clocks throttled") {
		t.Fatalf("table:\n%s", sb.String())
	}
	// A foreign process on the GPU during the slow run is its reason.
	busy := &Benchmark{}
	for i := range 6 {
		busy.Runs = append(busy.Runs, Run{Index: i + 1, WallS: 1})
	}
	busy.Runs[3].WallS = 1.4
	busy.Runs[3].others = []string{"pid 1234 python3 on GPU 0"}
	summarize(busy)
	if want := "another process used the GPU (pid 1234 python3 on GPU 0)"; busy.Runs[3].OutlierReason != want {
		t.Fatalf("foreign-process reason %q, want %q", busy.Runs[3].OutlierReason, want)
	}
	// A first run that is slow for no known reason is called a warm-up.
	first := &Benchmark{Runs: []Run{{Index: 1, WallS: 2}, {Index: 2, WallS: 1}, {Index: 3, WallS: 1.001}, {Index: 4, WallS: 1.002}, {Index: 5, WallS: 1}}}
	summarize(first)
	if !strings.Contains(first.Runs[0].OutlierReason, "warm-up") {
		t.Fatalf("first run reason %q", first.Runs[0].OutlierReason)
	}
}

// Version 1 files numbered runs from 0; they read as numbered from 1.
func TestReadResultV1Renumbers(t *testing.T) {
	in := `{"schema":"gpusampler.bench","schema_version":1,"benchmarks":[{"name":"A","runs":[{"index":0,"wall_s":1},{"index":1,"wall_s":2}],
		"summary":{"outliers":[1]},"diagnoses":[{"kind":"thermal","runs":[0,1]}]}]}`
	r, err := ReadResult(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	b := r.Benchmarks[0]
	if b.Runs[0].Index != 1 || b.Runs[1].Index != 2 || !slices.Equal(b.Summary.Outliers, []int{2}) || !slices.Equal(b.Diagnoses[0].Runs, []int{1, 2}) {
		t.Fatalf("%+v", b)
	}
}
