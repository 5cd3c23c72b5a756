package main

import (
	"bufio"
	"context"
	"io"
	"sync"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/execd"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// addExecd adds the execd output for `run --execd MODE` and checks that
// nothing else writes to stdout.
func addExecd(cfg *appconfig.Config, mode string, minMax, fromFile bool) error {
	signal, shape := "", execd.ShapeSummary
	switch mode {
	case "stream":
		signal = execd.SignalNone
	case "gather":
		signal = execd.SignalStdin
	case "nvidia_smi":
		signal, shape = execd.SignalStdin, execd.ShapeNvidiaSMI
	default:
		return usagef("--execd %q: want stream (Telegraf signal = \"none\"), gather or nvidia_smi (signal = \"STDIN\")", mode)
	}
	if fromFile {
		for _, o := range cfg.Outputs {
			if o.Kind == "stdout" || o.Kind == "execd" {
				return usagef("--execd: %s:%d: outputs.%s also writes to stdout, which Telegraf reads; remove it", cfg.File, o.Line, o.Kind)
			}
		}
	} else {
		cfg.Outputs = nil // the default stdout output
	}
	raw := map[string]any{"signal": signal, "shape": shape}
	if minMax {
		raw["min_max"] = true
	}
	cfg.Outputs = append(cfg.Outputs, &appconfig.Output{
		Block: outputs.Block{Kind: "execd", Name: "execd",
			Options: execd.Options{Signal: signal, Shape: shape, MinMax: minMax}, Raw: raw, WriteTimeout: record.DefaultWriteTimeout},
		FlushInterval: cfg.Agent.FlushInterval, MaxBatch: sampler.DefaultMaxBatch})
	return nil
}

func hasExecd(cfg *appconfig.Config) bool {
	for _, o := range cfg.Outputs {
		if o.Kind == "execd" {
			return true
		}
	}
	return false
}

// execdWiring connects execd outputs to stdin: one reader goroutine,
// started by the first config that has an execd output, turns each line
// into a gather on the shared trigger; EOF (Telegraf stopping us) closes
// the trigger, so each execd output writes a final gather of what it holds
// when it closes, and calls stop. Every config (at start and at each reload) is wired to the same
// trigger, so a reloaded execd output keeps hearing Telegraf.
type execdWiring struct {
	ctx     context.Context
	stdin   io.Reader
	stop    context.CancelFunc
	trigger chan struct{}
	once    sync.Once
}

func newExecdWiring(ctx context.Context, stdin io.Reader, stop context.CancelFunc) *execdWiring {
	return &execdWiring{ctx: ctx, stdin: stdin, stop: stop, trigger: make(chan struct{}, 1)}
}

// wire sets the trigger in cfg's execd outputs and starts the stdin reader
// once.
func (w *execdWiring) wire(cfg *appconfig.Config) {
	for _, o := range cfg.Outputs {
		if opts, ok := o.Options.(execd.Options); ok && o.Kind == "execd" {
			opts.Trigger = w.trigger
			o.Options = opts
		}
	}
	w.once.Do(func() { go w.read() })
}

func (w *execdWiring) read() {
	defer w.stop()
	sc := bufio.NewScanner(w.stdin)
	for sc.Scan() {
		select {
		case w.trigger <- struct{}{}:
		case <-w.ctx.Done():
			return
		default: // a gather is pending already
		}
	}
	// The end of stdin: the samples since the last gather are written as a
	// final one, after the run's last flush (execd.Options.Trigger).
	close(w.trigger)
}
