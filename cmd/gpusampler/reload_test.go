package main

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
	"github.com/gpusampler/gpusampler/outputs/execd"
)

// The flags that shape the config are applied the same way to the config
// read at start and to every config a reload reads.
func TestRunFlagsApplyAtStartAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpusampler.toml")
	doc := "[agent]\nhostname = \"from-file\"\n[sampler]\nbackend = \"sim\"\ngpus = 3\ndrain_interval = \"1s\"\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdin, stdinW := osPipe(t)
	defer stdinW.Close()
	f := &runFlags{
		set:      map[string]bool{"host": true, "execd": true, "drain-interval": true, "field-interval": true, "gpus": true},
		backend:  backendFlags{backend: "auto", profile: "training", gpus: 5, seed: 1},
		host:     "from-flag",
		execd:    "stream",
		drain:    positiveDuration{d: 300 * time.Millisecond, set: true},
		field:    positiveDuration{d: 50 * time.Millisecond, set: true},
		fromFile: true,
		wiring:   newExecdWiring(ctx, stdin, cancel),
	}
	copts := appconfig.Options{Registry: registry.Builtin()}
	load := func() *appconfig.Config {
		cfg, err := appconfig.Load(path, copts)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.apply(cfg); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	start, reload := load(), load()
	want := start.Sampler
	want.Backend, want.GPUs, want.DrainInterval, want.FieldInterval = "sim", 5, 300*time.Millisecond, 50*time.Millisecond
	for i, cfg := range []*appconfig.Config{start, reload} {
		if !reflect.DeepEqual(cfg.Sampler, want) {
			t.Errorf("config %d: sampler %+v, want %+v", i, cfg.Sampler, want)
		}
		if cfg.Agent.Hostname != "from-flag" {
			t.Errorf("config %d: hostname %q, want from-flag", i, cfg.Agent.Hostname)
		}
		if len(cfg.Outputs) != 1 || cfg.Outputs[0].Kind != "execd" {
			t.Fatalf("config %d: outputs %+v, want the execd output alone", i, cfg.Outputs)
		}
		opts := cfg.Outputs[0].Options.(execd.Options)
		if opts.Signal != execd.SignalNone || opts.Trigger != (<-chan struct{})(f.wiring.trigger) {
			t.Errorf("config %d: execd options %+v, want signal none and the shared trigger", i, opts)
		}
	}
	if !start.Outputs[0].Same(reload.Outputs[0]) {
		t.Error("the execd output of a reloaded, unchanged config differs from the running one")
	}
}

func osPipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, w
}

// The live table reads every buffer at the drain interval and slow state,
// GPM and processes once a second, whatever the long-running defaults;
// --drain-interval still sets the drain interval, for every buffer.
func TestWatchingRates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drain positiveDuration
		want  time.Duration
	}{
		{"defaults", positiveDuration{}, time.Second},
		{"--drain-interval 15s", positiveDuration{d: 15 * time.Second, set: true}, 15 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := appconfig.Parse("(flags)", nil, appconfig.Options{Registry: registry.Builtin()})
			if err != nil {
				t.Fatal(err)
			}
			want := cfg.Sampler
			want.DrainInterval, want.SecondaryDrainInterval = tc.want, tc.want
			want.SlowInterval, want.GPMInterval, want.ProcessInterval = time.Second, time.Second, time.Second
			f := &runFlags{set: map[string]bool{}, backend: backendFlags{backend: "auto", profile: "training", gpus: 2, seed: 1}, drain: tc.drain}
			if err := f.apply(cfg); err != nil {
				t.Fatal(err)
			}
			watchingRates(&cfg.Sampler)
			if !reflect.DeepEqual(cfg.Sampler, want) {
				t.Errorf("sampler %+v\nwant %+v", cfg.Sampler, want)
			}
		})
	}
}
