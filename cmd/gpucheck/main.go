// Command gpucheck validates the NVML backend against a real NVIDIA driver
// under a torch matrix-multiply load and idle, and writes a short report.
// scripts/gpu-check.sh runs it; it never changes the GPU's settings. Exit
// status: 0 all checks passed, 1 a check failed, 2 it could not run.
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
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/doctor"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/nvml"
)

type report struct {
	Kernel, Driver, NVML string
	Devices              []record.Device
	Probes               map[int][]probe
	Unsupported          []string // "unsupported here", not failures
	Failures             []string
	Notes                []string
	SamplesPerCall       float64
	CallsPerSecPerGPU    float64
	LatencyP50, P99      time.Duration
	Comparisons          []comparison
	Gaps, Duplicates     map[string]int
	Losses               uint64
	Throughput           *abResult
	Stats                []sampler.DeviceStats
}

type probe struct {
	Buffer, Clock     string
	Supported, Empty  bool
	Depth, Duplicates int
	Period, Span      time.Duration
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
	r := &report{Probes: map[int][]probe{}, Gaps: map[string]int{}, Duplicates: map[string]int{}}
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
	var ids []catalog.MetricID
	for _, m := range cat.All() {
		if m.Src.Kind != catalog.FromBuffer { // buffers are probed by doctor.ProbeBuffers
			ids = append(ids, m.ID)
		}
	}
	for _, d := range devs {
		id, err := d.Identity()
		if err != nil {
			r.Failures = append(r.Failures, "identity: "+err.Error())
			continue
		}
		r.Devices = append(r.Devices, id)
		for _, p := range doctor.ProbeBuffers(d, doctor.Options{Catalog: cat}) {
			clock := p.Clock
			if clock == "" { // not classified: no samples
				clock = sampler.ClockUnknown.String()
			}
			r.Probes[id.Index] = append(r.Probes[id.Index], probe{Buffer: p.Type, Clock: clock, Supported: p.Supported,
				Empty: p.Empty, Depth: p.Depth, Duplicates: p.Duplicates, Period: p.Period, Span: p.Span})
			if p.Duplicates > 0 {
				r.Failures = append(r.Failures, fmt.Sprintf("gpu%d buffer %s: %d duplicate timestamps in one drain", id.Index, p.Type, p.Duplicates))
			}
			if p.Err != "" {
				r.Failures = append(r.Failures, fmt.Sprintf("gpu%d probe %s: %v", id.Index, p.Type, p.Err))
			}
		}
		out := make([]sampler.Reading, len(ids))
		if err := d.Read(ids, out); err != nil {
			r.Failures = append(r.Failures, fmt.Sprintf("gpu%d read all metrics: %v", id.Index, err))
		}
		for i, o := range out {
			name := cat.Name(ids[i])
			switch {
			case errors.Is(o.Err, sampler.ErrNotSupported):
				r.Unsupported = append(r.Unsupported, fmt.Sprintf("gpu%d %s: %v", id.Index, name, o.Err))
			case o.Err != nil && !errors.Is(o.Err, sampler.ErrNothingNew):
				r.Failures = append(r.Failures, fmt.Sprintf("gpu%d %s: %v", id.Index, name, o.Err))
			}
		}
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
		r.Unsupported = append(r.Unsupported, "torch load: "+err.Error())
	}
	// Phase 1: continuous load with sampling, compared with nvidia-smi.
	samp, err := startSampling(src, cat, rec, log)
	if err != nil {
		r.Failures = append(r.Failures, "start sampling: "+err.Error())
		return 2
	}
	t0 := time.Now()
	calls0 := callsOf(devs)
	var loadDone chan error
	if ld != nil {
		loadDone = make(chan error, 1)
		go func() { _, _, err := ld.run(loaded); loadDone <- err }()
	}
	for time.Since(t0) < loaded {
		time.Sleep(2 * time.Second)
		compareSMI(r, cat, rec, "load")
	}
	if loadDone != nil {
		if err := <-loadDone; err != nil {
			r.Failures = append(r.Failures, "load: "+err.Error())
		}
	}
	st := samp.stop()
	wall := time.Since(t0)
	if ld != nil {
		// The load process still holds its memory and the driver still has
		// its utilization samples: it should be listed (the device loops
		// are stopped, so the devices are ours to call).
		for _, d := range devs {
			if id, err := d.Identity(); err == nil {
				checkProcesses(r, d, id.Index, "after load", ld.cmd.Process.Pid)
			}
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

	// Phase 2: throughput with and without sampling, interleaved ABBA.
	if ld != nil {
		ab := &abResult{}
		for i := 0; i < 2*pairs; i++ {
			on := (i%4 == 0) || (i%4 == 3)
			var sp *sampling
			if on {
				if sp, err = startSampling(src, cat, &recorder{}, log); err != nil {
					r.Failures = append(r.Failures, "start sampling: "+err.Error())
					break
				}
			}
			iters, secs, err := ld.run(window)
			if sp != nil {
				sp.stop()
			}
			if err != nil {
				r.Failures = append(r.Failures, "load: "+err.Error())
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
	// Phase 3: idle.
	rec.mu.Lock()
	rec.samples = rec.samples[:0]
	rec.mu.Unlock()
	if samp, err = startSampling(src, cat, rec, log); err == nil {
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

func meanVar(x []float64) (m, v float64) {
	for _, a := range x {
		m += a
	}
	m /= float64(len(x))
	for _, a := range x {
		v += (a - m) * (a - m)
	}
	return m, v / float64(len(x)-1)
}

func summarize(r *report, ab *abResult) {
	if len(ab.OnSamples) < 2 || len(ab.OffSamples) < 2 {
		return
	}
	ab.Runs = min(len(ab.OnSamples), len(ab.OffSamples))
	mOn, vOn := meanVar(ab.OnSamples)
	mOff, vOff := meanVar(ab.OffSamples)
	ab.OnMean, ab.OffMean = mOn, mOff
	se := math.Sqrt(vOn/float64(len(ab.OnSamples)) + vOff/float64(len(ab.OffSamples)))
	ab.SlowdownPct = 100 * (mOff - mOn) / mOff
	ab.CI95Pct = 100 * 2.07 * se / mOff // t(0.975, ~22 df)
	r.Throughput = ab
	if ab.SlowdownPct-ab.CI95Pct > 1 {
		r.Failures = append(r.Failures, fmt.Sprintf("sampling slows the load by %.2f%% ± %.2f%% (95%% CI)", ab.SlowdownPct, ab.CI95Pct))
	}
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
	fmt.Fprintf(&b, "# gpu-check report\n\nkernel %s, driver %s, NVML %s\n\n## Devices\n", r.Kernel, r.Driver, r.NVML)
	for _, d := range r.Devices {
		fmt.Fprintf(&b, "- gpu%d %s %s %s, %d MiB, slowdown %.0f °C, shutdown %.0f °C, gpu max %.0f °C, memory max %.0f °C\n",
			d.Index, d.Name, d.UUID, d.PCIBusID, d.MemoryTotalMiB, d.SlowdownTempC, d.ShutdownTempC, d.MaxOperatingTempC, d.MemoryMaxTempC)
	}
	b.WriteString("\n## Sample buffers (cursor-0 drain at start)\n| gpu | buffer | supported | depth | period | span | clock |\n|---|---|---|---|---|---|---|\n")
	for dev, ps := range r.Probes {
		for _, p := range ps {
			status := map[bool]string{true: "yes", false: "no"}[p.Supported]
			if p.Supported && p.Empty {
				status = "empty"
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %d | %v | %v | %s |\n", dev, p.Buffer, status, p.Depth, p.Period, p.Span, p.Clock)
		}
	}
	fmt.Fprintf(&b, "\n## Cost\nsamples per NVML call %.1f, NVML calls/s per GPU %.1f, call latency p50 %v p99 %v, suspected losses %d\n",
		r.SamplesPerCall, r.CallsPerSecPerGPU, r.LatencyP50, r.P99, r.Losses)
	for _, s := range r.Stats {
		fmt.Fprintf(&b, "- gpu%d: clock %s, published %d, drains %d (nothing new %d), drain interval %v, calls %d, latency %v\n",
			s.Index, s.Clock, s.Published, s.Drains, s.NothingNew, s.MinDrainInterval, s.Calls, s.CallLatency)
	}
	if t := r.Throughput; t != nil {
		fmt.Fprintf(&b, "\n## Load throughput (interleaved, %d runs each)\nwith sampling %.1f TFLOP/s, without %.1f TFLOP/s: slowdown %.2f%% ± %.2f%% (95%% CI)\n",
			t.Runs, t.OnMean, t.OffMean, t.SlowdownPct, t.CI95Pct)
	}
	b.WriteString("\n## Ours beside nvidia-smi\n| phase | gpu | ours | nvidia-smi | smi value | ours min..max | tol | ok |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Comparisons {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %.1f | %.1f..%.1f | %.1f | %v |\n", c.Phase, c.Device, c.Metric, c.SMI, c.SMIValue, c.OursMin, c.OursMax, c.Tolerance, c.OK)
	}
	b.WriteString("\n## Gaps / duplicates (buffer series under load)\n")
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
