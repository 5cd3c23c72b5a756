package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// within runs f and fails the test when it has not returned after a
// liveness bound far above what it takes on a loaded machine.
func within[T any](t *testing.T, what string, f func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- f() }()
	select {
	case v := <-done:
		return v
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: still running after 2 minutes", what)
	}
	panic("unreachable")
}

// `run --config` and `config --check` on a path that is not a regular file
// (a device that never ends, a FIFO nobody writes) fail at once with an
// error naming the file, instead of reading forever.
func TestConfigNotRegularFile(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "gpusampler.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--backend", "sim", "--config", "/dev/zero"}, "read config /dev/zero: appconfig: not a regular file (a character device)"},
		{[]string{"run", "--backend", "sim", "--config", fifo}, "read config " + fifo + ": appconfig: not a regular file (a FIFO)"},
		{[]string{"config", "--check", "/dev/zero"}, "/dev/zero"},
		{[]string{"config", "--check", fifo}, fifo},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			type result struct {
				code           int
				stdout, stderr string
			}
			r := within(t, strings.Join(tc.args, " "), func() result {
				code, stdout, stderr := runCLI(t, tc.args...)
				return result{code, stdout, stderr}
			})
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
}

// A SIGHUP reload whose config path now names /dev/zero or a FIFO is
// refused at once, the running config stays, and the next reload of a good
// file is applied (nothing is left blocked).
func TestReloadNotRegularFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpusampler.toml")
	write := func(host string) {
		doc := "[agent]\nstats_interval = \"1h\"\nhostname = \"" + host + "\"\n[[outputs.stdout]]\nformat = \"json\"\n"
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("first")
	copts := appconfig.Options{Registry: registry.Builtin()}
	cfg, err := appconfig.Load(path, copts)
	if err != nil {
		t.Fatal(err)
	}
	src, err := sim.New(sim.Options{GPUs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	a, err := agent.New(src, cfg, agent.Options{Registry: copts.Registry, Stdout: &lockedWriter{w: &strings.Builder{}}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	f := &runFlags{set: map[string]bool{}, fromFile: true}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"/dev/zero", fifo} {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		err := within(t, "reload from "+target, func() error { return reloadFile(a, path, copts, f, log) })
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("reload with the config at %s: %v, want not a regular file naming %s", target, err, path)
		}
		if _, ok := a.Outputs()["stdout"]; !ok {
			t.Fatalf("reload from %s: the running output is gone", target)
		}
	}
	os.Remove(path)
	write("second")
	if err := within(t, "reload of a good file", func() error { return reloadFile(a, path, copts, f, log) }); err != nil {
		t.Fatalf("reload of a good file after the refused ones: %v", err)
	}
}
