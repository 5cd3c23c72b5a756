package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/diagnose"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// Defaults of a benchmark.
const (
	DefaultRuns          = 10
	DefaultBaseline      = 3 * time.Second
	DefaultFieldInterval = 100 * time.Millisecond // 10 Hz
	// DefaultDrainInterval is short so the buffers' samples of the last run
	// arrive soon after it ends.
	DefaultDrainInterval = 250 * time.Millisecond
	// slowInterval is how often a benchmark reads slow state, GPM and
	// processes: once a second, above the long-running defaults, because
	// its runs are short.
	slowInterval = time.Second
)

// Command is one benchmarked command.
type Command struct {
	// Name is "A" or "B".
	Name string
	// Argv is executed directly, or as `sh -c Argv[0]` when Shell is set.
	Argv  []string
	Shell bool
}

func (c Command) String() string {
	if c.Shell {
		return c.Argv[0]
	}
	return strings.Join(c.Argv, " ")
}

func (c Command) cmd(ctx context.Context) *exec.Cmd {
	var cmd *exec.Cmd
	if c.Shell {
		cmd = exec.CommandContext(ctx, "/bin/sh", "-c", c.Argv[0])
	} else {
		cmd = exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	}
	// The command runs in its own process group, so that a Ctrl-C on the
	// terminal reaches gpusampler only (which then lets the run finish); on
	// a stop-now the group gets SIGINT, then SIGKILL after StopGrace.
	ownProcessGroup(cmd)
	cmd.WaitDelay = StopGrace
	return cmd
}

// StopGrace is how long an interrupted command has between SIGINT and
// SIGKILL.
const StopGrace = 3 * time.Second

// ProgressEvent reports one finished run (or warmup) to Options.Progress.
type ProgressEvent struct {
	Command string
	// Warmup is set for warmup runs; Run counts from 1 within its kind.
	Warmup bool
	Run    int
	// Done and Total count every execution (warmups included, all
	// commands).
	Done, Total int
	Wall        time.Duration
	ExitCode    int
}

// Options configure a benchmark. Commands holds A, and B for an A/B
// comparison: the runs are interleaved in pairs whose order alternates (A
// B, B A, A B, ...: PairOrder), so that neither command always runs first,
// and run i of A and run i of B are analysed as a pair.
type Options struct {
	Commands []Command
	// Runs measured per command (≥ 1) and Warmup runs before them.
	Runs, Warmup int
	// Baseline is the idle measurement before the runs (0: none).
	Baseline time.Duration
	// FieldInterval and DrainInterval configure the engine (defaults
	// DefaultFieldInterval, DefaultDrainInterval).
	FieldInterval, DrainInterval time.Duration
	// Devices selects the GPUs (nil: all).
	Devices func(record.Device) bool
	// Selection describes the device selection for the record.
	Selection string
	// ShowOutput passes the command's stdout and stderr to Output;
	// otherwise they are discarded (the stderr tail is kept for errors).
	ShowOutput bool
	Output     io.Writer
	// IgnoreFailure keeps going after a run exits non-zero.
	IgnoreFailure bool
	// Progress, when set, is called after every run from the runner's
	// goroutine.
	Progress func(ProgressEvent)
	// Live, when set, is called when a command starts (from Execute's
	// goroutine) and every LiveInterval while it runs (from a ticker
	// goroutine); calls never overlap each other or Progress.
	Live func(LiveStatus)
	// Stop, when closed, ends the benchmark after the current run; what was
	// measured is returned, marked partial (a first Ctrl-C). The end of
	// Execute's ctx stops at once: the running command is interrupted
	// (SIGINT to its process group, SIGKILL after StopGrace) and its run is
	// not recorded.
	Stop <-chan struct{}
	// Env is the commands' environment (nil: this process's); the runner
	// adds MarksEnv.
	Env []string
	// Tool is recorded in the result ("gpusampler VERSION").
	Tool string
	// Profile is the simulator's profile, recorded when simulated.
	Profile string
	// Compare configures the A/B comparison (its margin of "the same", the
	// --fail-if-slower limit); Paired is set by Execute.
	Compare CompareOptions
	// ReadyTimeout bounds the wait, before the baseline, for every GPU's
	// first readings (0: DefaultReadyTimeout).
	ReadyTimeout time.Duration
	Logger       *slog.Logger
}

// CommandError is a run that could not start, exited non-zero or was
// killed by a signal from outside gpusampler.
type CommandError struct {
	Command  string
	Run      int
	ExitCode int
	// Signal is the signal that ended the command (ExitCode is then 128 +
	// its number, as a shell reports it), 0 when it exited by itself.
	Signal syscall.Signal
	// Tail is the end of the command's stderr (when hidden).
	Tail string
	Err  error
}

func (e *CommandError) Error() string {
	var b strings.Builder
	switch {
	case e.Signal != 0:
		// Not a failure of the command: something stopped it (the kernel's
		// out-of-memory killer, a kill, a job scheduler).
		fmt.Fprintf(&b, "command %q run %d was killed by signal %d (%v) from outside gpusampler, so it did not complete "+
			"(exit status %d; --ignore-failure keeps going)", e.Command, e.Run, int(e.Signal), e.Signal, e.ExitCode)
	case e.ExitCode == 127:
		fmt.Fprintf(&b, "command %q run %d: exit status 127 (command not found?)", e.Command, e.Run)
	case e.ExitCode > 128 && e.ExitCode <= 128+64:
		fmt.Fprintf(&b, "command %q run %d ended with exit status %d, which a shell reports for a program killed by signal %d (%v) "+
			"(--ignore-failure keeps going)", e.Command, e.Run, e.ExitCode, e.ExitCode-128, syscall.Signal(e.ExitCode-128))
	case e.ExitCode > 0:
		fmt.Fprintf(&b, "command %q run %d failed: exit status %d (use --ignore-failure to keep going)", e.Command, e.Run, e.ExitCode)
	default:
		fmt.Fprintf(&b, "command %q run %d: %v", e.Command, e.Run, e.Err)
	}
	if t := strings.TrimSpace(e.Tail); t != "" {
		fmt.Fprintf(&b, "\n--- its stderr (end) ---\n%s", t)
	}
	return b.String()
}

func (e *CommandError) Unwrap() error { return e.Err }

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// tailBuffer keeps the last n bytes written.
type tailBuffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.n {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.n:]...)
	}
	t.mu.Unlock()
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// benchMetric selects what a benchmark samples: what the report uses,
// nothing more (every NVML call costs the workload).
func benchMetric(m *catalog.Metric) bool {
	switch m.Group {
	case catalog.GroupPower, catalog.GroupThrottle, catalog.GroupTemperature:
		return m.ID != catalog.MetricFanSpeed
	case catalog.GroupUtilization:
		return m.ID == catalog.MetricUtilGPU || m.ID == catalog.MetricUtilMemory || strings.Contains(m.Name, "sm_active") ||
			strings.Contains(m.Name, "tensor")
	case catalog.GroupClocks:
		return m.ID == catalog.MetricClockSM || m.ID == catalog.MetricClockMemory || m.ID == catalog.MetricPState
	case catalog.GroupMemory:
		return m.ID == catalog.MetricMemoryUsed || m.ID == catalog.MetricMemoryTotal
	case catalog.GroupHealth:
		return m.ID == catalog.MetricXIDCount
	case catalog.GroupPCIe, catalog.GroupNVLink:
		// link traffic and capacity, for the communication-bound diagnosis
		return m.Kind == catalog.Counter || m.ID == catalog.MetricPCIeLinkGen || m.ID == catalog.MetricPCIeLinkWidth
	}
	switch m.ID {
	case catalog.MetricPCIeTxRate, catalog.MetricPCIeRxRate, catalog.MetricNVLinkTxRate, catalog.MetricNVLinkRxRate:
		return true
	}
	return strings.Contains(m.Name, "sm_active") || strings.Contains(m.Name, "tensor")
}

// execution is one run (or warmup) as it happened.
type execution struct {
	cmd        int
	warmup     bool
	run        int
	start, end time.Time
	exitCode   int
	// signal ended the command from outside, 0 when it exited by itself.
	signal         syscall.Signal
	marks          []Mark
	badMarks       int
	runtimeWarning string
	// tail is the end of the command's stderr (when hidden).
	tail string
	// oom is the first out-of-memory message on the command's stderr, nil
	// when none.
	oom *oomEvent
	// cpus are the CPUs the command's process could run on (last reading
	// while it ran), nil when unknown.
	cpus []int
	// interrupted: the user stopped the benchmark during this execution; it
	// is incomplete and not recorded.
	interrupted bool
}

// Execute benchmarks opts.Commands on src's GPUs and returns the result. It
// owns src: the engine closes it. On a failing command (without
// IgnoreFailure) it returns the result so far together with a
// *CommandError.
func Execute(ctx context.Context, src sampler.Source, opts Options) (*Result, error) {
	if len(opts.Commands) == 0 || len(opts.Commands[0].Argv) == 0 {
		src.Close()
		return nil, errors.New("bench: no command")
	}
	if opts.Runs < 1 {
		src.Close()
		return nil, fmt.Errorf("bench: runs %d: must be at least 1", opts.Runs)
	}
	if opts.FieldInterval == 0 {
		opts.FieldInterval = DefaultFieldInterval
	}
	if opts.DrainInterval == 0 {
		opts.DrainInterval = DefaultDrainInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	col := NewCollector(nil)
	owner := newProcOwner()
	det := diagnose.New(col.AddEvent)
	// Select picks metrics only: per-process polling (events, for the
	// hygiene's other processes) stays on. Every buffer is held to the
	// drain interval, and slow state, GPM and processes are read every
	// slowInterval.
	eng, err := sampler.New(src, sampler.Config{FieldInterval: opts.FieldInterval, DrainInterval: opts.DrainInterval,
		SecondaryDrainInterval: opts.DrainInterval, SlowInterval: slowInterval, GPMInterval: slowInterval,
		ProcessInterval: slowInterval,
		Observer:        det, Devices: opts.Devices, Select: benchMetric, Logger: opts.Logger})
	if err != nil {
		src.Close()
		return nil, err
	}
	if err := eng.AddOutput("bench", col, sampler.PumpOptions{FlushInterval: 50 * time.Millisecond}); err != nil {
		return nil, err
	}
	marks, err := NewMarkReader()
	if err != nil {
		opts.Logger.Warn("step marks unavailable", "err", err)
		marks = nil
	} else {
		defer marks.Close()
	}

	engCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(engCtx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		stopEngine()
		return <-engDone
	}
	defer stop()

	created := time.Now()
	devs := eng.Devices()
	// Simulated processes have invented PIDs: never ours.
	if len(devs) > 0 && !devs[0].Simulated {
		col.mu.Lock()
		col.owner = owner
		col.mu.Unlock()
	}
	idx := make([]int, len(devs))
	for i, d := range devs {
		idx[i] = d.Index
	}
	// Nothing is measured before every GPU has delivered readings newer
	// than the engine's start (its sample buffers drained once, its fields
	// read): a run or baseline that began earlier would miss its first
	// readings, and the live display would have none to show. A GPU that
	// never reports both kinds only delays the start by the ready timeout.
	ready := opts.ReadyTimeout
	if ready <= 0 {
		ready = DefaultReadyTimeout
	}
	if !col.WaitPast(ctx, idx, created.UnixNano(), ready) && ctx.Err() == nil {
		opts.Logger.Info("sampler not reporting every GPU yet; starting anyway", "waited", ready)
	}
	// Baseline: idle, before the runs.
	var baseFrom, baseTo int64
	if opts.Baseline > 0 {
		baseFrom = time.Now().UnixNano()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-opts.Stop:
			return nil, ErrInterrupted
		case <-time.After(opts.Baseline):
		}
		baseTo = time.Now().UnixNano()
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	if marks != nil {
		env = append(slices.Clone(env), MarksEnv+"="+marks.Path())
	}
	rl := &runLoop{opts: &opts, col: col, owner: owner, marks: marks, env: env, idx: idx}
	execs, runErr, partial := rl.runAll(ctx)
	// The last run's final samples arrive with the next drain and field
	// read: wait for them, then stop the engine (a final drain; the
	// detectors close their findings).
	if len(execs) > 0 {
		last := execs[len(execs)-1].end.UnixNano()
		col.WaitPast(ctx, idx, last, 2*opts.DrainInterval+2*opts.FieldInterval+500*time.Millisecond)
	}
	if err := stop(); err != nil {
		opts.Logger.Warn("stopping the sampler", "err", err)
	}
	polled := map[int]bool{}
	for _, ds := range eng.Stats().Devices {
		polled[ds.Index] = ds.ProcessPolls > 0
	}
	if len(execs) == 0 {
		switch {
		case runErr != nil:
		case partial != "":
			runErr = ErrInterrupted
		default:
			runErr = errors.New("bench: no run completed")
		}
		return nil, runErr
	}
	ours := func(int) bool { return false }
	if col.owner != nil {
		ours = owner.Ours
	}
	gpuCPUs := map[int][]int{}
	for _, d := range devs {
		if cpus, err := eng.CPUAffinity(d.Index); err == nil {
			gpuCPUs[d.Index] = cpus
		}
	}
	res := assemble(col, devs, opts, created, baseFrom, baseTo, execs, procInfo{polled: polled, ours: ours, gpuCPUs: gpuCPUs})
	if partial != "" {
		res.Partial = true
		res.Warnings = append(res.Warnings, partial)
	}
	return res, runErr
}

// DefaultReadyTimeout bounds the wait, before the baseline, for every GPU's
// first readings when Options.ReadyTimeout is 0.
const DefaultReadyTimeout = 2 * time.Second

// ErrInterrupted: the benchmark was stopped before any run completed.
var ErrInterrupted = errors.New("bench: interrupted before any run completed")

// PairOrder names the order of an A/B benchmark's runs: pairs alternate
// between A B and B A (A B B A A B ...), warmups too, so that an order
// effect (the second of two runs finding warm caches, or a clock that
// ramped up during the first) falls on both commands alike instead of
// reading as a difference between them.
const PairOrder = "ABBA"

// runLoop runs the executions of a benchmark: warmups, then the measured
// runs, interleaving the commands in pairs of alternating order
// (PairOrder).
type runLoop struct {
	opts  *Options
	col   *Collector
	owner *procOwner
	marks *MarkReader
	env   []string
	idx   []int
	// done counts finished executions; spent is their total wall time
	// (for the estimate of the time left).
	done  int
	spent time.Duration
}

func (rl *runLoop) total() int {
	return (rl.opts.Warmup + rl.opts.Runs) * len(rl.opts.Commands)
}

// runAll runs every execution until the end, a failure, Stop (after the
// current run) or ctx's end (at once: the running command is interrupted
// and not recorded). partial says why it stopped early, "" when it did not.
func (rl *runLoop) runAll(ctx context.Context) (execs []execution, runErr error, partial string) {
	opts := rl.opts
	stopped := func() bool {
		select {
		case <-opts.Stop:
			return true
		default:
			return ctx.Err() != nil
		}
	}
	for _, warm := range []bool{true, false} {
		n := opts.Runs
		if warm {
			n = opts.Warmup
		}
		for i := range n {
			for _, ci := range pairOrder(len(opts.Commands), i) {
				c := opts.Commands[ci]
				if stopped() {
					return execs, nil, rl.partial(len(execs))
				}
				ex, err := rl.runOne(ctx, ci, c, warm, i)
				if ex.interrupted {
					return execs, nil, rl.partial(len(execs))
				}
				if err != nil {
					return execs, err, ""
				}
				if !warm {
					execs = append(execs, ex)
				}
				if ex.exitCode != 0 && (!opts.IgnoreFailure || ex.exitCode == 127) {
					return execs, &CommandError{Command: c.String(), Run: i + 1, ExitCode: ex.exitCode, Signal: ex.signal, Tail: ex.tail}, ""
				}
			}
		}
	}
	return execs, nil, ""
}

// pairOrder is the order of the commands in pair i: 0 1 for even i, 1 0
// for odd i (one command: 0).
func pairOrder(commands, i int) []int {
	order := make([]int, commands)
	for k := range order {
		order[k] = k
		if i%2 == 1 {
			order[k] = commands - 1 - k
		}
	}
	return order
}

func (rl *runLoop) partial(measured int) string {
	return fmt.Sprintf("PARTIAL: interrupted after %d of %d measured runs; the numbers cover those runs only", measured,
		rl.opts.Runs*len(rl.opts.Commands))
}

// runOne runs one execution, reporting live progress while it runs.
func (rl *runLoop) runOne(ctx context.Context, ci int, c Command, warm bool, i int) (execution, error) {
	opts := rl.opts
	ex := execution{cmd: ci, warmup: warm, run: i}
	cmd := c.cmd(ctx)
	cmd.Env = rl.env
	tail := &tailBuffer{n: 4096}
	oom := &oomWatch{}
	if opts.ShowOutput {
		// stdout and stderr are copied by two goroutines once they differ
		out := &lockedWriter{w: opts.Output}
		cmd.Stdout, cmd.Stderr = out, io.MultiWriter(out, oom)
	} else {
		cmd.Stderr = io.MultiWriter(tail, oom)
	}
	if rl.marks != nil {
		rl.marks.Begin()
	}
	ex.start = time.Now()
	err := cmd.Start()
	if err == nil {
		rl.owner.Started(cmd.Process.Pid)
		stopLive := rl.live(c.Name, warm, i, ex.start)
		cpus := watchAffinity(cmd.Process.Pid)
		err = cmd.Wait()
		ex.cpus = cpus()
		stopLive()
	}
	ex.end = time.Now()
	if rl.marks != nil {
		ex.marks, ex.badMarks = rl.marks.End(time.Second)
	}
	ex.tail = tail.String()
	ex.oom = oom.first()
	if ctx.Err() != nil {
		// Stopped by the user: the run is incomplete, not failed.
		ex.interrupted = true
		return ex, nil
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ex.exitCode = ee.ExitCode()
		if ex.exitCode < 0 {
			ex.exitCode, ex.signal = 128+9, syscall.SIGKILL // killed by a signal
			if ws, ok := ee.Sys().(interface{ Signal() syscall.Signal }); ok {
				ex.exitCode, ex.signal = 128+int(ws.Signal()), ws.Signal()
			}
		}
	default:
		return ex, &CommandError{Command: c.String(), Run: i + 1, ExitCode: -1, Err: err}
	}
	rl.done++
	rl.spent += ex.end.Sub(ex.start)
	if opts.Progress != nil {
		opts.Progress(ProgressEvent{Command: c.Name, Warmup: warm, Run: i + 1, Done: rl.done, Total: rl.total(),
			Wall: ex.end.Sub(ex.start), ExitCode: ex.exitCode})
	}
	return ex, nil
}

// live calls Options.Live when a command starts and every LiveInterval while
// it runs, until the returned function is called.
func (rl *runLoop) live(name string, warm bool, i int, start time.Time) func() {
	if rl.opts.Live == nil {
		return func() {}
	}
	// The first status at once, so that even a run shorter than
	// LiveInterval shows what it is.
	rl.opts.Live(rl.status(name, warm, i, time.Since(start)))
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(LiveInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				rl.opts.Live(rl.status(name, warm, i, now.Sub(start)))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// LiveInterval is how often Options.Live is called while a command runs.
const LiveInterval = 250 * time.Millisecond

func (rl *runLoop) status(name string, warm bool, i int, elapsed time.Duration) LiveStatus {
	st := LiveStatus{Command: name, Warmup: warm, Run: i + 1, Done: rl.done, Total: rl.total(), Elapsed: elapsed, Remaining: -1}
	if rl.done > 0 {
		mean := rl.spent / time.Duration(rl.done)
		left := rl.total() - rl.done - 1 // after this one
		st.Remaining = time.Duration(left)*mean + max(mean-elapsed, 0)
	}
	for _, d := range rl.idx {
		g := LiveGPU{Index: d, PowerW: math.NaN(), UtilPct: math.NaN(), SMClockMHz: math.NaN()}
		if v, ok := rl.col.Latest(d, catalog.MetricPowerDraw); ok {
			g.PowerW = v
		}
		if v, ok := rl.col.Latest(d, catalog.MetricUtilGPU); ok {
			g.UtilPct = v
		}
		if v, ok := rl.col.Latest(d, catalog.MetricClockSM); ok {
			g.SMClockMHz = v
		}
		st.GPUs = append(st.GPUs, g)
	}
	return st
}

// LiveStatus is what Options.Live receives while a command runs.
type LiveStatus struct {
	Command string
	Warmup  bool
	// Run numbers the run from 1 within its kind (warmup or measured).
	Run int
	// Done and Total count finished and all executions (warmups included).
	Done, Total int
	// Elapsed is the current run's time so far; Remaining estimates the
	// time left for the whole benchmark (-1 before a run has finished).
	Elapsed, Remaining time.Duration
	// GPUs holds each GPU's newest power, utilization and SM clock (NaN
	// when none has arrived yet).
	GPUs []LiveGPU
}

// LiveGPU is one GPU's newest readings in a LiveStatus.
type LiveGPU struct {
	Index                       int
	PowerW, UtilPct, SMClockMHz float64
}
