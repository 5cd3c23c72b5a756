package bench

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/diagnose"
	"github.com/gpusampler/gpusampler/record"
)

// edgeMargin is how far beyond a window samples are taken for
// interpolating at its edges (slow state is read once a second).
const edgeMargin = int64(3 * time.Second)

// assemble turns the collected samples into a Result.
// procInfo is what assemble needs about per-process polling: which
// devices were polled at least once, and which PIDs are the benchmark's.
type procInfo struct {
	polled map[int]bool
	ours   func(pid int) bool
	// gpuCPUs are each device's close CPUs (CPU affinity), where known.
	gpuCPUs map[int][]int
}

func assemble(col *Collector, devs []record.Device, opts Options, created time.Time, baseFrom, baseTo int64, execs []execution, pi procInfo) *Result {
	cat := col.cat
	res := &Result{Schema: Schema, SchemaVersion: SchemaVersion, Tool: opts.Tool, Created: created.UTC().Format(time.RFC3339Nano),
		Settings: Settings{Runs: opts.Runs, Warmup: opts.Warmup, FieldIntervalMS: float64(opts.FieldInterval) / 1e6,
			DrainIntervalMS: float64(opts.DrainInterval) / 1e6, BaselineS: opts.Baseline.Seconds(),
			Selection: opts.Selection, MarksEnv: MarksEnv}}
	if res.Settings.Selection == "" {
		res.Settings.Selection = "all"
	}
	if len(opts.Commands) == 2 {
		res.Settings.Order = PairOrder
	}
	for _, d := range devs {
		res.Devices = append(res.Devices, DeviceInfo{Index: d.Index, UUID: d.UUID, Name: d.Name, PCIBusID: d.PCIBusID,
			MemoryTotalMiB: float64(d.MemoryTotalMiB), DriverVersion: d.DriverVersion, Simulated: d.Simulated})
		res.Backend = d.Backend
		if d.Simulated {
			res.Simulated = true
		}
	}
	if res.Simulated {
		res.Profile = opts.Profile
		res.Warnings = append(res.Warnings, "SIMULATED GPUs: these numbers describe the simulator, not real hardware")
	}
	// Per-device sample sets covering everything (baseline to last run).
	from := execs[0].start.UnixNano()
	if baseFrom != 0 {
		from = baseFrom
	}
	to := execs[len(execs)-1].end.UnixNano()
	samples := map[int][]record.Sample{}
	windows := map[int]*deviceWindow{}
	for _, d := range devs {
		samples[d.Index] = col.Samples(d.Index, from-edgeMargin, to+edgeMargin)
		windows[d.Index] = newDeviceWindow(cat, samples[d.Index])
	}
	res.raw, res.cat = samples, cat
	// Baseline.
	idle := map[int]float64{}
	res.Baseline.DurationS = Num(float64(baseTo-baseFrom) / 1e9)
	for _, d := range devs {
		idle[d.Index] = math.NaN()
		if baseTo == 0 {
			continue
		}
		w := windows[d.Index]
		e := w.energyOver(baseFrom, baseTo)
		p := float64(e.J) / (float64(baseTo-baseFrom) / 1e9)
		idle[d.Index] = p
		bd := BaselineDevice{Index: d.Index, PowerW: Num(p),
			UtilPct:      dist(w.utilOver(baseFrom, baseTo)).Mean,
			SMClockMHz:   dist(pick(w.samples, catalog.MetricClockSM).within(baseFrom, baseTo)).P50,
			TempC:        Num(pick(w.samples, catalog.MetricTempGPU).withPrior(baseFrom, baseTo).max()),
			MemoryUsedMB: Num(pick(w.samples, catalog.MetricMemoryUsed).withPrior(baseFrom, baseTo).max())}
		res.Baseline.Devices = append(res.Baseline.Devices, bd)
	}
	if baseTo == 0 {
		res.Baseline.DurationS = 0
		res.Warnings = append(res.Warnings, "no idle baseline measured: energy above idle is unknown")
	}
	names := make([]string, len(opts.Commands))
	for i, c := range opts.Commands {
		names[i] = c.Name
	}
	inDevs := map[int]bool{}
	for _, d := range devs {
		// A simulated GPU's processes are part of its made-up workload, not
		// another user sharing the GPU: never flagged as foreign.
		inDevs[d.Index] = !d.Simulated
	}
	if pi.ours == nil {
		pi.ours = func(int) bool { return false }
	}
	foreign := foreignProcesses(col.Events(), inDevs, pi.ours, from, to, baseFrom, baseTo, execs, names)
	res.Hygiene = hygiene(devs, windows, baseFrom, baseTo, execs[0].start.UnixNano(), res.Baseline, foreign, pi.polled)
	res.Warnings = append(res.Warnings, res.Hygiene.Warnings...)

	for ci, c := range opts.Commands {
		b := Benchmark{Name: c.Name, Command: slices.Clone(c.Argv), Shell: c.Shell, Diagnoses: []Diagnosis{}}
		for _, ex := range execs {
			if ex.cmd != ci {
				continue
			}
			r := runOf(ex, devs, windows, idle)
			for _, fp := range foreign {
				if slices.Contains(fp.during, runPhase(ex, names)) {
					r.others = append(r.others, fmt.Sprintf("pid %d %s on GPU %d", fp.pid, fp.name, fp.dev))
				}
			}
			b.Runs = append(b.Runs, r)
		}
		if len(b.Runs) == 0 {
			continue
		}
		summarize(&b)
		judged := devs
		if used := commandDevices(col.Events(), pi.ours, execs, ci); used != nil {
			judged = slices.DeleteFunc(slices.Clone(devs), func(d record.Device) bool { return !used[d.Index] })
		}
		b.Diagnoses = append(diagnoses(col.Events(), &b), fragmentation(execs, ci, judged, windows)...)
		b.Diagnoses = append(b.Diagnoses, numaPlacement(execs, ci, judged, pi.gpuCPUs)...)
		for _, dg := range b.Diagnoses {
			for _, n := range dg.Runs {
				r := &b.Runs[n-1]
				if !slices.Contains(r.Findings, dg.Kind) {
					r.Findings = append(r.Findings, dg.Kind)
				}
			}
		}
		res.Benchmarks = append(res.Benchmarks, b)
	}
	res.Warnings = append(res.Warnings, coarseEnergyWarnings(res.Benchmarks)...)
	for _, e := range col.Events() {
		if e.Kind == record.EventSampleLoss {
			res.Warnings = append(res.Warnings, fmt.Sprintf("GPU %d: driver sample buffer %s overran (samples lost)", e.Device, attr(e, "buffer")))
		}
	}
	if len(res.Benchmarks) == 2 {
		// The runner interleaved them: run i of A and run i of B are a pair.
		o := opts.Compare
		o.Paired = true
		c := CompareResults(res, &res.Benchmarks[0], res, &res.Benchmarks[1], o)
		res.Comparison = &c
	}
	return res
}

func attr(e record.Event, k string) string {
	for _, a := range e.Attrs {
		if a.Key == k {
			return a.Value
		}
	}
	return ""
}

// runOf computes one run's numbers.
func runOf(ex execution, devs []record.Device, windows map[int]*deviceWindow, idle map[int]float64) Run {
	from, to := ex.start.UnixNano(), ex.end.UnixNano()
	r := Run{Index: ex.run + 1, StartNS: from, EndNS: to, WallS: Num(ex.end.Sub(ex.start).Seconds()), ExitCode: ex.exitCode}
	var energy, above, power float64
	var utils []float64
	for _, d := range devs {
		w := windows[d.Index]
		rd := w.compute(d.Index, from, to, idle[d.Index])
		r.Devices = append(r.Devices, rd)
		energy += float64(rd.Energy.J)
		above += float64(rd.EnergyAboveIdleJ)
		power += float64(rd.PowerMeanW)
		utils = append(utils, float64(rd.Util.Mean))
		// A coarse counter is said once per GPU for the whole benchmark
		// (coarseEnergyWarnings), not once per run and GPU.
		if !rd.Energy.Coarse && rd.Energy.Discrepancy.Known() && rd.Energy.Discrepancy > 0.1 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("GPU %d: energy counter and integrated power differ by %.0f%%",
				d.Index, 100*float64(rd.Energy.Discrepancy)))
		}
		var thr []string
		for _, k := range sortedKeys(rd.ThrottleMS) {
			if v := rd.ThrottleMS[k]; v.Known() && v > 0 && !strings.HasPrefix(k, "violation_low_util") {
				thr = append(thr, fmt.Sprintf("%s %.0f ms", k, float64(v)))
			}
		}
		if len(thr) > 0 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("GPU %d: clocks throttled during the run (%s)", d.Index, strings.Join(thr, ", ")))
		}
	}
	r.EnergyJ, r.EnergyAboveIdleJ, r.PowerMeanW = Num(energy), Num(above), Num(power)
	m, _ := MeanStd(known(utils))
	r.UtilMeanPct = Num(m)
	r.Steps = steps(ex, devs, windows)
	if ex.badMarks > 0 {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d step mark line(s) could not be parsed", ex.badMarks))
	}
	return r
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// steps cuts a run at its marks: each mark starts a phase that lasts until
// the next mark or the end of the run; time before the first mark is its
// own phase. The phases tile the run, so their times and energies add up
// to the run's.
func steps(ex execution, devs []record.Device, windows map[int]*deviceWindow) []Step {
	if len(ex.marks) == 0 {
		return nil
	}
	from, to := ex.start.UnixNano(), ex.end.UnixNano()
	ms := slices.Clone(ex.marks)
	slices.SortStableFunc(ms, func(a, b Mark) int { return cmp64(a.TimeNS, b.TimeNS) })
	type cut struct {
		name string
		t    int64
	}
	var cuts []cut
	for _, m := range ms {
		cuts = append(cuts, cut{m.Name, min(max(m.TimeNS, from), to)})
	}
	if cuts[0].t > from {
		cuts = append([]cut{{"(before first mark)", from}}, cuts...)
	}
	var out []Step
	for i, c := range cuts {
		end := to
		if i+1 < len(cuts) {
			end = cuts[i+1].t
		}
		st := Step{Name: c.name, StartNS: c.t, EndNS: end, WallS: Num(float64(end-c.t) / 1e9)}
		var e float64
		var utils []float64
		for _, d := range devs {
			w := windows[d.Index]
			e += w.energyBetween(c.t, end)
			if u := w.utilOver(c.t, end); len(u) > 0 {
				utils = append(utils, u.values()...)
			} else if u := pick(w.samples, catalog.MetricUtilGPU).withPrior(c.t, end); len(u) > 0 {
				utils = append(utils, u[0].v) // a short step: the value in force
			}
		}
		st.EnergyJ = Num(e)
		st.PowerMeanW = Num(e / (float64(end-c.t) / 1e9))
		if end == c.t {
			st.PowerMeanW = Num(math.NaN())
		}
		m, _ := MeanStd(utils)
		st.UtilMeanPct = Num(m)
		out = append(out, st)
	}
	return out
}

// summarize fills b.Summary and the runs' outlier marks.
func summarize(b *Benchmark) {
	get := func(f func(*Run) Num) []float64 {
		out := make([]float64, len(b.Runs))
		for i := range b.Runs {
			out[i] = float64(f(&b.Runs[i]))
		}
		return out
	}
	walls := get(func(r *Run) Num { return r.WallS })
	b.Summary = Summary{
		WallS:            stat(walls),
		EnergyJ:          stat(get(func(r *Run) Num { return r.EnergyJ })),
		EnergyAboveIdleJ: stat(get(func(r *Run) Num { return r.EnergyAboveIdleJ })),
		PowerMeanW:       stat(get(func(r *Run) Num { return r.PowerMeanW })),
		UtilMeanPct:      stat(get(func(r *Run) Num { return r.UtilMeanPct })),
	}
	for _, i := range Outliers(walls) {
		r := &b.Runs[i]
		r.Outlier = true
		r.OutlierReason = outlierReason(b, i)
		b.Summary.Outliers = append(b.Summary.Outliers, r.Index)
	}
	for _, r := range b.Runs {
		if r.ExitCode != 0 {
			b.Summary.Failed++
		}
	}
}

// kindOf names a finding the way the report's reader thinks of it.
func kindOf(finding string, e record.Event) string {
	switch finding {
	case diagnose.FindingPeriodicDips:
		return "input-pipeline stall"
	case diagnose.FindingLaunchBound:
		return "launch-bound"
	case diagnose.FindingTemperature:
		return "thermal"
	case diagnose.FindingThrottle:
		r := attr(e, "reason")
		switch {
		case strings.Contains(r, "thermal"):
			return "thermal"
		case strings.Contains(r, "power"):
			return "power-capped"
		}
		return "clocks throttled"
	case diagnose.FindingMemoryFull:
		return "memory nearly full"
	case diagnose.FindingXID:
		return "XID error"
	case diagnose.FindingCommBound:
		return "communication-bound"
	}
	return finding
}

// diagnoses returns the closed findings that overlap b's runs.
func diagnoses(events []record.Event, b *Benchmark) []Diagnosis {
	out := []Diagnosis{}
	for _, e := range events {
		if e.Kind != record.EventFinding || attr(e, "state") != "closed" {
			continue
		}
		// A condition seen at the last reading holds until a reading says
		// otherwise: slow state is read once per slowInterval.
		end := e.EndNS + int64(slowInterval)
		var runs []int
		for _, r := range b.Runs {
			if e.StartNS <= r.EndNS && end >= r.StartNS {
				runs = append(runs, r.Index)
			}
		}
		if len(runs) == 0 {
			continue
		}
		f := attr(e, "finding")
		ev := map[string]string{}
		for _, a := range e.Attrs {
			if a.Key != "finding" && a.Key != "state" {
				ev[a.Key] = a.Value
			}
		}
		out = append(out, Diagnosis{Finding: f, Kind: kindOf(f, e), Device: e.Device, StartNS: e.StartNS, EndNS: e.EndNS,
			Message: e.Message, Evidence: ev, Runs: runs})
	}
	slices.SortStableFunc(out, func(a, b Diagnosis) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return a.Device - b.Device
	})
	return out
}

// hygiene records the machine state and warns about what contaminates
// the benchmark.
func hygiene(devs []record.Device, windows map[int]*deviceWindow, baseFrom, baseTo, firstRun int64, base Baseline,
	foreign []foreignProc, polled map[int]bool) Hygiene {
	var h Hygiene
	add := func(dev int, name, value string) {
		if value == "" {
			value = "unknown"
		}
		h.Items = append(h.Items, HygieneItem{Device: dev, Name: name, Value: value})
	}
	at := baseTo
	if at == 0 {
		at = firstRun
	}
	last := func(w *deviceWindow, id catalog.MetricID) (float64, bool) {
		s := pick(w.samples, id).withPrior(at-edgeMargin, at)
		if len(s) == 0 {
			return 0, false
		}
		return s[len(s)-1].v, true
	}
	num := func(v float64, ok bool) string {
		if !ok {
			return ""
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	for _, d := range devs {
		w := windows[d.Index]
		add(d.Index, "driver_version", d.DriverVersion)
		add(d.Index, "power_limit", num(last(w, catalog.MetricPowerLimit)))
		if v, ok := last(w, catalog.MetricPState); ok {
			add(d.Index, "pstate", "P"+strconv.Itoa(int(v)))
		} else {
			add(d.Index, "pstate", "")
		}
		add(d.Index, "sm_clock_idle", num(last(w, catalog.MetricClockSM)))
		add(d.Index, "memory_clock", num(last(w, catalog.MetricClockMemory)))
		reasons, ok := last(w, catalog.MetricClocksEventReasons)
		if ok {
			add(d.Index, "clocks_event_reasons", catalog.ReasonString(uint64(reasons)))
			if mask := uint64(reasons) & catalog.ReasonThrottleAny; mask != 0 {
				h.Warnings = append(h.Warnings, fmt.Sprintf("GPU %d: clocks already held down before the runs (%s)", d.Index, catalog.ReasonString(mask)))
			}
			if uint64(reasons)&catalog.ReasonAppClocksSetting != 0 {
				h.Warnings = append(h.Warnings, fmt.Sprintf("GPU %d: application clocks are set: results hold for these clocks only", d.Index))
			}
		} else {
			add(d.Index, "clocks_event_reasons", "")
		}
		// The identity's modes; "" (unknown) when the driver could not
		// say.
		add(d.Index, "persistence_mode", d.PersistenceMode)
		if d.PersistenceMode == record.ModeDisabled {
			h.Warnings = append(h.Warnings, fmt.Sprintf("GPU %d: persistence mode is disabled: the driver unloads when idle, so first calls are slow and clocks ramp up at the start of each run (enable it: nvidia-smi -pm 1)", d.Index))
		}
		add(d.Index, "ecc_mode", d.ECCMode)
		mig := d.MIGMode
		if d.MIG {
			mig = "instance" // a MIG instance sampled as a device
		}
		add(d.Index, "mig_mode", mig)
		if d.MIGMode == record.ModeEnabled {
			h.Warnings = append(h.Warnings, fmt.Sprintf("GPU %d: MIG mode is enabled: the GPU is partitioned, other instances share its power, clocks and temperature", d.Index))
		}
		var others []string
		for i := range foreign {
			if foreign[i].dev == d.Index {
				others = append(others, foreign[i].item())
			}
		}
		switch {
		case len(others) > 0:
			add(d.Index, "other_processes", strings.Join(others, "; "))
		case polled[d.Index]:
			add(d.Index, "other_processes", "none")
		default:
			add(d.Index, "other_processes", "") // process lists not readable
		}
	}
	// ECC costs memory bandwidth: GPUs that differ do not compare.
	eccSeen := map[string][]string{}
	var eccOrder []string
	for _, d := range devs {
		if d.ECCMode == record.ModeEnabled || d.ECCMode == record.ModeDisabled {
			if _, ok := eccSeen[d.ECCMode]; !ok {
				eccOrder = append(eccOrder, d.ECCMode)
			}
			eccSeen[d.ECCMode] = append(eccSeen[d.ECCMode], strconv.Itoa(d.Index))
		}
	}
	if len(eccOrder) > 1 {
		var parts []string
		for _, m := range eccOrder {
			parts = append(parts, fmt.Sprintf("%s on GPU %s", m, strings.Join(eccSeen[m], ", ")))
		}
		h.Warnings = append(h.Warnings, "ECC mode differs across the GPUs ("+strings.Join(parts, "; ")+"): their results do not compare (ECC costs memory bandwidth)")
	}
	for i := range foreign {
		h.Warnings = append(h.Warnings, foreign[i].warning())
	}
	simulated := len(devs) > 0 && devs[0].Simulated
	for _, bd := range base.Devices {
		// A simulated profile is busy regardless of the commands: no
		// contamination to report.
		if !simulated && bd.UtilPct.Known() && bd.UtilPct > 5 {
			h.Warnings = append(h.Warnings, fmt.Sprintf("GPU %d was busy during the idle baseline (%.0f%% utilization): another process is using it, and it will contaminate the runs",
				bd.Index, float64(bd.UtilPct)))
		}
	}
	add(-1, "cpus", strconv.Itoa(runtime.NumCPU()))
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 0 {
			add(-1, "loadavg_1m", f[0])
			if l, err := strconv.ParseFloat(f[0], 64); err == nil && l > float64(runtime.NumCPU()) {
				h.Warnings = append(h.Warnings, fmt.Sprintf("host load average %.1f exceeds its %d CPUs: CPU-side work will be slowed", l, runtime.NumCPU()))
			}
		}
	} else {
		add(-1, "loadavg_1m", "")
	}
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"); err == nil {
		g := strings.TrimSpace(string(b))
		add(-1, "cpu_governor", g)
		if g != "performance" {
			h.Warnings = append(h.Warnings, fmt.Sprintf("CPU frequency governor is %q (not performance): CPU-bound phases may vary", g))
		}
	} else {
		add(-1, "cpu_governor", "")
	}
	cvd, set := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	if !set {
		cvd = "(unset)"
	}
	add(-1, "CUDA_VISIBLE_DEVICES", cvd)
	return h
}

// coarseEnergyWarnings says, once per GPU for the whole result, that its
// energy counter was too coarse for some runs, so integrated power was used
// for them.
func coarseEnergyWarnings(bs []Benchmark) []string {
	type coarse struct {
		updateMS    float64
		runs        [][]int // per benchmark
		longestRunS float64
	}
	byDev := map[int]*coarse{}
	var order []int
	for bi, b := range bs {
		for _, r := range b.Runs {
			for _, d := range r.Devices {
				if !d.Energy.Coarse {
					continue
				}
				c := byDev[d.Index]
				if c == nil {
					c = &coarse{runs: make([][]int, len(bs))}
					byDev[d.Index] = c
					order = append(order, d.Index)
				}
				c.updateMS = max(c.updateMS, float64(d.Energy.CounterUpdateMS))
				c.runs[bi] = append(c.runs[bi], r.Index)
				c.longestRunS = max(c.longestRunS, float64(r.WallS))
			}
		}
	}
	var out []string
	for _, dev := range order {
		c := byDev[dev]
		var which []string
		for bi, runs := range c.runs {
			switch {
			case len(runs) == 0:
			case len(bs) == 1:
				which = append(which, runList(runs, len(bs[bi].Runs)))
			default:
				which = append(which, runList(runs, len(bs[bi].Runs))+" of "+bs[bi].Name)
			}
		}
		out = append(out, fmt.Sprintf("GPU %d: energy counter updates every %.0f ms, too coarse for %s (up to %.3f s): integrated power used",
			dev, c.updateMS, strings.Join(which, " and "), c.longestRunS))
	}
	return out
}

// runList names runs for a reader: "all 10 runs", "run 3", "runs 1, 4".
func runList(runs []int, total int) string {
	switch {
	case len(runs) == total && total > 1:
		return fmt.Sprintf("all %d runs", total)
	case len(runs) == 1:
		return fmt.Sprintf("run %d", runs[0])
	}
	parts := make([]string, len(runs))
	for i, n := range runs {
		parts[i] = strconv.Itoa(n)
	}
	return "runs " + strings.Join(parts, ", ")
}

// outlierReason names what is known to set run i of b apart: clocks
// throttled in it (and not in most runs), a thermal climb, a foreign
// process, or being the first run (a warm-up effect). "" when none is known.
func outlierReason(b *Benchmark, i int) string {
	r := &b.Runs[i]
	var reasons []string
	// Throttling seen in this run.
	for _, d := range r.Devices {
		for _, k := range sortedKeys(d.ThrottleMS) {
			if v := d.ThrottleMS[k]; v.Known() && v > 0 && !strings.HasPrefix(k, "violation_low_util") {
				reasons = append(reasons, fmt.Sprintf("GPU %d clocks throttled (%s %.0f ms)", d.Index, k, float64(v)))
			}
		}
	}
	// A thermal climb: this run's peak temperature well above the others'.
	for j, d := range r.Devices {
		var others []float64
		for k := range b.Runs {
			if k != i && j < len(b.Runs[k].Devices) {
				others = append(others, float64(b.Runs[k].Devices[j].TempPeakC))
			}
		}
		if med := Median(known(others)); d.TempPeakC.Known() && !math.IsNaN(med) && float64(d.TempPeakC) >= med+5 {
			reasons = append(reasons, fmt.Sprintf("GPU %d ran hotter (peak %.0f °C against a median of %.0f °C)", d.Index, float64(d.TempPeakC), med))
		}
	}
	if len(r.others) > 0 {
		reasons = append(reasons, "another process used the GPU ("+strings.Join(r.others, ", ")+")")
	}
	if i == 0 && len(reasons) == 0 {
		reasons = append(reasons, "the first run: a warm-up effect (consider --warmup)")
	}
	return strings.Join(reasons, "; ")
}
