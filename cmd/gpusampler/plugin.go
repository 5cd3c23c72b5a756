package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"time"

	toml "github.com/pelletier/go-toml/v2"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/plugins/sdk"
	"github.com/gpusampler/gpusampler/record"
)

// cmdPlugin runs `gpusampler plugin test PATH` and the hidden `gpusampler
// plugin serve [KIND]` (the host re-executes itself with it to run its
// built-in network outputs out of process: all of them in one process
// without KIND, as `run` does, or the one output of kind KIND).
func cmdPlugin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("want a subcommand: test PATH [--config FILE]")
	}
	switch args[0] {
	case "serve":
		reg := registry.Builtin()
		if len(args) == 1 {
			// every out-of-process kind, one instance per output the host
			// configures (HostOptions.Shared)
			var kinds []outputs.Kind
			for _, name := range reg.Kinds() {
				if k, _ := reg.Lookup(name); k.OutOfProcess {
					kinds = append(kinds, withVersion(k))
				}
			}
			sdk.ServeKinds(kinds...) // stdout carries the handshake from here on
			return nil
		}
		if len(args) != 2 {
			return usagef("serve: want at most one output kind")
		}
		k, ok := reg.Lookup(args[1])
		if !ok || k.Kind == "plugin" {
			return usagef("serve: unknown output kind %q", args[1])
		}
		sdk.ServeKind(withVersion(k)) // stdout carries the handshake from here on
		return nil
	case "test":
		return cmdPluginTest(ctx, args[1:], stdout, stderr)
	}
	return usagef("unknown subcommand %q (want test)", args[0])
}

// withVersion has k's outputs built with this binary's version
// (outputs.BuildEnv.Version): the host re-executes this same binary for
// its outputs child, so the child's version is the host's.
func withVersion(k outputs.Kind) outputs.Kind {
	if build := k.Build; build != nil {
		k.Build = func(b *outputs.Block, env outputs.BuildEnv) (record.Output, error) {
			env.Version = version
			return build(b, env)
		}
	}
	return k
}

func cmdPluginTest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plugin test", stderr)
	cfgPath := fs.String("config", "", "TOML file with the plugin's config table (what goes under [outputs.plugin.config])")
	sum := fs.String("sha256", "", "expected sha256 of the binary")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline of each call")
	// the binary comes first: gpusampler plugin test PATH [flags]
	var path string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		path, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args, stdout); err != nil {
		if errors.Is(err, errHelp) {
			fmt.Fprintln(stdout, "\nusage: gpusampler plugin test PATH [--config FILE] [--sha256 HEX]")
		}
		return err
	}
	if path == "" {
		return usagef("want the plugin binary: gpusampler plugin test PATH [--config FILE]")
	}
	var cfg map[string]any
	if *cfgPath != "" {
		data, err := appconfig.ReadFile(*cfgPath)
		if err != nil {
			return err
		}
		if err := toml.Unmarshal(data, &cfg); err != nil {
			return fmt.Errorf("%s: %w", *cfgPath, err)
		}
	}
	// The plugin's log lines arrive from other goroutines: one lock for
	// everything written to stdout.
	stdout = &lockedWriter{w: stdout}
	p := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	p("plugin %s", path)
	if *sum != "" {
		if err := plugins.VerifyChecksum(path, *sum); err != nil {
			p("  checksum   FAIL %v", err)
			return errors.New("plugin test failed")
		}
		p("  checksum   ok")
	}
	// The plugin's own log lines are shown as they arrive.
	log := slog.New(slog.NewTextHandler(prefixWriter{stdout, "  log        "}, &slog.HandlerOptions{Level: slog.LevelInfo,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		}}))
	start := time.Now()
	c, err := plugins.Start(plugins.Options{Name: "plugin-test", Kind: "plugin", Config: cfg, Logger: log,
		Command: func() *exec.Cmd { return exec.Command(path) }, CallTimeout: *timeout, StartTimeout: *timeout,
		HealthInterval: time.Hour, SHA256: *sum,
		// a developer's tool: the plugin sees the shell's environment
		// (`run` hands a plugin only PATH, TZ, the locale and its ${VAR}s)
		InheritEnv: true})
	if err != nil {
		if kerrs := plugins.KeyErrors(err); kerrs != nil {
			p("  handshake  ok")
			for _, k := range kerrs {
				p("  configure  FAIL %s: %s: %s", *cfgPath, k.Key, k.Msg)
			}
		} else {
			p("  start      FAIL %v", err)
		}
		return errors.New("plugin test failed")
	}
	p("  handshake  ok: protocol 1, gRPC, AutoMTLS, pid %d (%v)", c.Stats().PID, time.Since(start).Round(time.Millisecond))
	p("  configure  ok (%d keys)", len(cfg))
	failed := false
	now := time.Now().UnixNano()
	dev := record.Device{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Name: "gpusampler plugin test",
		Backend: "test", Simulated: true, Generation: 1}
	batches := []record.Batch{
		{Seq: 1, Devices: []record.Device{dev}, Samples: testSamples(now, 100)},
		{Seq: 2, Samples: testSamples(now+int64(time.Second), 1000), Events: []record.Event{{Kind: record.EventThreshold,
			Device: 0, StartNS: now, EndNS: now, Message: "gpu temperature 91 °C above 90 °C (plugin test)",
			Attrs: []record.Attr{{Key: "metric", Value: "temperature_gpu"}, {Key: "level", Value: "critical"}}}}},
		{Seq: 3, Samples: testSamples(now+2*int64(time.Second), 4096)},
	}
	for i := range batches {
		b := &batches[i]
		t0 := time.Now()
		wctx, cancel := context.WithTimeout(ctx, *timeout)
		err := c.Write(wctx, b)
		cancel()
		if err != nil {
			failed = true
			p("  write      FAIL seq %d (%d samples, %d events): %v", b.Seq, len(b.Samples), len(b.Events), err)
			continue
		}
		p("  write      ok seq %d: %d device(s), %d samples, %d event(s) in %v", b.Seq, len(b.Devices), len(b.Samples),
			len(b.Events), time.Since(t0).Round(time.Microsecond))
	}
	if err := c.Close(); err != nil {
		failed = true
		p("  close      FAIL %v", err)
	} else {
		p("  close      ok")
	}
	if failed {
		return errors.New("plugin test failed")
	}
	p("PASS")
	return nil
}

func testSamples(t0 int64, n int) []record.Sample {
	out := make([]record.Sample, n)
	for i := range out {
		out[i] = record.Sample{TimeNS: t0 + int64(i)*int64(time.Millisecond), Value: 300 + float64(i%100),
			Metric: catalog.MetricPowerDraw}
	}
	return out
}

// lockedWriter serializes writes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// prefixWriter writes each line with a prefix (in one Write).
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	_, err := p.w.Write(append([]byte(p.prefix), b...))
	return len(b), err
}
