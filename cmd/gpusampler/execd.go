package main

import (
	"bufio"
	"context"
	"io"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs/execd"
	"github.com/gpusampler/gpusampler/sampler"
)

// addExecd adds the execd output for `run --execd MODE` and checks that
// nothing else writes to stdout.
func addExecd(cfg *config.Config, mode string, fromFile bool) error {
	signal := ""
	switch mode {
	case "stream":
		signal = execd.SignalNone
	case "gather":
		signal = execd.SignalStdin
	default:
		return usagef("--execd %q: want stream (Telegraf signal = \"none\") or gather (signal = \"STDIN\")", mode)
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
	cfg.Outputs = append(cfg.Outputs, &config.Output{Kind: "execd", Name: "execd", FlushInterval: cfg.Agent.FlushInterval,
		MaxBatch: sampler.DefaultMaxBatch, WriteTimeout: sampler.DefaultWriteTimeout,
		Options: execd.Options{Signal: signal}, Raw: map[string]any{"signal": signal}})
	return nil
}

func hasExecd(cfg *config.Config) bool {
	for _, o := range cfg.Outputs {
		if o.Kind == "execd" {
			return true
		}
	}
	return false
}

// wireExecd reads stdin on a goroutine of its own: each line triggers a
// gather in every execd output; EOF (Telegraf stopping us) calls stop.
func wireExecd(ctx context.Context, cfg *config.Config, stdin io.Reader, stop context.CancelFunc) {
	trigger := make(chan struct{}, 1)
	for _, o := range cfg.Outputs {
		if opts, ok := o.Options.(execd.Options); ok && o.Kind == "execd" {
			opts.Trigger = trigger
			o.Options = opts
		}
	}
	go func() {
		defer stop()
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			select {
			case trigger <- struct{}{}:
			case <-ctx.Done():
				return
			default: // a gather is pending already
			}
		}
	}()
}
