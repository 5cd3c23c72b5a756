// Package gpusampler is Telegraf's inputs.gpusampler: gpusampler's engine
// running inside Telegraf as a service input. Start opens the GPUs (NVML
// when the driver loads, simulated GPUs otherwise or when asked) and runs
// the engine; every record it produces becomes a telegraf.Metric on its
// driver timestamp. Stop ends the engine after its final flush.
//
// The metrics are exactly the lines gpusampler's execd output writes (the
// same shaping code: shape "raw" streams every sample, shape "nvidia_smi"
// writes the nvidia_smi drop-in at each gather), parsed by Telegraf's own
// influx parser. No host tag is written; Telegraf's agent adds its own.
//
// Concurrency: Telegraf calls Init, Start, Gather and Stop; metrics reach
// the accumulator from the engine's output goroutine (raw) or from Gather
// (nvidia_smi), which Telegraf's accumulators allow.
package gpusampler

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/plugins/inputs"
	"github.com/influxdata/telegraf/plugins/parsers/influx"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/execd"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/nvml"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

//go:embed sample.conf
var sampleConfig string

// Shapes, the values of the shape key.
const (
	ShapeRaw       = "raw"
	ShapeNvidiaSMI = "nvidia_smi"
)

// Backends, the values of the backend key.
const (
	BackendAuto = "auto"
	BackendNVML = "nvml"
	BackendSim  = "sim"
)

// GPUSampler is the input plugin. Its exported fields are its config keys.
type GPUSampler struct {
	Backend        string   `toml:"backend"`
	SimGPUs        int      `toml:"sim_gpus"`
	SimProfile     string   `toml:"sim_profile"`
	SimSeed        uint64   `toml:"sim_seed"`
	Devices        []string `toml:"devices"`
	MetricsInclude []string `toml:"metrics_include"`
	MetricsExclude []string `toml:"metrics_exclude"`
	Shape          string   `toml:"shape"`
	// MinMax (shape "nvidia_smi" only) adds each gather window's
	// NAME_min and NAME_max for the metrics written as its mean.
	MinMax bool `toml:"min_max"`

	// Log is set by Telegraf.
	Log telegraf.Logger `toml:"-"`

	// Twin, when set before Start (shape "raw" only), receives the lines
	// of a second, independent execd output of the same engine: what
	// `gpusampler run --execd stream` would print for the same samples.
	// Tests compare it with what Telegraf received.
	Twin io.Writer `toml:"-"`

	cancel context.CancelFunc
	done   chan error
	eng    *sampler.Engine
	out    *execd.Output
	sink   *lineSink
	lost   uint64 // samples and events lost on the way to Telegraf, as last reported (Gather's goroutine)
}

// outputName is the engine's name for the plugin's output.
const outputName = "telegraf"

// New returns the plugin with its defaults.
func New() *GPUSampler {
	return &GPUSampler{Backend: BackendAuto, SimGPUs: 2, SimProfile: "training", Shape: ShapeRaw}
}

func init() {
	inputs.Add("gpusampler", func() telegraf.Input { return New() })
}

// SampleConfig returns the plugin's sample.conf.
func (*GPUSampler) SampleConfig() string { return sampleConfig }

// Init checks the config; it opens nothing.
func (p *GPUSampler) Init() error {
	switch p.Backend {
	case "":
		p.Backend = BackendAuto
	case BackendAuto, BackendNVML, BackendSim:
	default:
		return fmt.Errorf("gpusampler: backend %q: want %q, %q or %q", p.Backend, BackendAuto, BackendNVML, BackendSim)
	}
	switch p.Shape {
	case "":
		p.Shape = ShapeRaw
	case ShapeRaw, ShapeNvidiaSMI:
	default:
		return fmt.Errorf("gpusampler: shape %q: want %q or %q", p.Shape, ShapeRaw, ShapeNvidiaSMI)
	}
	if p.MinMax && p.Shape != ShapeNvidiaSMI {
		return fmt.Errorf("gpusampler: min_max applies to shape %q only", ShapeNvidiaSMI)
	}
	if p.SimProfile == "" {
		p.SimProfile = "training"
	}
	if !sim.ValidProfile(p.SimProfile) {
		return fmt.Errorf("gpusampler: sim_profile %q: want one of %v", p.SimProfile, sim.Profiles)
	}
	if p.SimGPUs == 0 {
		p.SimGPUs = 2
	}
	if p.SimGPUs < 1 || p.SimGPUs > 64 {
		return fmt.Errorf("gpusampler: sim_gpus %d: must be between 1 and 64", p.SimGPUs)
	}
	for key, patterns := range map[string][]string{"metrics_include": p.MetricsInclude, "metrics_exclude": p.MetricsExclude} {
		for _, pat := range patterns {
			if _, err := path.Match(pat, ""); err != nil {
				return fmt.Errorf("gpusampler: %s %q: %w", key, pat, err)
			}
		}
	}
	if p.Twin != nil && p.Shape != ShapeRaw {
		return fmt.Errorf("gpusampler: a twin output needs shape %q", ShapeRaw)
	}
	return nil
}

// open opens the configured backend; auto falls back to simulated GPUs
// when NVML is unavailable (no driver, or a build without cgo).
func (p *GPUSampler) open() (sampler.Source, error) {
	simulated := func() (sampler.Source, error) {
		return sim.New(sim.Options{GPUs: p.SimGPUs, Profile: p.SimProfile, Seed: p.SimSeed})
	}
	switch p.Backend {
	case BackendSim:
		return simulated()
	case BackendNVML:
		return nvml.Open(nvml.Options{})
	}
	src, err := nvml.Open(nvml.Options{})
	if err == nil {
		return src, nil
	}
	if p.Log != nil {
		p.Log.Warnf("NVML unavailable (%v); using %d SIMULATED GPUs, profile %q: every record is marked simulated", err, p.SimGPUs, p.SimProfile)
	}
	return simulated()
}

// Start opens the GPUs and runs the engine until Stop.
func (p *GPUSampler) Start(acc telegraf.Accumulator) error {
	if p.cancel != nil {
		return errors.New("gpusampler: already started")
	}
	src, err := p.open()
	if err != nil {
		return fmt.Errorf("gpusampler: open backend %s: %w", p.Backend, err)
	}
	eng, err := sampler.New(src, sampler.Config{Select: catalog.Select(p.MetricsInclude, p.MetricsExclude), Devices: sampler.DevicesNamed(p.Devices)})
	if err != nil {
		src.Close()
		return fmt.Errorf("gpusampler: %w", err)
	}
	sink, err := newLineSink(acc)
	if err != nil {
		src.Close()
		return err
	}
	opts := execd.Options{Signal: execd.SignalNone, Catalog: eng.Catalog()}
	if p.Shape == ShapeNvidiaSMI {
		// Gathers come from Telegraf's Gather, not from a trigger; the
		// channel only satisfies the output's gather mode.
		opts.Signal, opts.Shape, opts.Trigger = execd.SignalStdin, execd.ShapeNvidiaSMI, make(chan struct{})
		opts.MinMax = p.MinMax
	}
	out, err := execd.New(sink, opts)
	if err != nil {
		src.Close()
		return fmt.Errorf("gpusampler: %w", err)
	}
	pump := sampler.PumpOptions{FlushInterval: sampler.DefaultFlushInterval, MaxBatch: sampler.DefaultMaxBatch, WriteTimeout: record.DefaultWriteTimeout}
	if err := eng.AddOutput(outputName, out, pump); err != nil {
		out.Close()
		src.Close()
		return fmt.Errorf("gpusampler: %w", err)
	}
	if p.Twin != nil {
		twin, err := execd.New(p.Twin, execd.Options{Signal: execd.SignalNone, Catalog: eng.Catalog()})
		if err == nil {
			err = eng.AddOutput("twin", twin, pump)
		}
		if err != nil {
			src.Close()
			return fmt.Errorf("gpusampler: twin: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done, p.eng, p.out, p.sink = cancel, make(chan error, 1), eng, out, sink
	go func() { p.done <- eng.Run(ctx) }()
	return nil
}

// Gather writes the nvidia_smi drop-in for the interval since the previous
// gather (shape "nvidia_smi"); with shape "raw" samples stream on their own.
// It reports, as its error, what was lost since the previous Gather: lines
// Telegraf's parser refused, and samples or events the engine dropped or
// failed to write for Telegraf.
func (p *GPUSampler) Gather(_ telegraf.Accumulator) error {
	if p.out == nil {
		return errors.New("gpusampler: not started")
	}
	var errs []error
	if p.Shape == ShapeNvidiaSMI {
		if err := p.out.Gather(); err != nil {
			errs = append(errs, fmt.Errorf("gpusampler: %w", err))
		}
	}
	if n := p.sink.bad.Swap(0); n > 0 {
		errs = append(errs, fmt.Errorf("gpusampler: %d lines dropped: Telegraf's influx parser refused them", n))
	}
	if n := p.newLosses(p.eng.Stats()); n > 0 {
		errs = append(errs, fmt.Errorf("gpusampler: %d samples and events lost before Telegraf (dropped or failed writes)", n))
	}
	return errors.Join(errs...)
}

// newLosses returns what st counts as lost for the plugin's output beyond
// what was reported already, and remembers it as reported.
func (p *GPUSampler) newLosses(st sampler.Stats) uint64 {
	for _, o := range st.Outputs {
		if o.Name != outputName {
			continue
		}
		total := o.Dropped + o.Failed + o.EventsDropped
		if total <= p.lost {
			return 0
		}
		n := total - p.lost
		p.lost = total
		return n
	}
	return 0
}

// Stop ends the engine; the samples it read are flushed to Telegraf first.
func (p *GPUSampler) Stop() {
	if p.cancel == nil {
		return
	}
	p.cancel()
	err := <-p.done
	p.cancel = nil
	if err != nil && !errors.Is(err, context.Canceled) && p.Log != nil {
		p.Log.Errorf("engine: %v", err)
	}
}

// lineSink is the execd output's stdout: it turns each complete line into
// a telegraf.Metric with Telegraf's influx parser and hands it to the
// accumulator. A line the parser refuses is counted (bad) and reported.
type lineSink struct {
	acc    telegraf.Accumulator
	parser *influx.Parser

	mu      sync.Mutex // guards partial
	partial []byte     // an incomplete last line, kept for the next Write
	bad     atomic.Uint64
}

func newLineSink(acc telegraf.Accumulator) (*lineSink, error) {
	parser := &influx.Parser{}
	if err := parser.Init(); err != nil {
		return nil, fmt.Errorf("gpusampler: influx parser: %w", err)
	}
	return &lineSink{acc: acc, parser: parser}, nil
}

// Write parses every complete line of b (and of what a previous Write left
// incomplete).
func (s *lineSink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, b...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		line := s.partial[:i]
		s.partial = s.partial[i+1:]
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, err := s.parser.ParseLine(string(line))
		if err != nil {
			s.bad.Add(1)
			s.acc.AddError(fmt.Errorf("gpusampler: line dropped: %w", err))
			continue
		}
		s.acc.AddMetric(m)
	}
	s.partial = slices.Clip(s.partial)
	if len(s.partial) == 0 {
		s.partial = nil
	}
	return len(b), nil
}
