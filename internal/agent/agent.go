// Package agent builds gpusampler's runtime — engine, outputs, aggregation
// wrappers, self-metrics — from a parsed appconfig.Config, and applies a
// reloaded config to the running engine: outputs whose block did not
// change keep running (same pump, cursors, connection); changed, added and
// removed ones are replaced, added or removed through the engine. A reload
// is applied as a whole or refused as a whole.
//
// Concurrency: Run runs on one goroutine; Reload and Stats may be called
// from any goroutine, Reloads are serialized.
package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/internal/accounting"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/attribution"
	"github.com/gpusampler/gpusampler/internal/diagnose"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/internal/pipeline/buffer"
	"github.com/gpusampler/gpusampler/internal/pipeline/deadletter"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// Options configure an Agent.
type Options struct {
	// Registry knows the output kinds.
	Registry *outputs.Registry
	// Stdout is handed to in-process outputs.
	Stdout io.Writer
	// Hostname is used when the config sets none.
	Hostname string
	// Version is the program's version, handed to the outputs
	// (outputs.BuildEnv.Version).
	Version string
	// Logger receives the agent's logs; outputs get it with their name.
	Logger *slog.Logger
	// StatsWriter, when set, receives a short self-metrics summary every
	// stats interval (gpusampler run --stats).
	StatsWriter io.Writer
	// Diagnose turns on live diagnoses (package diagnose): findings travel
	// to every output as events of kind "finding".
	Diagnose bool
	// Strict makes New fail when any output cannot be built (gpusampler run
	// --strict). Otherwise such an output is logged once, reported failing
	// (self-metrics scope "output_health", --stats, the Prometheus
	// /healthz) and retried with backoff while the other outputs run.
	Strict bool
	// NoState keeps no drain cursors: the run delivers what the driver's
	// buffers hold at its start and leaves the state directory alone
	// (gpusampler run without --config: an ad-hoc look beside the service
	// must not move the service's cursors).
	NoState bool
	// StartRetryMin and StartRetryMax bound the delay between start
	// attempts of an output that could not start; it doubles per attempt
	// (DefaultStartRetryMin, DefaultStartRetryMax when zero).
	StartRetryMin, StartRetryMax time.Duration
}

// Agent is a running configuration.
type Agent struct {
	opts    Options
	cursors *sampler.CursorFile // nil when the run keeps none
	log     *slog.Logger
	eng     *sampler.Engine

	// selfMu serializes rounds of self-metrics (the stats loop, the final
	// round); it guards selfPrev and selfLast.
	selfMu   sync.Mutex
	selfPrev map[int]uint64 // device index → NVML calls at the last round
	selfLast time.Time
	started  time.Time

	mu      sync.Mutex // serializes Reload; guards cfg, running, pending, buffers and outputs
	cfg     *appconfig.Config
	running map[string]*appconfig.Output // by name
	pending map[string]*pendingOutput    // by name: configured, not started (retried)
	buffers map[string]*buffer.Buffer    // by output name, for self-metrics
	outputs map[string]record.Output     // by name: what the pump writes to, for self-metrics
	// lateStart holds, by name, the engine's published samples when an
	// output that started late was configured, less what earlier versions
	// of its block missed (its missed_not_started: see startedLate).
	lateStart map[string]uint64

	retryKick chan struct{} // wakes the retry loop of outputs that could not start

	attrib atomic.Pointer[attribution.Resolver] // while Run runs one, for self-metrics

	acct *accounting.Accountant // nil without [attribution] accounting
}

// Accountant returns the job accountant, nil when [attribution]
// accounting is off.
func (a *Agent) Accountant() *accounting.Accountant { return a.acct }

// New builds the engine over src and every output of cfg. The caller opened
// src from cfg.Sampler (backend selection stays with the command line).
func New(src sampler.Source, cfg *appconfig.Config, opts Options) (*Agent, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registry == nil {
		return nil, errors.New("agent: no output registry")
	}
	s := cfg.Sampler
	scfg := sampler.Config{DrainInterval: s.DrainInterval, SecondaryDrainInterval: s.SecondaryDrainInterval,
		PrimaryBuffers: s.PrimaryBuffers, FieldInterval: s.FieldInterval,
		SlowInterval: s.SlowInterval, RareInterval: s.RareInterval, GPMInterval: s.GPMInterval, RingSize: s.RingSize, Select: appconfig.Selector(s.Include, s.Exclude),
		Devices: s.DeviceFilter(), Logger: opts.Logger, ShutdownTimeout: cfg.Agent.ShutdownTimeout,
		ProcessInterval: s.ProcessInterval, ProcessCmdline: s.ProcessCmdline, ProcessCmdlineMax: s.ProcessCmdlineMax}
	if !s.Processes {
		scfg.ProcessInterval = -1
	}
	var cursors *sampler.CursorFile
	if !opts.NoState {
		cursors = openCursors(src, cfg.Agent, outputSet(opts.Registry, cfg.Outputs), opts.Logger)
	}
	if cursors != nil {
		scfg.Cursors = cursors
	}
	var eng *sampler.Engine
	var a *Agent
	// The final self-metrics go out after every output's final flush of
	// samples (they count it) and before the outputs close, so they reach
	// every output.
	scfg.AfterFinalFlush = func() { a.selfTick(time.Now(), true) }
	var observers []sampler.Observer
	if opts.Diagnose {
		// The engine emits the findings; it exists before the first sample.
		observers = append(observers, diagnose.New(func(ev record.Event) { eng.Emit(ev) },
			diagnose.WithPlacement(func(dev int) ([]int, error) { return eng.CPUAffinity(dev) }, diagnose.ProcessCPUs)))
	}
	var acct *accounting.Accountant
	if cfg.Attribution.Accounting {
		acct = accounting.New(accounting.Options{Emit: func(ev record.Event) { eng.Emit(ev) },
			ReportInterval: cfg.Attribution.AccountingInterval, Start: time.Now().UnixNano()})
		observers = append(observers, acct)
	}
	if len(observers) > 0 {
		scfg.Observer = sampler.Observers(observers...)
	}
	eng, err := sampler.New(src, scfg)
	if err != nil {
		if cursors != nil {
			cursors.Close()
		}
		return nil, err
	}
	a = &Agent{acct: acct, cursors: cursors, opts: opts, log: opts.Logger, eng: eng, cfg: cfg, running: map[string]*appconfig.Output{},
		pending: map[string]*pendingOutput{}, buffers: map[string]*buffer.Buffer{}, outputs: map[string]record.Output{},
		lateStart: map[string]uint64{},
		retryKick: make(chan struct{}, 1)}
	var built []builtOutput
	if opts.Strict {
		if built, err = a.build(cfg, cfg.Outputs); err != nil {
			src.Close()
			if cursors != nil {
				cursors.Close()
			}
			return nil, err
		}
	} else {
		// One output that cannot start does not keep the others from
		// running: it is retried with backoff (retryLoop).
		for _, o := range cfg.Outputs {
			b, err := a.build(cfg, []*appconfig.Output{o})
			if err != nil {
				a.deferStart(cfg, o, err)
				if hb, ok := a.hold(a.pending[o.Name], false); ok {
					built = append(built, hb)
				}
				continue
			}
			built = append(built, b...)
		}
	}
	for _, b := range built {
		if err := eng.AddOutput(b.block.Name, b.out, b.block.PumpOptions()); err != nil {
			if cursors != nil {
				cursors.Close()
			}
			return nil, err
		}
		a.running[b.block.Name] = b.block
		a.setBuffer(b)
	}
	return a, nil
}

// Engine returns the engine.
func (a *Agent) Engine() *sampler.Engine { return a.eng }

type builtOutput struct {
	block *appconfig.Output
	out   record.Output
	buf   *buffer.Buffer // nil without a buffer
}

// setBuffer records b's output and (or forgets) its buffer for
// self-metrics. a.mu held or not yet shared.
func (a *Agent) setBuffer(b builtOutput) {
	a.outputs[b.block.Name] = b.out
	if b.buf != nil {
		a.buffers[b.block.Name] = b.buf
	} else {
		delete(a.buffers, b.block.Name)
	}
}

// forget drops a removed output's self-metrics sources. a.mu held.
func (a *Agent) forget(name string) {
	delete(a.buffers, name)
	delete(a.outputs, name)
	delete(a.lateStart, name)
}

// Outputs returns the running outputs (what each pump writes to, wrappers
// included), by output name.
func (a *Agent) Outputs() map[string]record.Output {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.outputs)
}

// Buffers returns the buffers of the running outputs, by output name.
func (a *Agent) Buffers() map[string]*buffer.Buffer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.buffers)
}

func (a *Agent) env(cfg *appconfig.Config, o *appconfig.Output) outputs.BuildEnv {
	host := cfg.Agent.Hostname
	if host == "" {
		host = a.opts.Hostname
	}
	return outputs.BuildEnv{Stdout: a.opts.Stdout, Host: host, GlobalTags: cfg.GlobalTags,
		Logger: a.log.With("output", o.Name), Catalog: a.eng.Catalog(), Version: a.opts.Version}
}

// build makes the runtime outputs of blocks; on error it closes what it
// built.
func (a *Agent) build(cfg *appconfig.Config, blocks []*appconfig.Output) ([]builtOutput, error) {
	var built []builtOutput
	for _, o := range blocks {
		out, err := a.buildInner(cfg, o)
		var b builtOutput
		if err == nil {
			b, err = a.wrap(cfg, o, out)
		}
		if err != nil {
			for _, b := range built {
				b.out.Close()
			}
			return nil, err
		}
		built = append(built, b)
	}
	return built, nil
}

// buildInner builds o's output itself, without the wrappers (wrap).
func (a *Agent) buildInner(cfg *appconfig.Config, o *appconfig.Output) (record.Output, error) {
	k, ok := a.opts.Registry.Lookup(o.Kind)
	if !ok || k.Build == nil {
		return nil, fmt.Errorf("%s:%d: outputs.%s: output kind cannot be built", cfg.File, o.Line, o.Kind)
	}
	out, err := k.Build(&o.Block, a.env(cfg, o))
	if err == nil && isNil(out) {
		err = errors.New("output kind built no output")
	}
	if err != nil {
		// A Build that failed may still hand back a typed nil (or a
		// half-built output): nothing of it is used, Close included.
		return nil, fmt.Errorf("%s:%d: output %s: %w", cfg.File, o.Line, o.Name, err)
	}
	return out, nil
}

// wrap puts o's wrappers around out; on error it closes out.
func (a *Agent) wrap(cfg *appconfig.Config, o *appconfig.Output, out record.Output) (builtOutput, error) {
	fail := func(what string, err error) (builtOutput, error) {
		out.Close()
		return builtOutput{}, fmt.Errorf("%s:%d: output %s: %s%w", cfg.File, o.Line, o.Name, what, err)
	}
	// pump → aggregate → buffer → dead letter → output: summaries are
	// what gets buffered, and the buffer alone talks to the sink; the
	// dead-letter file sees every refusal the sink makes.
	if o.DeadLetterDir != "" {
		dl, err := deadletter.New(out, deadletter.Options{File: filepath.Join(o.DeadLetterDir, o.Name+".deadletter"),
			MaxBytes: o.DeadLetterMaxBytes, Output: o.Name, Logger: a.log.With("output", o.Name)})
		if err != nil {
			return fail("dead_letter_dir: ", err)
		}
		out = dl
	}
	var buf *buffer.Buffer
	if k := o.Buffer.Kind; k == "memory" || k == "disk" {
		env := a.env(cfg, o)
		bopts := []buffer.Option{buffer.WithLogger(a.log.With("output", o.Name)),
			buffer.WithWriteTimeout(o.WriteTimeout), buffer.WithCatalog(a.eng.Catalog()),
			buffer.WithOrigin(env.Host, env.GlobalTags)}
		if o.Aggregate > 0 {
			// The journal beside the segments counts in buffer_max_bytes.
			bopts = append(bopts, buffer.WithSharedFiles(aggregateJournal))
		}
		var err error
		if buf, err = buffer.New(out, o.Buffer, bopts...); err != nil {
			return fail("buffer: ", err)
		}
		out = buf
	}
	if o.Aggregate > 0 {
		opts := aggregate.Options{Interval: o.Aggregate, Logger: a.log.With("output", o.Name), Catalog: a.eng.Catalog()}
		if k, ok := a.opts.Registry.Lookup(o.Kind); ok {
			// The kind's own choice of distributions (opentelemetry).
			opts.Histograms = k.SummaryHistograms
		}
		if buf != nil && o.Buffer.Kind == "disk" {
			// The open windows survive a crash with the queue they feed.
			opts.Journal, opts.LastAppended = filepath.Join(o.Buffer.Dir, aggregateJournal), buf.LastAppended
		}
		// aggregate.New returns a nil *Output with its error: out keeps
		// the output it wraps until the wrapper exists, so that the
		// failure closes what was built, never a typed nil.
		agg, err := aggregate.New(out, opts)
		if err != nil {
			return fail("aggregate: ", err)
		}
		out = agg
	}
	return builtOutput{o, out, buf}, nil
}

// isNil reports whether out is nil, a nil interface or an interface
// holding a nil pointer (a typed nil, on which any method may panic).
func isNil(out record.Output) bool {
	if out == nil {
		return true
	}
	v := reflect.ValueOf(out)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// aggregateJournal is the aggregate wrapper's journal file in the
// directory of the disk buffer it feeds (the buffer locks the directory,
// so the journal is one wrapper's alone).
const aggregateJournal = "aggregate.journal"

// Run samples until ctx ends (see sampler.Engine.Run), sending
// self-metrics every stats interval.
func (a *Agent) Run(ctx context.Context) error {
	if a.cursors != nil {
		// Every way out gives the state dir back (Close is idempotent;
		// the normal end closes it earlier, right after the last save).
		defer a.cursors.Close()
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		a.selfMetricsLoop(sctx)
	}()
	go func() {
		defer wg.Done()
		a.retryLoop(ctx)
	}()
	a.selfMu.Lock()
	a.started = time.Now()
	a.selfMu.Unlock()
	a.startHealth()
	if r, err := a.attribution(); err != nil {
		stop()
		wg.Wait()
		return err
	} else if r != nil {
		defer r.Close()
		a.attrib.Store(r)
		wg.Add(1)
		var target attribution.Target = a.eng
		if a.acct != nil {
			target = a.acct.Target(a.eng, nil)
		}
		go func() {
			defer wg.Done()
			r.Run(sctx, target)
		}()
	}
	err := a.eng.Run(ctx)
	if a.cursors != nil {
		a.cursors.Close() // saved at the end of Run: the state dir is free
	}
	stop()
	wg.Wait()
	a.finalStats()
	return err
}

// Reload applies cfg: unchanged outputs keep running, the others are
// replaced, added or removed. A reload is all-or-nothing: when an output of
// cfg cannot be built, or cfg changes the [sampler] section (which a
// running engine cannot apply; that needs a restart), cfg is refused as a
// whole and the running config stays, every output as it was.
//
// Most outputs are replaced without a gap: the new one is built first and
// its pump takes over the old one's lanes in one step. Outputs that hold
// something their replacement needs — a listening address (exclusive
// kinds), or the directory of a disk buffer — are closed first and then
// built again; what is published meanwhile waits in the ring, and a disk
// buffer's queue stays on disk for the replacement to deliver.
func (a *Agent) Reload(cfg *appconfig.Config) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.cfg
	keys := samplerChanges(old.Sampler, cfg.Sampler)
	if old.Attribution != cfg.Attribution {
		keys = append(keys, "[attribution]")
	}
	if len(keys) > 0 {
		err := fmt.Errorf("reload: [sampler] %s changed: a running engine cannot apply that, restart gpusampler to apply it",
			strings.Join(keys, ", "))
		a.log.Error("config reload refused; the running config stays", "file", cfg.File, "err", err)
		return err
	}
	envChanged := old.Agent.Hostname != cfg.Agent.Hostname || !maps.Equal(old.GlobalTags, cfg.GlobalTags)
	var changed, closeFirst []*appconfig.Output
	keep := map[string]bool{}
	// Outputs that have not started stay with the retry loop, with their
	// new block if it changed: the reload neither builds nor waits for them.
	pending, notStarted := a.reloadPending(cfg, envChanged, a.publishedSamples())
	for _, o := range cfg.Outputs {
		if notStarted[o.Name] {
			if p := pending[o.Name]; p.held != nil {
				// Unchanged and held: its buffer and pump keep running. A
				// changed one's are closed below, and its new block held
				// again when it still cannot start.
				keep[o.Name] = true
			}
			continue
		}
		r, ok := a.running[o.Name]
		if ok && !envChanged && r.Same(o) {
			keep[o.Name] = true
			continue
		}
		if ok && a.closeFirst(r, o) {
			closeFirst = append(closeFirst, o)
			keep[o.Name] = true // not removed with the others
			continue
		}
		changed = append(changed, o)
	}
	built, err := a.build(cfg, changed)
	if err != nil {
		a.log.Error("config reload refused; the running config stays", "err", err)
		return fmt.Errorf("reload: %w", err)
	}
	// Close-first outputs go before anything else changes: if one of them
	// cannot be built, those replaced before it are put back and nothing
	// else has been touched.
	prev := map[string]*appconfig.Output{}
	for i, o := range closeFirst {
		prev[o.Name] = a.running[o.Name]
		restored, err := a.replaceExclusive(old, cfg, o)
		if err == nil {
			continue
		}
		errs := []error{err}
		if !restored {
			errs = append(errs, fmt.Errorf("output %s removed: neither its new nor its old config could start", o.Name))
		}
		for _, b := range built {
			b.out.Close()
		}
		for _, done := range slices.Backward(closeFirst[:i]) {
			if _, rerr := a.replaceExclusive(cfg, old, prev[done.Name]); rerr != nil {
				errs = append(errs, fmt.Errorf("output %s: putting its old config back: %w", done.Name, rerr))
			}
		}
		err = fmt.Errorf("reload: %w", errors.Join(errs...))
		a.log.Error("config reload refused; the running config stays", "err", err)
		return err
	}
	var errs []error
	replace := map[string]bool{} // running outputs whose new version takes over without a gap
	for _, b := range built {
		if _, ok := a.running[b.block.Name]; ok {
			replace[b.block.Name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.running)) {
		if keep[name] || replace[name] {
			continue
		}
		if err := a.eng.RemoveOutput(name); err != nil {
			errs = append(errs, err)
		}
		delete(a.running, name)
		a.forget(name)
	}
	for _, b := range built {
		var err error
		if replace[b.block.Name] {
			// The new pump's lanes take the old one's place in one step:
			// every sample goes to exactly one of the two. A memory
			// buffer's queue passes to the new buffer, ahead of what the
			// new pump writes (a disk buffer's stays on disk: closeFirst).
			if old := a.buffers[b.block.Name]; old != nil && b.buf != nil &&
				old.Stats().Kind == buffer.KindMemory && b.buf.Stats().Kind == buffer.KindMemory {
				if err := old.HandOver(b.buf); err != nil {
					a.log.Warn("memory buffer not handed over; what it holds is delivered or dropped at its close", "output", b.block.Name, "err", err)
				}
			}
			a.forget(b.block.Name)
			if err = a.eng.ReplaceOutput(b.block.Name, b.out, b.block.PumpOptions()); err != nil {
				errs = append(errs, fmt.Errorf("reload: closing the replaced %s: %w", b.block.Name, err))
				err = nil // the new output runs; only the old one's close failed
			}
		} else if err = a.eng.AddOutput(b.block.Name, b.out, b.block.PumpOptions()); err != nil {
			b.out.Close()
			errs = append(errs, err)
			continue
		}
		a.running[b.block.Name] = b.block
		a.setBuffer(b)
	}
	a.cfg = cfg
	a.pending = pending
	if a.cursors != nil {
		// The cursors saved from now on are the new outputs': a restart
		// with this config resumes where the run is.
		a.cursors.Rescope(outputSet(a.opts.Registry, cfg.Outputs))
	}
	a.kickRetry()
	a.log.Info("config reloaded", "file", cfg.File, "kept", len(keep)-len(closeFirst),
		"replaced_or_added", len(built)+len(closeFirst))
	return errors.Join(errs...)
}

// samplerKeys names the [sampler] keys by Sampler field.
var samplerKeys = map[string]string{"Backend": "backend", "Profile": "profile", "GPUs": "gpus", "Seed": "seed",
	"Devices": "devices", "DrainInterval": "drain_interval", "SecondaryDrainInterval": "secondary_drain_interval",
	"PrimaryBuffers": "primary_buffers", "FieldInterval": "field_interval",
	"SlowInterval": "slow_interval", "RareInterval": "rare_interval", "GPMInterval": "gpm_interval",
	"RingSize": "ring_size", "Processes": "processes", "ProcessInterval": "process_interval",
	"ProcessCmdline": "process_cmdline", "ProcessCmdlineMax": "process_cmdline_max",
	"Include": "include", "Exclude": "exclude"}

// attribution returns the resolver the [attribution] section asks for, nil
// when it asks for none.
func (a *Agent) attribution() (*attribution.Resolver, error) {
	a.mu.Lock()
	c := a.cfg.Attribution
	a.mu.Unlock()
	cfg := attribution.Config{HPCJobMappingDir: c.HPCJobMappingDir, SlurmCgroups: c.SlurmCgroups,
		ProcRoot: c.ProcRoot, Refresh: c.RefreshInterval, Log: a.log.With("component", "attribution")}
	if c.Kubernetes {
		cfg.PodResourcesSocket, cfg.ContainerLogDir = c.PodResourcesSocket, c.ContainerLogDir
	}
	if !cfg.Enabled() {
		return nil, nil
	}
	return attribution.New(cfg)
}

// samplerChanges returns the keys of the [sampler] section whose values
// differ between a and b.
func samplerChanges(a, b appconfig.Sampler) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var keys []string
	for i := range va.NumField() {
		if reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			continue
		}
		name := va.Type().Field(i).Name
		keys = append(keys, cmp.Or(samplerKeys[name], name))
	}
	return keys
}

// closeFirst reports whether the running block r must be closed before its
// replacement o is built: o is of an exclusive kind, or both buffer on the
// same disk directory (a buffer locks its directory).
func (a *Agent) closeFirst(r, o *appconfig.Output) bool {
	if a.exclusive(o.Kind) {
		return true
	}
	return r.Buffer.Kind == "disk" && o.Buffer.Kind == "disk" && filepath.Clean(r.Buffer.Dir) == filepath.Clean(o.Buffer.Dir)
}

// exclusive reports whether kind's outputs must be closed before their
// replacement is built.
func (a *Agent) exclusive(kind string) bool {
	k, ok := a.opts.Registry.Lookup(kind)
	return ok && k.Exclusive
}

// replaceExclusive replaces a running close-first output with block o:
// the engine closes the old one first and keeps what is published
// meanwhile; if o cannot be built, the old block is built again (restored
// true) and o's error is returned. When neither can be built the output is
// removed (restored false). a.mu held.
func (a *Agent) replaceExclusive(oldCfg, cfg *appconfig.Config, o *appconfig.Output) (restored bool, err error) {
	prev := a.running[o.Name]
	var used builtOutput
	var buildErr error
	err = a.eng.ReplaceOutputWith(o.Name, o.PumpOptions(), func() (record.Output, error) {
		b, err := a.build(cfg, []*appconfig.Output{o})
		if err == nil {
			used = b[0]
			return used.out, nil
		}
		buildErr = err
		b, rerr := a.build(oldCfg, []*appconfig.Output{prev})
		if rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		used = b[0]
		return used.out, nil
	})
	a.forget(o.Name)
	if err != nil {
		delete(a.running, o.Name)
		return false, err
	}
	a.running[o.Name] = used.block
	a.setBuffer(used)
	if buildErr != nil {
		return true, fmt.Errorf("output %s kept its old config: %w", o.Name, buildErr)
	}
	return false, nil
}

// ReloadFile loads path and applies it; a config that does not parse is
// refused (logged with its file:line errors) and the running one stays.
func (a *Agent) ReloadFile(path string, opts appconfig.Options) error {
	cfg, err := appconfig.Load(path, opts)
	if err != nil {
		a.log.Error("config reload refused; the running config stays", "err", err)
		return err
	}
	return a.Reload(cfg)
}

// statsInterval returns the current config's stats interval and whether
// self-metrics go to the outputs.
func (a *Agent) statsSettings() (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Agent.StatsInterval, a.cfg.Agent.SelfMetrics
}

// openCursors opens the drain-cursor file in the state directory, so that
// a restart delivers no driver sample twice. Simulated GPUs keep none (their
// history is made up). A state directory that cannot be used costs only
// that: it is logged, and sampling runs without. One owned by another
// process (the service, when this is an ad-hoc run with the same
// state_dir) is left alone: this run delivers what the driver's buffers
// hold, and says once which process owns it. The cursors are those of the
// output set scope (outputSet): a run with other outputs than the service's
// keeps its own and never moves the service's.
func openCursors(src sampler.Source, a appconfig.Agent, scope string, log *slog.Logger) *sampler.CursorFile {
	if src.Name() == "sim" {
		return nil
	}
	dir := a.StateDir
	if dir == "" {
		d, err := appconfig.DefaultStateDir()
		if err != nil {
			log.Warn("no state directory: a restart will deliver the driver buffers' history again", "err", err)
			return nil
		}
		dir = d
	}
	f, ignored, err := sampler.OpenCursorFileScoped(dir, scope)
	var inUse *sampler.StateDirInUseError
	switch {
	case errors.As(err, &inUse):
		log.Warn("state dir in use by another gpusampler process: not touching its drain cursors; this run delivers the driver buffers' history",
			"state_dir", dir, "pid", inUse.PID)
		return nil
	case err != nil:
		log.Warn("drain cursors not kept: a restart will deliver the driver buffers' history again", "state_dir", dir, "err", err)
		return nil
	}
	if why := f.Discarded(); why != "" {
		log.Warn("drain cursor file unreadable: discarded, this run delivers the driver buffers' history and the next save rewrites it",
			"file", f.Path(), "err", why)
	}
	if ignored {
		log.Info("drain cursors in the state dir ignored", "file", f.Path(), "reason", f.IgnoredReason())
	}
	if n := f.OtherSets(); n > 0 {
		log.Info("state dir holds the drain cursors of other output sets: left alone, this run keeps its own",
			"file", f.Path(), "output_set", scope, "other_sets", n)
	}
	return f
}

// outputSet names a run's set of outputs for its drain cursors: a hash of
// each output's kind, name and sink (sorted by name). Two runs with the
// same outputs share cursors (their sinks are the same); a run whose
// outputs differ keeps its own. The sink is the values of the kind's
// SinkKeys (a URL, a subject, a database): changing a credential, a
// timeout or a tag, or the value of a ${NAME} such a key references (a
// rotated token), keeps the set. A kind that names no sink keys (a
// plugin) counts with its whole block as written: ${NAME} is the
// reference, not its value, so rotating a secret keeps the set, and
// editing the block starts a new one.
func outputSet(reg *outputs.Registry, outs []*appconfig.Output) string {
	type id struct {
		Kind, Name string
		Sink       map[string]any
	}
	ids := make([]id, 0, len(outs))
	for _, o := range outs {
		ids = append(ids, id{o.Kind, o.Name, outputSink(reg, o)})
	}
	slices.SortFunc(ids, func(a, b id) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.Marshal(ids)
	if err != nil { // a value JSON cannot spell: kinds and names only
		for i := range ids {
			ids[i].Sink = nil
		}
		b, _ = json.Marshal(ids)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// outputSink returns what names o's sink for outputSet.
func outputSink(reg *outputs.Registry, o *appconfig.Output) map[string]any {
	var keys []string
	if reg != nil {
		if k, ok := reg.Lookup(o.Kind); ok {
			keys = k.SinkKeys
		}
	}
	if keys == nil {
		if o.Table != nil {
			return o.Table.Written()
		}
		return o.Raw
	}
	sink := map[string]any{}
	for _, k := range keys {
		if v, ok := o.Raw[k]; ok {
			sink[k] = v
		}
	}
	return sink
}
