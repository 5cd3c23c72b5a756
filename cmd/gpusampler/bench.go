package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpusampler/gpusampler/bench"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

const benchUsage = `usage: gpusampler bench [flags] -- CMD [ARGS...]
       gpusampler bench compare [--fail-if-slower PCT] [--same-within PCT] A.json B.json

Runs CMD --runs times (after --warmup runs) while sampling the GPUs at
sub-second resolution, after an idle baseline; reports wall time, energy,
power, utilization and clock distributions, throttling, per-step numbers
(step marks: see bench/README.md) and diagnoses. --vs 'CMD B' runs a second
command interleaved in pairs of alternating order (A B, B A, A B, ...) and
compares them pair by pair. One argument containing spaces or shell syntax
runs through sh -c; A and B are always started the same way (both executed
directly, or both through sh -c when either needs a shell).

GPUs: --devices (indexes or UUIDs), else CUDA_VISIBLE_DEVICES, else all.
--gpus is the number of SIMULATED GPUs, as for run.

flags:
`

// benchFlags are the bench command's options.
type benchFlags struct {
	bf                     backendFlags
	devices                string
	runs, warmup           int
	baseline               time.Duration
	field, drain           positiveDuration
	vs                     string
	failIfSlower           float64
	sameWithin             float64
	showOutput, ignoreFail bool
	exportJSON, exportMD   string
	exportCSV, exportSVG   string
	simElapsed             time.Duration
	logLevel               string
	noProgress             bool
	failIfSlowerSet, vsSet bool
	devicesSet             bool
}

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "compare" {
		return cmdBenchCompare(args[1:], stdout, stderr)
	}
	fs := newFlagSet("bench", stderr)
	var o benchFlags
	o.bf.register(fs)
	fs.StringVar(&o.devices, "devices", "", "GPUs to sample: indexes or UUIDs, comma-separated (default: CUDA_VISIBLE_DEVICES, else all)")
	fs.IntVar(&o.runs, "runs", bench.DefaultRuns, "measured runs per command")
	fs.IntVar(&o.warmup, "warmup", 0, "warmup runs per command before measuring (not recorded)")
	fs.DurationVar(&o.baseline, "baseline", bench.DefaultBaseline, "idle baseline measured before the runs (0 for none)")
	fs.Var(&o.field, "field-interval", "fast-field read interval: power, energy, throttle counters (default 100ms = 10 Hz)")
	fs.Var(&o.drain, "drain-interval", "sample-buffer drain interval (default 250ms)")
	fs.StringVar(&o.vs, "vs", "", "a second command (B), interleaved with the first (A) in pairs of alternating order: A B, B A, ...")
	fs.Float64Var(&o.failIfSlower, "fail-if-slower", 0, "with --vs: exit 1 when the comparison calls B slower than A by more than PCT percent (for CI)")
	fs.Float64Var(&o.sameWithin, "same-within", 0, "with --vs: the margin in percent within which A and B are called the same (default: what the runs resolve, at most 1)")
	fs.BoolVar(&o.showOutput, "show-output", false, "pass the command's stdout and stderr through (to stderr); hidden by default")
	fs.BoolVar(&o.ignoreFail, "ignore-failure", false, "keep going when a run exits non-zero (default: stop and report it)")
	fs.StringVar(&o.exportJSON, "export-json", "", "write the results as JSON (schema: bench/README.md) to FILE")
	fs.StringVar(&o.exportMD, "export-markdown", "", "write a Markdown summary to FILE")
	fs.StringVar(&o.exportCSV, "export-csv", "", "write every raw sample as CSV to FILE")
	fs.StringVar(&o.exportSVG, "export-svg", "", "write a self-contained SVG report (charts per GPU over time, runs and steps shaded) to FILE")
	fs.DurationVar(&o.simElapsed, "sim-elapsed", 60*time.Second, "simulator only: start the simulated workload as if it had been running this long (its steady state)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	fs.BoolVar(&o.noProgress, "no-progress", false, "no progress output on stderr")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fmt.Fprint(stdout, benchUsage)
		fs.PrintDefaults()
		return errHelp
	}
	if err != nil {
		return usagef("%s", err)
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "fail-if-slower":
			o.failIfSlowerSet = true
		case "vs":
			o.vsSet = true
		case "devices":
			o.devicesSet = true
		}
	})
	argv := fs.Args()
	if len(argv) == 0 {
		return usagef("no command to benchmark: gpusampler bench [flags] -- CMD [ARGS...]")
	}
	if o.runs < 1 {
		return usagef("--runs %d: must be at least 1", o.runs)
	}
	if o.warmup < 0 {
		return usagef("--warmup %d: must not be negative", o.warmup)
	}
	if o.baseline < 0 {
		return usagef("--baseline %v: must not be negative", o.baseline)
	}
	if o.failIfSlowerSet && !o.vsSet {
		return usagef("--fail-if-slower needs --vs (or use: gpusampler bench compare --fail-if-slower PCT A.json B.json)")
	}
	if o.failIfSlower < 0 {
		return usagef("--fail-if-slower %g: must not be negative", o.failIfSlower)
	}
	if o.sameWithin < 0 || math.IsNaN(o.sameWithin) || math.IsInf(o.sameWithin, 0) {
		return usagef("--same-within %g: must be a positive percentage", o.sameWithin)
	}
	if o.vsSet && strings.TrimSpace(o.vs) == "" {
		return usagef("--vs: empty command")
	}
	if err := o.bf.validate(); err != nil {
		return err
	}
	cmds := commands(argv, o.vs, o.vsSet)
	for _, c := range cmds {
		if err := checkCommand(c); err != nil {
			return err
		}
	}
	log, err := newLogger(stderr, o.logLevel)
	if err != nil {
		return err
	}
	devFilter, selection, devList, err := deviceSelection(o.devices, o.devicesSet, stderr)
	if err != nil {
		return err
	}
	for _, p := range []string{o.exportJSON, o.exportMD, o.exportCSV, o.exportSVG} {
		if p != "" {
			if err := checkWritable(p); err != nil {
				return err
			}
		}
	}
	if o.simElapsed > 0 {
		d := o.simElapsed
		o.bf.simOptions = func(so *sim.Options) { so.Now = agedClock(d) }
	}
	src, err := o.bf.open(stderr, log)
	if err != nil {
		return err
	}
	if devList != "" {
		if err := selectsEveryEntry(src, devList); err != nil {
			src.Close()
			return usagef("%s: %v", selection, err)
		}
	}
	opts := bench.Options{Commands: cmds, Runs: o.runs, Warmup: o.warmup, Baseline: o.baseline,
		FieldInterval: o.field.d, DrainInterval: o.drain.d, Devices: devFilter, Selection: selection,
		ShowOutput: o.showOutput, Output: stderr, IgnoreFailure: o.ignoreFail, Tool: "gpusampler " + version,
		Profile: o.bf.profile, ReadyTimeout: benchReadyTimeout, Logger: log,
		Compare: bench.CompareOptions{SameWithinPct: o.sameWithin, FailIfSlower: o.failIfSlowerSet, FailIfSlowerPct: o.failIfSlower}}
	if !o.noProgress {
		opts.Progress = newProgress(stderr)
		if isTerminal(stderr) {
			opts.Live = newLiveLine(stderr)
		}
	}
	if o.baseline > 0 && !o.noProgress {
		fmt.Fprintf(stderr, "measuring the idle baseline (%v)...\n", o.baseline)
	}
	runCtx, stop, done := benchInterrupts(ctx, stderr)
	defer done()
	opts.Stop = stop
	res, runErr := bench.Execute(runCtx, src, opts)
	if res == nil {
		if errors.Is(runErr, bench.ErrInterrupted) {
			return errInterrupted{errors.New("interrupted before any run completed: nothing to report")}
		}
		return runErr
	}
	if err := bench.WriteTable(stdout, res); err != nil {
		return err
	}
	if err := exportAll(res, o); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	if res.Partial {
		return errInterrupted{errors.New("interrupted: the report above covers the completed runs only (partial)")}
	}
	if o.failIfSlowerSet && res.Comparison != nil {
		return checkSlower(res.Comparison, o.failIfSlower, stderr)
	}
	return nil
}

// agedClock is time.Now, except that its first reading lies d in the past:
// the simulator takes its start from that first reading, so its workload
// looks as if it had been running for d (its profiles evolve over the
// first minute: thermal ramp, memory climb, stall rhythm).
func agedClock(d time.Duration) func() time.Time {
	var first atomic.Bool
	return func() time.Time {
		if first.CompareAndSwap(false, true) {
			return time.Now().Add(-d)
		}
		return time.Now()
	}
}

// benchReadyTimeout is how long bench waits for every GPU's first readings
// before it starts anyway (a test that asserts the live values of the first
// run raises it, so that a loaded machine cannot start a run before them).
var benchReadyTimeout = bench.DefaultReadyTimeout

var simpleWord = regexp.MustCompile(`^[A-Za-z0-9_./+-]+$`)

// shellSyntax are the characters that make a command line need a shell.
const shellSyntax = "|;&<>()$`'\"*?[]{}~\\#"

// needsShell reports whether a command line needs sh -c: shell syntax, a
// variable assignment before the program, or a shell builtin or keyword.
func needsShell(line string) bool {
	words := strings.Fields(line)
	return len(words) == 0 || strings.ContainsAny(line, shellSyntax) || strings.Contains(words[0], "=") ||
		slices.Contains(shellWords, words[0])
}

// commands builds A (argv, after --) and B (--vs, a command line) so that
// both start the same way: a shell's start costs time, and a side that pays
// it when the other does not is measured slower for it. A single argument
// with spaces or shell syntax is a command line for sh -c; B's line is
// split into words and executed directly when it has no shell syntax. When
// either side needs the shell, both run through sh -c (A's words quoted).
func commands(argv []string, vs string, vsSet bool) []bench.Command {
	a := bench.Command{Name: "A", Argv: argv}
	if len(argv) == 1 && (strings.ContainsAny(argv[0], " \t\n") || needsShell(argv[0])) {
		a.Shell = true
	}
	if !vsSet {
		return []bench.Command{a}
	}
	b := bench.Command{Name: "B", Argv: []string{vs}, Shell: true}
	if !needsShell(vs) {
		b = bench.Command{Name: "B", Argv: strings.Fields(vs)}
	}
	if a.Shell != b.Shell {
		if !a.Shell {
			a = bench.Command{Name: "A", Argv: []string{shellQuote(argv)}, Shell: true}
		}
		b = bench.Command{Name: "B", Argv: []string{vs}, Shell: true}
	}
	return []bench.Command{a, b}
}

// shellQuote joins words into a command line sh -c runs as those words:
// each word that is not plain is single-quoted.
func shellQuote(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		if w != "" && simpleWord.MatchString(w) {
			q[i] = w
			continue
		}
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// shellWords that are not programs on PATH.
var shellWords = []string{"cd", "exec", ".", "true", "false", "exit", "export", "set", ":", "[", "test", "echo", "printf",
	"for", "if", "while", "until", "case", "{", "(", "time", "eval", "command", "source", "read", "ulimit", "umask", "wait", "kill", "trap"}

// checkCommand refuses a command whose program does not exist before any
// sampling starts (a usage error).
func checkCommand(c bench.Command) error {
	prog := c.Argv[0]
	if c.Shell {
		fields := strings.Fields(prog)
		if len(fields) == 0 {
			return usagef("command %s: empty", c.Name)
		}
		prog = fields[0]
		if strings.Contains(prog, "=") || !simpleWord.MatchString(prog) || slices.Contains(shellWords, prog) {
			return nil // the shell decides
		}
	}
	if _, err := exec.LookPath(prog); err != nil {
		return usagef("command %s: %q not found (%v)", c.Name, prog, errors.Unwrap(err))
	}
	return nil
}

func checkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return usagef("export file: %v", err)
	}
	return f.Close()
}

// deviceSelection builds the device filter: --devices, else
// CUDA_VISIBLE_DEVICES, else all. Entries are indexes (NVML's order, which
// is PCI bus order; CUDA's default order differs unless
// CUDA_DEVICE_ORDER=PCI_BUS_ID) or UUIDs (unique prefixes, like CUDA). It
// also returns where the selection came from and the list itself ("" for
// all GPUs).
func deviceSelection(flagVal string, flagSet bool, stderr io.Writer) (func(record.Device) bool, string, string, error) {
	list, origin := flagVal, "--devices "+flagVal
	if !flagSet {
		v, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES")
		if !ok {
			return nil, "all", "", nil
		}
		list, origin = v, "CUDA_VISIBLE_DEVICES="+v
		if strings.TrimSpace(v) == "" || strings.TrimSpace(v) == "-1" {
			return nil, "", "", usagef("CUDA_VISIBLE_DEVICES=%q hides every GPU: nothing to sample (unset it or pass --devices)", v)
		}
	}
	idx, uuids, _, err := parseDeviceList(list)
	if err != nil {
		return nil, "", "", usagef("%s: %v", origin, err)
	}
	if len(idx) > 0 && !flagSet && os.Getenv("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" {
		fmt.Fprintln(stderr, "gpusampler bench: note: CUDA_VISIBLE_DEVICES indexes are taken in NVML (PCI bus) order; set CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA agrees")
	}
	return func(d record.Device) bool {
		if slices.Contains(idx, d.Index) {
			return true
		}
		for _, u := range uuids {
			if strings.HasPrefix(d.UUID, u) {
				return true
			}
		}
		return false
	}, origin, list, nil
}

// selectsEveryEntry reports the entries of a device list (indexes, or UUID
// prefixes as deviceSelection takes them) that select no GPU of src: a
// benchmark of GPUs 0 and 7 on a machine without GPU 7 is an error, not a
// benchmark of GPU 0.
func selectsEveryEntry(src sampler.Source, list string) error {
	idx, uuids, _, err := parseDeviceList(list)
	if err != nil {
		return err
	}
	var entries []string
	for _, i := range idx {
		entries = append(entries, strconv.Itoa(i))
	}
	entries = append(entries, uuids...)
	return checkDevicesExist(src, entries, func(e string, d record.Device) bool {
		return e == strconv.Itoa(d.Index) || strings.HasPrefix(d.UUID, e)
	})
}

// newProgress returns a progress reporter: a bar redrawn in place on a
// terminal, plain lines otherwise.
func newProgress(w io.Writer) func(bench.ProgressEvent) {
	tty := isTerminal(w)
	return func(ev bench.ProgressEvent) {
		kind := "run"
		if ev.Warmup {
			kind = "warmup"
		}
		status := ""
		if ev.ExitCode != 0 {
			status = fmt.Sprintf(" (exit %d)", ev.ExitCode)
		}
		if !tty {
			fmt.Fprintf(w, "%s %s %d: %.3f s%s [%d/%d]\n", ev.Command, kind, ev.Run, ev.Wall.Seconds(), status, ev.Done, ev.Total)
			return
		}
		const width = 30
		n := width * ev.Done / max(ev.Total, 1)
		fmt.Fprintf(w, "\r\x1b[K[%s%s] %d/%d  %s %s %d: %.3f s%s", strings.Repeat("=", n), strings.Repeat(" ", width-n),
			ev.Done, ev.Total, ev.Command, kind, ev.Run, ev.Wall.Seconds(), status)
		if ev.Done == ev.Total {
			fmt.Fprintln(w)
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}

func exportAll(res *bench.Result, o benchFlags) error {
	write := func(path string, fn func(io.Writer, *bench.Result) error) error {
		if path == "" {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := fn(f, res); err != nil {
			f.Close()
			return fmt.Errorf("export %s: %w", path, err)
		}
		return f.Close()
	}
	return errors.Join(
		write(o.exportJSON, func(w io.Writer, r *bench.Result) error { return r.WriteJSON(w) }),
		write(o.exportMD, bench.WriteMarkdown),
		write(o.exportCSV, bench.WriteCSV),
		write(o.exportSVG, bench.WriteSVG),
	)
}

// errSlower is a CI regression: exit status 1.
type errSlower struct{ msg string }

func (e *errSlower) Error() string { return e.msg }

// checkSlower applies --fail-if-slower PCT: the comparison's own verdict
// decides (bench.Comparison.Regression), so that the exit status never
// contradicts the summary printed above it. A comparison that did not
// fail but could not rule out a slowdown beyond the limit says so on
// stderr.
func checkSlower(c *bench.Comparison, pct float64, stderr io.Writer) error {
	failed, msg := c.Regression(pct)
	if failed {
		return &errSlower{msg: msg}
	}
	if msg != "" {
		fmt.Fprintf(stderr, "gpusampler bench: --fail-if-slower %g: %s\n", pct, msg)
	}
	return nil
}

func cmdBenchCompare(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench compare", stderr)
	pct := fs.Float64("fail-if-slower", 0, "exit 1 when the comparison calls B slower than A by more than PCT percent")
	sameWithin := fs.Float64("same-within", 0, "the margin in percent within which A and B are called the same (default: what the runs resolve, at most 1)")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fmt.Fprint(stdout, "usage: gpusampler bench compare [--fail-if-slower PCT] [--same-within PCT] A.json B.json\n\n"+
			"The files' runs were not interleaved: they are compared as independent samples (Welch's t-test on log wall times).\n\nflags:\n")
		fs.PrintDefaults()
		return errHelp
	}
	if err != nil {
		return usagef("%s", err)
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "fail-if-slower" })
	if fs.NArg() != 2 {
		return usagef("compare needs two result files (from --export-json), got %d", fs.NArg())
	}
	if *pct < 0 {
		return usagef("--fail-if-slower %g: must not be negative", *pct)
	}
	if *sameWithin < 0 || math.IsNaN(*sameWithin) || math.IsInf(*sameWithin, 0) {
		return usagef("--same-within %g: must be a positive percentage", *sameWithin)
	}
	var bs [2]*bench.Benchmark
	var rs [2]*bench.Result
	for i, p := range fs.Args() {
		f, err := os.Open(p)
		if err != nil {
			return usagef("%v", err)
		}
		r, err := bench.ReadResult(f)
		f.Close()
		if err != nil {
			return usagef("%s: %v", p, err)
		}
		rs[i] = r
		b := r.Benchmarks[0]
		b.Name = fs.Arg(i)
		bs[i] = &b
	}
	// Runs from two files were made at different times: not pairs.
	c := bench.CompareResults(rs[0], bs[0], rs[1], bs[1], bench.CompareOptions{SameWithinPct: *sameWithin, FailIfSlower: set, FailIfSlowerPct: *pct})
	for i, r := range rs {
		if r.Simulated {
			fmt.Fprintf(stdout, "note: %s was measured on SIMULATED GPUs\n", fs.Arg(i))
		}
	}
	for _, b := range bs {
		s := b.Summary
		fmt.Fprintf(stdout, "%s: %d runs, wall %.3f ± %.3f s, energy %.1f J\n", b.Name, s.WallS.N, float64(s.WallS.Mean),
			float64(s.WallS.SD), float64(s.EnergyJ.Mean))
	}
	fmt.Fprintln(stdout, c.Summary)
	bench.WriteComparisonDiagnoses(stdout, &c)
	if set {
		return checkSlower(&c, *pct, stderr)
	}
	return nil
}

// errInterrupted ends bench with exit status 130, as a shell reports a
// program stopped by Ctrl-C.
type errInterrupted struct{ err error }

func (e errInterrupted) Error() string { return e.err.Error() }
func (e errInterrupted) ExitCode() int { return 130 }

// benchInterrupts turns SIGINT/SIGTERM into bench's two stages: the first
// (or the end of ctx) closes stop, so the benchmark ends after the current
// run with a partial report; the second cancels the returned context, which
// interrupts the running command at once. done releases the signals.
func benchInterrupts(ctx context.Context, stderr io.Writer) (run context.Context, stop <-chan struct{}, done func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopCh := make(chan struct{})
	quit := make(chan struct{})
	var once sync.Once
	stopAfterRun := func() {
		once.Do(func() {
			close(stopCh)
			fmt.Fprintln(stderr, "\ngpusampler bench: stopping after the current run (Ctrl-C again to stop now)")
		})
	}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		parent := ctx.Done()
		n := 0
		for {
			select {
			case <-quit:
				return
			case <-parent:
				parent = nil
				stopAfterRun()
			case <-sigs:
				if n++; n == 1 {
					stopAfterRun()
					continue
				}
				fmt.Fprintln(stderr, "gpusampler bench: stopping now: the running command is interrupted and not recorded")
				cancel()
				return
			}
		}
	}()
	// done waits for the goroutine: nothing it prints can race with what
	// the caller writes to stderr afterwards.
	return runCtx, stopCh, func() {
		signal.Stop(sigs)
		close(quit)
		<-exited
		cancel()
	}
}

// newLiveLine returns a display for a terminal: one line, redrawn a few
// times a second while a command runs, with the run, its elapsed time, an
// estimate of the time left and each GPU's power, utilization and SM clock.
func newLiveLine(w io.Writer) func(bench.LiveStatus) {
	return func(st bench.LiveStatus) {
		fmt.Fprintf(w, "\r\x1b[K%s", liveText(st))
	}
}

// liveText renders a LiveStatus as one line.
func liveText(st bench.LiveStatus) string {
	var b strings.Builder
	kind := "run"
	if st.Warmup {
		kind = "warmup"
	}
	fmt.Fprintf(&b, "%s %s %d  %.1f s", st.Command, kind, st.Run, st.Elapsed.Seconds())
	if st.Remaining >= 0 {
		fmt.Fprintf(&b, "  ~%s left", st.Remaining.Round(time.Second))
	}
	fmt.Fprintf(&b, "  [%d/%d]", st.Done, st.Total)
	num := func(v float64, unit string) string {
		if math.IsNaN(v) {
			return "-" + unit
		}
		return fmt.Sprintf("%.0f%s", v, unit)
	}
	for i, g := range st.GPUs {
		if i == 4 {
			fmt.Fprintf(&b, " | +%d GPUs", len(st.GPUs)-4)
			break
		}
		fmt.Fprintf(&b, " | GPU%d %s %s %s", g.Index, num(g.PowerW, " W"), num(g.UtilPct, "%"), num(g.SMClockMHz, " MHz"))
	}
	return b.String()
}
