package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/stdout"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

var errHelp = errors.New("help requested")

// positiveDuration is a duration flag that must be > 0 when given.
type positiveDuration struct {
	d   time.Duration
	set bool
}

func (p *positiveDuration) String() string { return p.d.String() }

func (p *positiveDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration (want e.g. 500ms, 10s, 1m)")
	}
	if d <= 0 {
		return fmt.Errorf("must be positive")
	}
	p.d, p.set = d, true
	return nil
}

// newFlagSet returns a flag set that reports errors as usageErrors instead
// of printing usage.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	_ = stderr
	return fs
}

// parseFlags parses args; -h prints the flags to stdout.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fmt.Fprintf(stdout, "usage: gpusampler %s [flags]\n\nflags:\n", fs.Name())
		fs.PrintDefaults()
		return errHelp
	}
	if err != nil {
		return usagef("%s", err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// backendFlags are shared by commands that open a backend.
type backendFlags struct {
	backend string
	profile string
	gpus    int
	seed    uint64
	// ctx, when set, bounds waiting for the driver (--backend nvml).
	ctx context.Context
	// simOptions, when set, adjusts the simulator's options before it
	// opens (bench: --sim-elapsed).
	simOptions func(*sim.Options)
	// noFallback makes auto fail when NVML does not open instead of
	// falling back to the simulator (doctor: a report on made-up GPUs is
	// no diagnosis of this machine).
	noFallback bool
}

func (b *backendFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.backend, "backend", "auto", "GPU backend: auto (NVML when the driver loads, else simulated), nvml, sim")
	fs.StringVar(&b.profile, "profile", "training", "simulated workload: "+strings.Join(sim.Profiles, ", "))
	fs.IntVar(&b.gpus, "gpus", 2, "number of simulated GPUs")
	fs.Uint64Var(&b.seed, "seed", 1, "simulator seed (same seed, same values)")
}

func (b *backendFlags) validate() error {
	switch b.backend {
	case "auto", "sim", "nvml":
	default:
		return usagef("unknown backend %q (want auto, nvml or sim)", b.backend)
	}
	if !sim.ValidProfile(b.profile) {
		return usagef("unknown profile %q (want one of: %s)", b.profile, strings.Join(sim.Profiles, ", "))
	}
	if b.gpus < 1 || b.gpus > 64 {
		return usagef("--gpus %d: must be between 1 and 64", b.gpus)
	}
	return nil
}

// open opens the chosen backend. With auto, a missing driver falls back to
// the simulator with a one-line notice on stderr.
func (b *backendFlags) open(stderr io.Writer, log *slog.Logger) (sampler.Source, error) {
	openSim := func() (sampler.Source, error) {
		o := sim.Options{GPUs: b.gpus, Profile: b.profile, Seed: b.seed}
		if b.simOptions != nil {
			b.simOptions(&o)
		}
		return sim.New(o)
	}
	switch b.backend {
	case "sim":
		return openSim()
	case "nvml":
		if b.ctx != nil {
			// A driver not loaded yet is waited for; giving up is a runtime
			// failure (exit 1), so the service manager restarts us.
			src, err := openNVMLWait(b.ctx, log)
			if errors.Is(err, sampler.ErrLibraryNotFound) {
				return nil, &usageError{msg: err.Error()}
			}
			return src, err
		}
		src, err := openNVML(log)
		if err != nil {
			return nil, &usageError{msg: err.Error()}
		}
		return src, nil
	}
	src, err := openNVML(log)
	if err == nil {
		return src, nil
	}
	if lib := os.Getenv("GPUSAMPLER_NVML_LIBRARY"); lib != "" {
		// A library the user named is never swapped for the simulator
		// behind their back.
		return nil, fmt.Errorf("GPUSAMPLER_NVML_LIBRARY=%s: %w", lib, err)
	}
	if b.noFallback {
		return nil, fmt.Errorf("%w (no report: doctor checks the real driver; --backend sim reports on simulated GPUs)", err)
	}
	fmt.Fprintf(stderr, "gpusampler: NVML unavailable (%v); using %d SIMULATED GPUs, profile %q — every record is marked simulated\n",
		err, b.gpus, b.profile)
	return openSim()
}

func newLogger(stderr io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("unknown log level %q (want debug, info, warn or error)", level)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l})), nil
}

// outputsGOGC is the GOGC of the process that runs the built-in network
// outputs (the environment of a plugin process is never inherited).
const outputsGOGC = "50"

// runGCPercent is the GC target of the run process itself unless GOGC is
// set in its environment: its live heap is mostly the ring lanes, and
// collecting at half the default growth keeps about 12 MiB less resident
// at steady state on 8 GPUs with four network outputs, for no CPU that
// make tree-rss (WARMUP=150) can tell apart.
const runGCPercent = 50

func cmdRun(ctx context.Context, args []string, stdin io.Reader, out, stderr io.Writer) error {
	fs := newFlagSet("run", stderr)
	var bf backendFlags
	bf.register(fs)
	var duration, drain, field positiveDuration
	fs.Var(&duration, "duration", "stop after this long (default: until SIGINT/SIGTERM)")
	fs.Var(&drain, "drain-interval", "freshness limit of the primary sample buffers (default 1s; shortened automatically to half a buffer's span)")
	fs.Var(&field, "field-interval", "field read interval: energy, throttle counters, instant power (default 1s)")
	format := fs.String("format", "influx", "stdout format without --config: "+strings.Join(stdout.Formats, ", ")+" (default: table on a terminal, influx when piped)")
	host := fs.String("host", "", "host name in records (default: [agent] hostname, else the machine's hostname)")
	devices := fs.String("devices", "", "GPUs to sample: indexes or UUIDs, comma-separated (default: [sampler] devices, else all)")
	logLevel := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	cfgPath := fs.String("config", "", "config file (see gpusampler config); SIGHUP reloads it")
	stats := fs.Bool("stats", false, "print a self-metrics summary to stderr every stats interval")
	execdMode := fs.String("execd", "", `run as a Telegraf inputs.execd program: "stream" (signal = "none"), "gather" (signal = "STDIN", window summaries) or "nvidia_smi" (signal = "STDIN", a drop-in for Telegraf's nvidia_smi input); exits when stdin closes`)
	minMax := fs.Bool("min-max", false, "with --execd nvidia_smi: each line also carries the window's NAME_min and NAME_max of the metrics written as a mean")
	strict := fs.Bool("strict", false, "exit at start when an output cannot start (default: run the others, report it failing in self-metrics, --stats and /healthz, and retry it with backoff)")
	diag := fs.Bool("diagnose", false, "live diagnoses: emit finding events (overheating, throttling, memory nearly full, launch-bound, periodic stalls, communication-bound, XID, NUMA placement of a GPU's processes)")
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(runGCPercent)
	}
	// Network outputs marked out of process run in one `gpusampler plugin
	// serve` child of this binary, each output an instance of its own.
	// outputsGOGC is that child's GC target: its live heap is a few MiB,
	// and collecting at half the default growth keeps about 3 MiB less of
	// it resident (make tree-rss, 8 GPUs, four network outputs).
	reg := plugins.HostRegistry(registry.Builtin(), plugins.HostOptions{Shared: true, Logger: log,
		Env: []string{"GOGC=" + outputsGOGC}})
	copts := appconfig.Options{Registry: reg}
	// An execd output (from --execd or the config) makes stdin Telegraf's:
	// a newline is a gather, EOF ends the run.
	var cancelRun context.CancelFunc
	ctx, cancelRun = context.WithCancel(ctx)
	defer cancelRun()
	rf := &runFlags{set: set, backend: bf, host: *host, devices: *devices, execd: *execdMode, minMax: *minMax, drain: drain, field: field,
		fromFile: *cfgPath != "", wiring: newExecdWiring(ctx, stdin, cancelRun)}
	var cfg *appconfig.Config
	// jobsView: the jobs table over a config's [sampler] and
	// [attribution] (gpusampler jobs --config FILE): an ad-hoc look beside
	// the service, which neither writes to the config's outputs nor
	// touches its state.
	jobsView := *cfgPath != "" && set["format"] && *format == "jobs"
	if *cfgPath != "" {
		if set["format"] && !jobsView {
			return usagef("--format applies only without --config (set format in [[outputs.stdout]]); --format jobs shows the config's per-job accounts")
		}
		if cfg, err = appconfig.Load(*cfgPath, copts); err != nil {
			return err
		}
		if jobsView {
			cfg.Attribution.Accounting = true
			cfg.Outputs = []*appconfig.Output{jobsOutput(cfg)}
		}
	} else {
		if !set["format"] && !set["execd"] && isTerminal(out) {
			// A person watching: the live table, not a flood of line protocol.
			*format = "table"
		}
		if !slices.Contains(stdout.Formats, *format) {
			return usagef("unknown format %q (want one of: %s)", *format, strings.Join(stdout.Formats, ", "))
		}
		if cfg, err = appconfig.Parse("(flags)", nil, copts); err != nil {
			return err
		}
		if *format == "jobs" {
			// The jobs table shows the per-job accounts.
			cfg.Attribution.Accounting = true
		}
		cfg.Outputs = []*appconfig.Output{stdoutOutput(cfg, *format)}
	}
	if set["execd"] && set["format"] {
		return usagef("--format does not apply with --execd (line protocol is what Telegraf reads)")
	}
	if set["min-max"] && *execdMode != "nvidia_smi" {
		return usagef("--min-max applies only with --execd nvidia_smi")
	}
	if err := rf.apply(cfg); err != nil {
		return err
	}
	warnNoOutputs(cfg, log)
	s := &cfg.Sampler
	if *cfgPath == "" && *format == "table" {
		watchingRates(s)
	}
	bf.backend, bf.profile, bf.gpus, bf.seed = s.Backend, s.Profile, s.GPUs, s.Seed
	if err := bf.validate(); err != nil {
		return err
	}
	machine, _ := os.Hostname()
	bf.ctx = ctx
	src, err := bf.open(stderr, log)
	if err != nil {
		return err
	}
	if set["devices"] {
		if err := checkDevicesExist(src, s.Devices, nil); err != nil {
			src.Close()
			return usagef("--devices %q: %v", *devices, err)
		}
	}
	// A closed stdout (`run | head -1`) ends only what writes to it: the
	// write fails with EPIPE instead of the signal ending the process (a
	// Notify for SIGPIPE, kept for the process's life: its exit may still
	// write), and stdoutWatch ends the run when nothing else is left.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	rf.loaded(cfg)
	watched := &stdoutWatch{w: out, gone: func() {
		if c := rf.current.Load(); c != nil && onlyStdout(c) {
			log.Info("stdout closed (its reader is gone): every output writes to it; ending the run")
			cancelRun()
			return
		}
		log.Warn("stdout closed (its reader is gone): outputs writing to it count their batches failed from now on; the other outputs go on")
	}}
	aopts := agent.Options{Registry: reg, Stdout: watched, Hostname: machine, Version: version, Logger: log,
		Diagnose: *diag, Strict: *strict}
	if jobsView {
		aopts.NoState = true
	}
	if *cfgPath == "" {
		// Without a config file the run is not the service: it never
		// touches the service's state (drain cursors). As a Telegraf execd
		// program, which Telegraf restarts, it keeps its own cursors in a
		// state directory of its own.
		if *execdMode != "" && cfg.Agent.StateDir == "" {
			if d, err := appconfig.DefaultStateDir(); err == nil {
				cfg.Agent.StateDir = filepath.Join(d, "execd")
			}
		} else if cfg.Agent.StateDir == "" {
			aopts.NoState = true
		}
	}
	if *stats {
		aopts.StatsWriter = stderr
	}
	a, err := agent.New(src, cfg, aopts)
	if err != nil {
		return err
	}
	if duration.set {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, duration.d)
		defer cancel()
	}
	// SIGHUP reloads --config. Without one there is nothing to reload, and
	// a hang-up (a closed terminal, a stray `kill -HUP`) is not a reason to
	// stop sampling: it is logged and ignored.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if *cfgPath == "" || jobsView {
					log.Warn("SIGHUP ignored: no --config to reload (the jobs view reads its config once)")
					continue
				}
				_ = reloadFile(a, *cfgPath, copts, rf, log) // a refused config is logged; the running one stays
			}
		}
	}()
	return a.Run(ctx)
}

// stdoutOutput is the stdout output of a run without --config.
func stdoutOutput(cfg *appconfig.Config, format string) *appconfig.Output {
	return &appconfig.Output{
		Block: outputs.Block{Kind: "stdout", Name: "stdout", Options: stdout.Options{Format: format}, Raw: map[string]any{"format": format},
			WriteTimeout: record.DefaultWriteTimeout},
		FlushInterval: cfg.Agent.FlushInterval, MaxBatch: sampler.DefaultMaxBatch}
}

// jobsOutput is the jobs view's one output: the jobs table on stdout.
func jobsOutput(cfg *appconfig.Config) *appconfig.Output { return stdoutOutput(cfg, "jobs") }

// watchingRates sets what the live table shows to move once a second: a
// person watching expects every value to, at more NVML calls than the
// defaults make (the secondary buffers, slow state, GPM and processes are
// read less often by default).
func watchingRates(s *appconfig.Sampler) {
	s.SecondaryDrainInterval = s.DrainInterval
	s.SlowInterval = max(time.Second, sampler.MinSlowInterval)
	s.RareInterval = max(s.RareInterval, s.SlowInterval)
	s.GPMInterval = time.Second
	s.ProcessInterval = time.Second
}

// runFlags are the flags of `gpusampler run` that change the config. apply
// puts them into a config, the one read at start and every one a SIGHUP
// reload reads, so that a reload keeps what the command line asked for.
type runFlags struct {
	set          map[string]bool // the flags given explicitly
	backend      backendFlags
	host         string
	devices      string
	execd        string
	minMax       bool // --min-max (with --execd nvidia_smi)
	drain, field positiveDuration
	fromFile     bool // the config came from --config
	wiring       *execdWiring
	// current is the config running: the one read at start, then each
	// reload the agent applied.
	current atomic.Pointer[appconfig.Config]
}

// loaded records cfg as the running config.
func (f *runFlags) loaded(cfg *appconfig.Config) { f.current.Store(cfg) }

// onlyStdout reports whether every output of cfg writes to stdout (stdout,
// execd), so that a closed stdout leaves nothing to run for.
func onlyStdout(cfg *appconfig.Config) bool {
	for _, o := range cfg.Outputs {
		if o.Kind != "stdout" && o.Kind != "execd" {
			return false
		}
	}
	return true
}

// stdoutWatch is the run's stdout as its outputs see it: the first write
// that finds the reader gone (EPIPE) calls gone, once. The output that
// wrote gets the error (a permanent one: see outputs/stdout).
type stdoutWatch struct {
	w    io.Writer
	once sync.Once
	gone func()
}

func (s *stdoutWatch) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil && errors.Is(err, syscall.EPIPE) {
		s.once.Do(s.gone)
	}
	return n, err
}

// apply overrides cfg with the flags given explicitly (without --config,
// the backend flags' defaults too) and wires execd outputs to stdin.
func (f *runFlags) apply(cfg *appconfig.Config) error {
	s := &cfg.Sampler
	b := f.backend
	if !f.fromFile || f.set["backend"] {
		s.Backend = b.backend
	}
	if !f.fromFile || f.set["profile"] {
		s.Profile = b.profile
	}
	if !f.fromFile || f.set["gpus"] {
		s.GPUs = b.gpus
	}
	if !f.fromFile || f.set["seed"] {
		s.Seed = b.seed
	}
	if f.set["devices"] {
		_, _, list, err := parseDeviceList(f.devices)
		if err != nil {
			return usagef("--devices %q: %v", f.devices, err)
		}
		s.Devices = list
	}
	if f.drain.set {
		s.DrainInterval = f.drain.d
		s.SecondaryDrainInterval = max(s.SecondaryDrainInterval, f.drain.d)
	}
	if f.field.set {
		s.FieldInterval = f.field.d
	}
	if f.host != "" {
		if err := appconfig.CheckTagText(f.host); err != nil {
			return fmt.Errorf("--host %q: %w", f.host, err)
		}
		cfg.Agent.Hostname = f.host
	}
	if f.set["execd"] {
		if err := addExecd(cfg, f.execd, f.minMax, f.fromFile); err != nil {
			return err
		}
	}
	if hasExecd(cfg) && f.wiring != nil {
		f.wiring.wire(cfg)
	}
	return nil
}

// reloadFile reads path, applies the command-line flags and hands the
// result to the agent. A config that does not load is refused (logged with
// its file:line errors) and the running one stays.
func reloadFile(a *agent.Agent, path string, copts appconfig.Options, f *runFlags, log *slog.Logger) error {
	cfg, err := appconfig.Load(path, copts)
	if err == nil {
		err = f.apply(cfg)
	}
	if err != nil {
		log.Error("config reload refused; the running config stays", "err", err)
		return err
	}
	warnNoOutputs(cfg, log)
	err = a.Reload(cfg)
	if err == nil {
		f.loaded(cfg)
	}
	return err
}

// warnNoOutputs logs a config (an empty file, say) that sends the samples
// nowhere: run samples the GPUs anyway, which is rarely what was meant.
func warnNoOutputs(cfg *appconfig.Config, log *slog.Logger) {
	if len(cfg.Outputs) == 0 {
		log.Warn("no outputs configured: samples are taken and go nowhere (gpusampler config prints every [[outputs.KIND]] block)", "config", cfg.File)
	}
}

// parseDeviceList parses a device list (run's and bench's --devices,
// CUDA_VISIBLE_DEVICES): NVML indexes (PCI bus order) or UUIDs (GPU-...,
// MIG-...), comma-separated. It returns the indexes and the UUIDs apart
// and, in the order given, every entry as written.
func parseDeviceList(v string) (idx []int, uuids, all []string, err error) {
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if n, err := strconv.Atoi(e); err == nil {
			if n < 0 {
				return nil, nil, nil, fmt.Errorf("negative index %d", n)
			}
			idx = append(idx, n)
		} else if strings.HasPrefix(e, "GPU-") || strings.HasPrefix(e, "MIG-") {
			uuids = append(uuids, e)
		} else {
			return nil, nil, nil, fmt.Errorf("%q is neither an index nor a UUID (GPU-..., MIG-...)", e)
		}
		all = append(all, e)
	}
	if len(all) == 0 {
		return nil, nil, nil, errors.New("no devices listed")
	}
	return idx, uuids, all, nil
}

// checkDevicesExist reports the entries of a device list that select no
// GPU of src (selects says whether an entry selects a device; nil: the
// entry is the device's index or its whole UUID, as [sampler] devices
// takes them): a run of GPUs 0 and 7 on a machine without GPU 7 is an
// error, not a run of GPU 0.
func checkDevicesExist(src sampler.Source, list []string, selects func(entry string, d record.Device) bool) error {
	if selects == nil {
		selects = func(e string, d record.Device) bool { return e == strconv.Itoa(d.Index) || e == d.UUID }
	}
	devs, err := src.Devices()
	if err != nil {
		return err
	}
	ids := make([]record.Device, 0, len(devs))
	have := make([]string, 0, len(devs))
	for _, d := range devs {
		id, _ := d.Identity() // a GPU that does not answer still has its index
		ids = append(ids, id)
		have = append(have, strconv.Itoa(id.Index))
	}
	var missing []string
	for _, e := range list {
		if !slices.ContainsFunc(ids, func(d record.Device) bool { return selects(e, d) }) {
			missing = append(missing, e)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no GPU %s here (GPUs: %s)", strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	return nil
}
