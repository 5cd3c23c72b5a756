// Command gpucheck validates the NVML backend against a real NVIDIA driver
// under a torch matrix-multiply load and idle, and writes a short report:
// every catalog metric read once (the nvidia_smi drop-in's reads beside
// nvidia-smi), the sample buffers drained from cursor 0 idle and after the
// load (real periods, zero-valued samples), then three phases — load
// (sampling beside nvidia-smi, cost, gaps), throughput (with and without
// sampling, ABBA windows analysed as pairs) and idle. A phase whose load
// cannot start is reported as not run, and nothing is measured under its
// name. scripts/gpu-check.sh runs it; it never changes the GPU's settings.
// Exit status: 0 all checks passed, 1 a check failed, 2 it could not run.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/bench"
	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/doctor"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/nvml"
)

type report struct {
	Kernel, Driver, NVML string
	Devices              []record.Device
	// Phases says which phases ran: a phase whose load could not start is
	// "not run", and nothing is measured under its name.
	Phases []phase
	// Probes are the buffers drained from cursor 0 at the start (idle);
	// LoadProbes right after the load phase (its samples still in them).
	Probes, LoadProbes map[int][]probe
	// Reads are every catalog metric read once per GPU (fields, queries,
	// point reads standing in for buffers, GPM), summarized; SMIReads the
	// drop-in's reads beside nvidia-smi's.
	Reads             []string
	SMIReads          []smiRead
	Unsupported       []string // "unsupported here", not failures
	Failures          []string
	Notes             []string
	SamplesPerCall    float64
	CallsPerSecPerGPU float64
	LatencyP50, P99   time.Duration
	Comparisons       []comparison
	Gaps, Duplicates  map[string]int
	Losses            uint64
	Throughput        *abResult
	Stats             []sampler.DeviceStats
}

type probe struct {
	Buffer, Clock     string
	Supported, Empty  bool
	Depth, Duplicates int
	Period, Span      time.Duration
	// Zeros counts the samples whose value was 0 (an idle media engine's
	// buffer: empty, or full of zeros?).
	Zeros int
}

// phase is one phase of the check and whether it ran.
type phase struct {
	Name string
	Ran  bool
	// Why it did not run, or ended early.
	Why string
}

// smiRead is one of our reads beside nvidia-smi's value for it.
type smiRead struct {
	Device           int
	Ours, SMI        string // metric (or identity field) and nvidia-smi field
	OurValue, SMIVal string
	OK               bool
}

type comparison struct {
	Phase, Metric, SMI string
	Device             int
	SMIValue           float64
	OursMin, OursMax   float64
	Tolerance          float64
	OK                 bool
}

type abResult struct {
	Runs                  int
	OnMean, OffMean       float64 // TFLOP/s
	SlowdownPct, CI95Pct  float64
	OnSamples, OffSamples []float64
}

func main() {
	out := flag.String("out", os.Getenv("OUT"), "report directory (default $OUT or ./gpu-check-report)")
	load := flag.String("load", "python3 scripts/gpu-check-load.py", "load command (protocol: see scripts/gpu-check-load.py)")
	lib := flag.String("lib", "", "NVML library path (default libnvidia-ml.so.1)")
	pairs := flag.Int("pairs", 12, "A/B window pairs (sampling on/off)")
	window := flag.Duration("window", 2*time.Second, "A/B window length")
	loaded := flag.Duration("loaded", 20*time.Second, "sampling under continuous load")
	idle := flag.Duration("idle", 10*time.Second, "sampling idle")
	flag.Parse()
	if *out == "" {
		*out = "gpu-check-report"
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		os.Exit(2)
	}
	r := &report{Probes: map[int][]probe{}, LoadProbes: map[int][]probe{}, Gaps: map[string]int{}, Duplicates: map[string]int{}}
	code := run(r, log, *lib, *load, *pairs, *window, *loaded, *idle)
	if err := write(r, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck: write report:", err)
		code = 2
	}
	if code == 0 && len(r.Failures) > 0 {
		code = 1
	}
	fmt.Printf("gpucheck: %d failures, %d unsupported here; report %s\n", len(r.Failures), len(r.Unsupported), filepath.Join(*out, "report.md"))
	os.Exit(code)
}

// latencies collects every NVML call's latency (Options.CallHook).
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(_ string, d time.Duration) { l.mu.Lock(); l.d = append(l.d, d); l.mu.Unlock() }

func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// recorder is an in-process output keeping every sample, tagged by phase.
type recorder struct {
	mu      sync.Mutex
	samples []record.Sample
}

func (r *recorder) Write(_ context.Context, b *record.Batch) error {
	r.mu.Lock()
	r.samples = append(r.samples, b.Samples...)
	r.mu.Unlock()
	return nil
}
func (r *recorder) Close() error { return nil }

func (r *recorder) window(dev int, m catalog.MetricID, from, to int64) (lo, hi float64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range r.samples {
		if int(s.Device) == dev && s.Metric == m && s.TimeNS >= from && s.TimeNS <= to {
			lo, hi, n = math.Min(lo, s.Value), math.Max(hi, s.Value), n+1
		}
	}
	return lo, hi, n
}

type keepOpen struct{ sampler.Source }

func (keepOpen) Close() error { return nil }

// sampling runs an engine until stopped.
type sampling struct {
	cancel context.CancelFunc
	done   chan struct{}
	eng    *sampler.Engine
}

func startSampling(src sampler.Source, cat *catalog.Catalog, rec *recorder, log *slog.Logger) (*sampling, error) {
	eng, err := sampler.New(keepOpen{src}, sampler.Config{Logger: log, Catalog: cat})
	if err != nil {
		return nil, err
	}
	if err := eng.AddOutput("record", rec, sampler.PumpOptions{}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampling{cancel: cancel, done: make(chan struct{}), eng: eng}
	go func() { defer close(s.done); eng.Run(ctx) }()
	return s, nil
}

func (s *sampling) stop() sampler.Stats { s.cancel(); <-s.done; return s.eng.Stats() }

func run(r *report, log *slog.Logger, lib, loadCmd string, pairs int, window, loaded, idle time.Duration) int {
	if b, err := exec.Command("uname", "-r").Output(); err == nil {
		r.Kernel = strings.TrimSpace(string(b))
	}
	lat := &latencies{}
	s, err := nvml.Open(nvml.Options{LibraryPath: lib, Logger: log, CallHook: lat.add})
	if err != nil {
		r.Failures = append(r.Failures, "open nvml: "+err.Error())
		return 2
	}
	src := s.(*nvml.Source)
	defer src.Close()
	r.Driver, r.NVML = src.Versions()
	devs, err := src.Devices()
	if err != nil {
		r.Failures = append(r.Failures, "devices: "+err.Error())
		return 2
	}
	cat := catalog.Default() // the one catalog every check below names metrics by
	// Every metric of the catalog, buffer metrics included: a buffer
	// metric read on its own is the point read that stands in for a buffer
	// the device lacks (or a dry one).
	var ids []catalog.MetricID
	for _, m := range cat.All() {
		ids = append(ids, m.ID)
	}
	for _, d := range devs {
		id, err := d.Identity()
		if err != nil {
			r.Failures = append(r.Failures, "identity: "+err.Error())
			continue
		}
		r.Devices = append(r.Devices, id)
		r.Probes[id.Index] = probeBuffers(r, d, cat, id.Index)
		values := readAll(r, cat, d, id.Index, ids)
		compareSMIReads(r, cat, id, values)
		checkGPM(r, cat, d, id.Index)
		checkProcesses(r, d, id.Index, "before load", 0)
		checkEvents(r, d, id.Index, time.Second)
	}
	if len(r.Devices) == 0 {
		return 2
	}

	rec := &recorder{}
	ld, err := startLoad(loadCmd)
	if err != nil {
		// Nothing runs under the load's name on an idle GPU.
		why := "the load could not start: " + err.Error()
		r.Phases = append(r.Phases, phase{Name: "load", Why: why}, phase{Name: "throughput", Why: why})
		r.Unsupported = append(r.Unsupported, "load phases not run: "+why)
	} else {
		loadPhase(r, src, cat, devs, ld, rec, log, loaded)
		throughputPhase(r, src, cat, ld, log, pairs, window)
	}
	// Phase 3: idle.
	rec.mu.Lock()
	rec.samples = rec.samples[:0]
	rec.mu.Unlock()
	samp, err := startSampling(src, cat, rec, log)
	r.Phases = append(r.Phases, phase{Name: "idle", Ran: err == nil})
	if err != nil {
		r.Phases[len(r.Phases)-1].Why = "start sampling: " + err.Error()
		r.Failures = append(r.Failures, "start sampling idle: "+err.Error())
	} else {
		time.Sleep(idle / 2)
		compareSMI(r, cat, rec, "idle")
		time.Sleep(idle / 2)
		for _, d := range samp.stop().Devices {
			if d.ReadErrors > 0 {
				r.Failures = append(r.Failures, fmt.Sprintf("gpu%d: %d read errors idle", d.Index, d.ReadErrors))
			}
			r.Notes = append(r.Notes, fmt.Sprintf("idle gpu%d: %d drains, %d nothing new, %d utilization point reads", d.Index, d.Drains, d.NothingNew, d.PointReads))
		}
	}
	r.LatencyP50, r.P99 = lat.quantile(0.5), lat.quantile(0.99)
	return 0
}

func callsOf(devs []sampler.DeviceSource) uint64 {
	var n uint64
	for _, d := range devs {
		if cc, ok := d.(sampler.CallCounter); ok {
			n += cc.CallStats().Calls
		}
	}
	return n
}

// load drives scripts/gpu-check-load.py.
type load struct {
	cmd          *exec.Cmd
	in           io.WriteCloser
	out          *bufio.Scanner
	flopsPerIter float64
}

func startLoad(command string) (*load, error) {
	f := strings.Fields(command)
	cmd := exec.Command(f[0], f[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l := &load{cmd: cmd, in: in, out: bufio.NewScanner(pipe)}
	ready := make(chan error, 1)
	go func() {
		if !l.out.Scan() {
			ready <- errors.New("load exited before ready")
			return
		}
		line := l.out.Text()
		if !strings.HasPrefix(line, "ready") {
			ready <- errors.New(line)
			return
		}
		for _, kv := range strings.Fields(line)[1:] {
			if v, ok := strings.CutPrefix(kv, "flops_per_iter="); ok {
				l.flopsPerIter, _ = strconv.ParseFloat(v, 64)
			}
		}
		ready <- nil
	}()
	select {
	case err := <-ready:
		if err != nil {
			cmd.Process.Kill()
			return nil, err
		}
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		return nil, errors.New("load not ready after 90 s")
	}
	return l, nil
}

func (l *load) run(d time.Duration) (int, float64, error) {
	fmt.Fprintf(l.in, "run %f\n", d.Seconds())
	if !l.out.Scan() {
		return 0, 0, errors.New("load exited")
	}
	var iters int
	var secs float64
	if _, err := fmt.Sscanf(l.out.Text(), "done %d %f", &iters, &secs); err != nil {
		return 0, 0, fmt.Errorf("load said %q", l.out.Text())
	}
	return iters, secs, nil
}

func (l *load) quit() { fmt.Fprintln(l.in, "quit"); l.in.Close(); l.cmd.Wait() }

// smiFields are compared with our metrics: nvidia-smi field, our metric,
// absolute and relative tolerance.
var smiFields = []struct {
	field    string
	metric   catalog.MetricID
	abs, rel float64
}{
	{"power.draw.instant", catalog.MetricPowerInstant, 25, 0.15},
	{"power.draw", catalog.MetricPowerDraw, 25, 0.15},
	{"utilization.gpu", catalog.MetricUtilGPU, 15, 0},
	{"temperature.gpu", catalog.MetricTempGPU, 3, 0},
	{"clocks.sm", catalog.MetricClockSM, 0, 0.10},
	{"memory.used", catalog.MetricMemoryUsed, 256, 0.02},
}

func compareSMI(r *report, cat *catalog.Catalog, rec *recorder, phase string) {
	fields := []string{"index"}
	for _, f := range smiFields {
		fields = append(fields, f.field)
	}
	t0 := time.Now()
	b, err := exec.Command("nvidia-smi", "--query-gpu="+strings.Join(fields, ","), "--format=csv,noheader,nounits").Output()
	t1 := time.Now()
	if err != nil {
		note := "nvidia-smi --query-gpu: " + err.Error()
		if !slices.Contains(r.Unsupported, note) {
			r.Unsupported = append(r.Unsupported, note)
		}
		return
	}
	time.Sleep(1500 * time.Millisecond) // let the drains deliver the window
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		cols := strings.Split(line, ",")
		if len(cols) != len(fields) {
			continue
		}
		dev, _ := strconv.Atoi(strings.TrimSpace(cols[0]))
		for i, f := range smiFields {
			v, err := strconv.ParseFloat(strings.TrimSpace(cols[i+1]), 64)
			if err != nil {
				continue // "[N/A]": not supported here
			}
			lo, hi, n := rec.window(dev, f.metric, t0.Add(-1500*time.Millisecond).UnixNano(), t1.Add(200*time.Millisecond).UnixNano())
			if n == 0 {
				lo, hi, n = rec.window(dev, f.metric, t0.Add(-3*time.Second).UnixNano(), t1.Add(time.Second).UnixNano())
			}
			if n == 0 {
				continue
			}
			tol := math.Max(f.abs, f.rel*v)
			c := comparison{Phase: phase, Metric: cat.Name(f.metric), SMI: f.field, Device: dev, SMIValue: v,
				OursMin: lo, OursMax: hi, Tolerance: tol, OK: v >= lo-tol && v <= hi+tol}
			r.Comparisons = append(r.Comparisons, c)
			if !c.OK {
				r.Failures = append(r.Failures, fmt.Sprintf("%s gpu%d %s: nvidia-smi %s=%.1f, ours %.1f..%.1f (±%.1f)", phase, dev, c.Metric, f.field, v, lo, hi, tol))
			}
		}
	}
}

// gapsAndDuplicates checks every buffer series: a step more than 3× the
// median step is a gap; an equal timestamp a duplicate.
func gapsAndDuplicates(r *report, cat *catalog.Catalog, rec *recorder) {
	rec.mu.Lock()
	series := map[string][]int64{}
	for _, s := range rec.samples {
		m, _ := cat.Get(s.Metric)
		if m.Src.Kind == catalog.FromBuffer && s.Flags&record.FlagPointRead == 0 {
			k := fmt.Sprintf("gpu%d %s", s.Device, m.Name)
			series[k] = append(series[k], s.TimeNS)
		}
	}
	rec.mu.Unlock()
	for k, ts := range series {
		slices.Sort(ts)
		var steps []int64
		dups := 0
		for i := 1; i < len(ts); i++ {
			if ts[i] == ts[i-1] {
				dups++
			} else {
				steps = append(steps, ts[i]-ts[i-1])
			}
		}
		if len(steps) == 0 {
			continue
		}
		med := slices.Clone(steps)
		slices.Sort(med)
		gaps := 0
		for _, s := range steps {
			if s > 3*med[len(med)/2] {
				gaps++
			}
		}
		r.Gaps[k], r.Duplicates[k] = gaps, dups
		if dups > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: %d duplicate samples", k, dups))
		}
	}
}

// summarize analyses the throughput windows as pairs: the windows ran in
// ABBA order, so window pair k (one with sampling, one without, back to
// back) shares the machine's drift; the slowdown is 1 − the geometric mean
// of the pairs' on/off ratios, with its paired-t 95% interval
// (bench.PairedLogRatio).
func summarize(r *report, ab *abResult) {
	n := min(len(ab.OnSamples), len(ab.OffSamples))
	if n < 2 {
		return
	}
	ab.Runs = n
	ab.OnMean, _ = bench.MeanStd(ab.OnSamples)
	ab.OffMean, _ = bench.MeanStd(ab.OffSamples)
	l := bench.PairedLogRatio(ab.OffSamples[:n], ab.OnSamples[:n]) // throughput on/off
	lo, hi := l.Interval()
	ab.SlowdownPct = 100 * (1 - l.Ratio())
	ab.CI95Pct = 100 * (hi - lo) / 2
	r.Throughput = ab
	if 100*(1-hi) > 1 { // even the interval's best case is more than 1 % slower
		r.Failures = append(r.Failures, fmt.Sprintf("sampling slows the load by %.2f%% ± %.2f%% (95%% CI, paired)", ab.SlowdownPct, ab.CI95Pct))
	}
}

// fakePeriods are the sample periods the fake driver assumes for a real
// driver (scripts/nvml-calls.sh, PERIODS=driver; the types not listed there
// sample every 20 ms), printed beside the measured ones.
var fakePeriods = map[string]time.Duration{
	"total_power": 20 * time.Millisecond, "module_power": 20 * time.Millisecond,
	"gpu_util": 166667 * time.Microsecond, "memory_util": 166667 * time.Microsecond, "encoder_util": 166667 * time.Microsecond,
	"decoder_util": 166667 * time.Microsecond, "jpeg_util": 166667 * time.Microsecond, "ofa_util": 166667 * time.Microsecond,
	"sm_clock": 100 * time.Millisecond, "memory_clock": 100 * time.Millisecond,
}

// probeText is one probe as a table cell: "no", "empty", or "DEPTH × PERIOD
// (Z zeros)".
func probeText(p *probe) string {
	switch {
	case p == nil:
		return "—"
	case !p.Supported:
		return "no"
	case p.Empty:
		return "empty"
	}
	return fmt.Sprintf("%d × %v (%d zero)", p.Depth, p.Period.Round(time.Millisecond), p.Zeros)
}

func write(r *report, dir string) error {
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), j, 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# gpu-check report\n\nkernel %s, driver %s, NVML %s\n\n## Phases\n", r.Kernel, r.Driver, r.NVML)
	for _, p := range r.Phases {
		switch {
		case !p.Ran:
			fmt.Fprintf(&b, "- %s: NOT RUN (%s): nothing below is measured under its name\n", p.Name, p.Why)
		case p.Why != "":
			fmt.Fprintf(&b, "- %s: ran, ended early (%s)\n", p.Name, p.Why)
		default:
			fmt.Fprintf(&b, "- %s: ran\n", p.Name)
		}
	}
	b.WriteString("\n## Devices\n")
	for _, d := range r.Devices {
		fmt.Fprintf(&b, "- gpu%d %s %s %s, %d MiB, CUDA %s, VBIOS %s, slowdown %.0f °C, shutdown %.0f °C, gpu max %.0f °C, memory max %.0f °C\n",
			d.Index, d.Name, d.UUID, d.PCIBusID, d.MemoryTotalMiB, d.CUDAVersion, d.VBIOSVersion, d.SlowdownTempC, d.ShutdownTempC,
			d.MaxOperatingTempC, d.MemoryMaxTempC)
	}
	b.WriteString("\n## Reads (every catalog metric once per GPU, at the start)\n")
	for _, l := range r.Reads {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	if len(r.SMIReads) > 0 {
		b.WriteString("\n## Identity and drop-in reads beside nvidia-smi\n| gpu | ours | value | nvidia-smi | value | ok |\n|---|---|---|---|---|---|\n")
		for _, s := range r.SMIReads {
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %v |\n", s.Device, s.Ours, s.OurValue, s.SMI, s.SMIVal, s.OK)
		}
	}
	b.WriteString("\n## Sample buffers (drained from cursor 0: at the start, idle; right after the load)\n" +
		"| gpu | buffer | idle: samples × period (zero-valued) | after load | fake driver assumes | clock |\n|---|---|---|---|---|---|\n")
	for _, dev := range slices.Sorted(maps.Keys(r.Probes)) {
		load := map[string]*probe{}
		for i := range r.LoadProbes[dev] {
			load[r.LoadProbes[dev][i].Buffer] = &r.LoadProbes[dev][i]
		}
		for i := range r.Probes[dev] {
			p := &r.Probes[dev][i]
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %v | %s |\n", dev, p.Buffer, probeText(p), probeText(load[p.Buffer]), fakePeriods[p.Buffer], p.Clock)
		}
	}
	loadRan := slices.ContainsFunc(r.Phases, func(p phase) bool { return p.Name == "load" && p.Ran })
	if loadRan {
		fmt.Fprintf(&b, "\n## Cost under load\nsamples per NVML call %.1f, NVML calls/s per GPU %.1f, call latency p50 %v p99 %v, suspected losses %d\n",
			r.SamplesPerCall, r.CallsPerSecPerGPU, r.LatencyP50, r.P99, r.Losses)
	} else {
		fmt.Fprintf(&b, "\n## Cost under load\nnot measured: the load phase did not run (call latency p50 %v p99 %v over the calls made)\n", r.LatencyP50, r.P99)
	}
	for _, s := range r.Stats {
		fmt.Fprintf(&b, "- gpu%d: clock %s, published %d, drains %d (nothing new %d), drain interval %v, calls %d, latency %v\n",
			s.Index, s.Clock, s.Published, s.Drains, s.NothingNew, s.MinDrainInterval, s.Calls, s.CallLatency)
	}
	if t := r.Throughput; t != nil {
		fmt.Fprintf(&b, "\n## Load throughput (ABBA windows, %d pairs, paired)\nwith sampling %.1f TFLOP/s, without %.1f TFLOP/s: slowdown %.2f%% ± %.2f%% (95%% CI)\n",
			t.Runs, t.OnMean, t.OffMean, t.SlowdownPct, t.CI95Pct)
	}
	// One row per phase, GPU and metric: the checks made every 2 s, how
	// many were within tolerance, and the worst.
	b.WriteString("\n## Ours beside nvidia-smi --query-gpu (every 2 s)\n| phase | gpu | ours | nvidia-smi | checks | ok | worst: smi value, ours min..max (tol) |\n|---|---|---|---|---|---|---|\n")
	type key struct {
		phase, metric string
		dev           int
	}
	var order []key
	rows := map[key][]comparison{}
	for _, c := range r.Comparisons {
		k := key{c.Phase, c.Metric, c.Device}
		if _, ok := rows[k]; !ok {
			order = append(order, k)
		}
		rows[k] = append(rows[k], c)
	}
	for _, k := range order {
		cs := rows[k]
		ok, worst, dev := 0, cs[0], -1.0
		for _, c := range cs {
			if c.OK {
				ok++
			}
			if d := math.Max(c.SMIValue-c.OursMax, c.OursMin-c.SMIValue) - c.Tolerance; d > dev {
				worst, dev = c, d
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %d | %d | %.1f, %.1f..%.1f (±%.1f) |\n", k.phase, k.dev, k.metric, worst.SMI, len(cs), ok,
			worst.SMIValue, worst.OursMin, worst.OursMax, worst.Tolerance)
	}
	b.WriteString("\n## Gaps / duplicates (buffer series under load)\n")
	if !loadRan {
		b.WriteString("not measured: the load phase did not run\n")
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.Gaps {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %d gaps, %d duplicates\n", k, r.Gaps[k], r.Duplicates[k])
	}
	for _, sec := range []struct {
		title string
		items []string
	}{{"Unsupported here", r.Unsupported}, {"Failures", r.Failures}, {"Notes", r.Notes}} {
		fmt.Fprintf(&b, "\n## %s (%d)\n", sec.title, len(sec.items))
		for _, it := range sec.items {
			fmt.Fprintf(&b, "- %s\n", it)
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644)
}

// checkGPM reads the GPM profiling metrics a second time, past the minimum
// snapshot interval (the first read above took the first snapshot), and
// notes their values. Runtimes that refuse profiling counters (no
// permission, not supported) are "unsupported here", not failures.
func checkGPM(r *report, cat *catalog.Catalog, d sampler.DeviceSource, gpu int) {
	var ids []catalog.MetricID
	for _, m := range cat.All() {
		if m.Src.Kind == catalog.FromGPM {
			ids = append(ids, m.ID)
		}
	}
	time.Sleep(sampler.MinGPMInterval + 50*time.Millisecond)
	out := make([]sampler.Reading, len(ids))
	if err := d.Read(ids, out); err != nil {
		r.Failures = append(r.Failures, fmt.Sprintf("gpu%d read gpm: %v", gpu, err))
		return
	}
	var vals []string
	for i, o := range out {
		name := cat.Name(ids[i])
		switch {
		case o.Err == nil:
			vals = append(vals, fmt.Sprintf("%s=%.4g", name, o.Value))
		case errors.Is(o.Err, sampler.ErrNotSupported), errors.Is(o.Err, sampler.ErrNoPermission):
			// already listed by the first read when not supported
			if errors.Is(o.Err, sampler.ErrNoPermission) {
				r.Unsupported = append(r.Unsupported, fmt.Sprintf("gpu%d %s: profiling counters refused here: %v", gpu, name, o.Err))
			}
		default:
			r.Failures = append(r.Failures, fmt.Sprintf("gpu%d %s (second GPM snapshot): %v", gpu, name, o.Err))
		}
	}
	if len(vals) > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("gpu%d GPM over %v: %s", gpu, sampler.MinGPMInterval+50*time.Millisecond, strings.Join(vals, " ")))
	}
}

// loadPhase samples under the continuous load, compares with nvidia-smi
// every 2 s and measures the cost, gaps and losses. A load that ends early
// ends the phase there: nothing after it is measured under the load's name.
func loadPhase(r *report, src *nvml.Source, cat *catalog.Catalog, devs []sampler.DeviceSource, ld *load, rec *recorder,
	log *slog.Logger, loaded time.Duration) {
	ph := phase{Name: "load", Ran: true}
	defer func() { r.Phases = append(r.Phases, ph) }()
	samp, err := startSampling(src, cat, rec, log)
	if err != nil {
		ph.Ran, ph.Why = false, "start sampling: "+err.Error()
		r.Failures = append(r.Failures, "start sampling: "+err.Error())
		return
	}
	t0 := time.Now()
	calls0 := callsOf(devs)
	loadDone := make(chan error, 1)
	go func() { _, _, err := ld.run(loaded); loadDone <- err }()
	var loadErr error
	running := true
	for running && time.Since(t0) < loaded {
		select {
		case loadErr = <-loadDone:
			running = false
			if loadErr != nil {
				ph.Why = fmt.Sprintf("the load ended after %.0f s: %v", time.Since(t0).Seconds(), loadErr)
			}
			continue
		case <-time.After(2 * time.Second):
		}
		compareSMI(r, cat, rec, "load")
	}
	if running {
		loadErr = <-loadDone
		if loadErr != nil {
			ph.Why = "the load failed: " + loadErr.Error()
		}
	}
	if loadErr != nil {
		r.Failures = append(r.Failures, "load: "+loadErr.Error())
	}
	st := samp.stop()
	wall := time.Since(t0)
	// The buffers still hold the load's samples: their periods under load.
	for _, d := range devs {
		if id, err := d.Identity(); err == nil {
			r.LoadProbes[id.Index] = probeBuffers(r, d, cat, id.Index)
			// The load process still holds its memory and the driver still
			// has its utilization samples: it should be listed (the device
			// loops are stopped, so the devices are ours to call).
			checkProcesses(r, d, id.Index, "after load", ld.cmd.Process.Pid)
		}
	}
	var published uint64
	for _, d := range st.Devices {
		published += d.Published
		r.Losses += d.SuspectedLosses
	}
	calls := callsOf(devs) - calls0
	r.Stats = st.Devices
	if calls > 0 {
		r.SamplesPerCall = float64(published) / float64(calls)
		r.CallsPerSecPerGPU = float64(calls) / wall.Seconds() / float64(len(devs))
	}
	if r.Losses > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d suspected buffer overruns under load", r.Losses))
	}
	gapsAndDuplicates(r, cat, rec)
}

// throughputPhase measures the load's throughput with and without
// sampling in windows ordered ABBA (on off, off on, ...), analysed as
// pairs.
func throughputPhase(r *report, src *nvml.Source, cat *catalog.Catalog, ld *load, log *slog.Logger, pairs int, window time.Duration) {
	ph := phase{Name: "throughput", Ran: true}
	defer func() { r.Phases = append(r.Phases, ph) }()
	ab := &abResult{}
	for i := 0; i < 2*pairs; i++ {
		on := (i%4 == 0) || (i%4 == 3)
		var sp *sampling
		var err error
		if on {
			if sp, err = startSampling(src, cat, &recorder{}, log); err != nil {
				r.Failures = append(r.Failures, "start sampling: "+err.Error())
				ph.Why = "start sampling: " + err.Error()
				break
			}
		}
		iters, secs, err := ld.run(window)
		if sp != nil {
			sp.stop()
		}
		if err != nil {
			r.Failures = append(r.Failures, "load: "+err.Error())
			ph.Why = fmt.Sprintf("the load failed after %d windows: %v", i, err)
			break
		}
		tflops := float64(iters) * ld.flopsPerIter / secs / 1e12
		if on {
			ab.OnSamples = append(ab.OnSamples, tflops)
		} else {
			ab.OffSamples = append(ab.OffSamples, tflops)
		}
	}
	ld.quit()
	summarize(r, ab)
}

// probeBuffers drains every buffer type of d from cursor 0
// (doctor.ProbeBuffers) and counts the zero-valued samples of each.
func probeBuffers(r *report, d sampler.DeviceSource, cat *catalog.Catalog, gpu int) []probe {
	var out []probe
	for _, p := range doctor.ProbeBuffers(d, doctor.Options{Catalog: cat}) {
		clock := p.Clock
		if clock == "" { // not classified: no samples
			clock = sampler.ClockUnknown.String()
		}
		pr := probe{Buffer: p.Type, Clock: clock, Supported: p.Supported, Empty: p.Empty, Depth: p.Depth, Duplicates: p.Duplicates,
			Period: p.Period, Span: p.Span}
		if t, ok := catalog.ParseBufferType(p.Type); ok && p.Supported && !p.Empty {
			if raw, err := d.Drain(t, 0, nil); err == nil {
				for _, s := range raw {
					if s.Value == 0 {
						pr.Zeros++
					}
				}
			}
		}
		out = append(out, pr)
		if p.Duplicates > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("gpu%d buffer %s: %d duplicate timestamps in one drain", gpu, p.Type, p.Duplicates))
		}
		if p.Err != "" {
			r.Failures = append(r.Failures, fmt.Sprintf("gpu%d probe %s: %v", gpu, p.Type, p.Err))
		}
	}
	return out
}

// dropInReads are the reads added for the nvidia_smi drop-in and the
// media-engine point reads, whose values the report lists per GPU.
var dropInReads = []catalog.MetricID{catalog.MetricDisplayMode, catalog.MetricDisplayActive, catalog.MetricEncoderSessions,
	catalog.MetricEncoderFPS, catalog.MetricEncoderLatency, catalog.MetricFBCSessions, catalog.MetricFBCFPS,
	catalog.MetricFBCLatency, catalog.MetricRetiredPagesPending, catalog.MetricRowRemapPending, catalog.MetricUtilEncoder,
	catalog.MetricUtilDecoder, catalog.MetricUtilJPEG, catalog.MetricUtilOFA}

// readAll reads every metric in ids once (one Read: fields batched, the
// rest by their getters, buffer metrics as point reads) and summarizes:
// how many read, which are unsupported here, which failed, and the values
// of the drop-in's reads. It returns the values read, by metric.
func readAll(r *report, cat *catalog.Catalog, d sampler.DeviceSource, gpu int, ids []catalog.MetricID) map[catalog.MetricID]float64 {
	out := make([]sampler.Reading, len(ids))
	if err := d.Read(ids, out); err != nil {
		r.Failures = append(r.Failures, fmt.Sprintf("gpu%d read all metrics: %v", gpu, err))
	}
	values := map[catalog.MetricID]float64{}
	var unsupported []string
	ok := 0
	for i, o := range out {
		name := cat.Name(ids[i])
		switch {
		case o.Err == nil:
			ok++
			values[ids[i]] = o.Value
		case errors.Is(o.Err, sampler.ErrNotSupported), errors.Is(o.Err, sampler.ErrNoPermission):
			unsupported = append(unsupported, name)
			r.Unsupported = append(r.Unsupported, fmt.Sprintf("gpu%d %s: %v", gpu, name, o.Err))
		case errors.Is(o.Err, sampler.ErrNothingNew):
			ok++
		default:
			r.Failures = append(r.Failures, fmt.Sprintf("gpu%d %s: %v", gpu, name, o.Err))
		}
	}
	var vals []string
	for _, id := range dropInReads {
		if v, found := values[id]; found {
			vals = append(vals, fmt.Sprintf("%s=%g", cat.Name(id), v))
		} else {
			vals = append(vals, cat.Name(id)+"=unsupported")
		}
	}
	r.Reads = append(r.Reads, fmt.Sprintf("gpu%d: %d of %d metrics read (%d unsupported here); drop-in reads: %s", gpu, ok, len(ids),
		len(unsupported), strings.Join(vals, " ")))
	return values
}

// smiReadFields are the drop-in's reads beside nvidia-smi's fields: "" as
// our metric means an identity field (compared as text).
var smiReadFields = []struct {
	field  string
	metric catalog.MetricID
	tol    float64
}{
	{"vbios_version", 0, 0},
	{"display_mode", catalog.MetricDisplayMode, 0},
	{"display_active", catalog.MetricDisplayActive, 0},
	{"retired_pages.pending", catalog.MetricRetiredPagesPending, 0},
	{"encoder.stats.sessionCount", catalog.MetricEncoderSessions, 0},
	{"encoder.stats.averageFps", catalog.MetricEncoderFPS, 5},
	{"encoder.stats.averageLatency", catalog.MetricEncoderLatency, 1000},
	{"fbc.stats.sessionCount", catalog.MetricFBCSessions, 0},
	{"fbc.stats.averageFps", catalog.MetricFBCFPS, 5},
	{"fbc.stats.averageLatency", catalog.MetricFBCLatency, 1000},
	{"utilization.encoder", catalog.MetricUtilEncoder, 15},
	{"utilization.decoder", catalog.MetricUtilDecoder, 15},
	{"utilization.jpeg", catalog.MetricUtilJPEG, 15},
	{"utilization.ofa", catalog.MetricUtilOFA, 15},
}

// smiValue turns nvidia-smi's text into a number where it is a state:
// Enabled/Yes → 1, Disabled/No → 0.
func smiValue(s string) (float64, bool) {
	switch strings.ToLower(s) {
	case "enabled", "yes":
		return 1, true
	case "disabled", "no":
		return 0, true
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// compareSMIReads puts the identity's CUDA and VBIOS versions and the
// drop-in's reads beside nvidia-smi's, one field per nvidia-smi call (an
// older nvidia-smi refuses a whole query over one field it does not know).
// A field nvidia-smi does not know or reports "[N/A]" is skipped.
func compareSMIReads(r *report, cat *catalog.Catalog, id record.Device, values map[catalog.MetricID]float64) {
	smi := func(args ...string) (string, bool) {
		b, err := exec.Command("nvidia-smi", args...).Output()
		return strings.TrimSpace(string(b)), err == nil
	}
	if out, ok := smi("-i", strconv.Itoa(id.Index)); ok {
		if _, v, found := strings.Cut(out, "CUDA Version:"); found {
			want := strings.Fields(v)[0]
			r.SMIReads = append(r.SMIReads, smiRead{Device: id.Index, Ours: "cuda_version", SMI: "CUDA Version", OurValue: id.CUDAVersion,
				SMIVal: want, OK: id.CUDAVersion == want})
		}
	} else {
		note := "nvidia-smi: not found or failed: drop-in reads not compared"
		if !slices.Contains(r.Unsupported, note) {
			r.Unsupported = append(r.Unsupported, note)
		}
		return
	}
	for _, f := range smiReadFields {
		out, ok := smi("-i", strconv.Itoa(id.Index), "--query-gpu="+f.field, "--format=csv,noheader,nounits")
		if !ok || out == "" || strings.Contains(out, "N/A") || strings.Contains(out, "Not Supported") {
			continue
		}
		if f.metric == 0 {
			r.SMIReads = append(r.SMIReads, smiRead{Device: id.Index, Ours: "vbios_version", SMI: f.field, OurValue: id.VBIOSVersion,
				SMIVal: out, OK: id.VBIOSVersion == out})
			continue
		}
		sv, ok := smiValue(out)
		if !ok {
			continue
		}
		ours, found := values[f.metric]
		rd := smiRead{Device: id.Index, Ours: cat.Name(f.metric), SMI: f.field, OurValue: "unsupported", SMIVal: out}
		if found {
			rd.OurValue = strconv.FormatFloat(ours, 'g', -1, 64)
			rd.OK = math.Abs(ours-sv) <= f.tol
		}
		r.SMIReads = append(r.SMIReads, rd)
	}
	for _, rd := range r.SMIReads {
		if rd.Device == id.Index && !rd.OK {
			r.Failures = append(r.Failures, fmt.Sprintf("gpu%d %s = %s, nvidia-smi %s = %s", rd.Device, rd.Ours, rd.OurValue, rd.SMI, rd.SMIVal))
		}
	}
}
