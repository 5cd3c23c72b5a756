package plugins_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/plugins/sdk"
	"github.com/gpusampler/gpusampler/record"
)

// fileKind is a built-in-style kind marked OutOfProcess: it appends the
// sample count of each batch and the build environment to a file. A batch
// whose Seq is crash_at ends its process (exit status 3). With block_once
// = FILE, the first Write that finds no FILE creates it (holding the pid)
// and blocks forever, ignoring its context (a wedged output). With slow =
// true every Write waits for its context to end and returns its error (a
// black-holed sink whose request the Write's deadline cuts short).
func fileKind() outputs.Kind {
	return outputs.Kind{Kind: "countfile", SampleConfig: "[[outputs.countfile]]\n  path = \"/tmp/x\"\n",
		OutOfProcess: true,
		Parse: func(t *config.Table) any {
			var o fileOptions
			t.String("path", &o.path)
			if o.path == "" {
				t.Errorf("path", "required")
			}
			t.Int("crash_at", &o.crashAt, 0, 1<<30)
			t.String("block_once", &o.blockOnce)
			t.Bool("slow", &o.slow)
			return o
		},
		Build: func(o *outputs.Block, env outputs.BuildEnv) (record.Output, error) {
			opts := o.Options.(fileOptions)
			f, err := os.OpenFile(opts.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return nil, err
			}
			f.WriteString("built in pid " + itoa(os.Getpid()) + " host " + env.Host + " name " + o.Name + "\n")
			return &countFile{f: f, crashAt: opts.crashAt, blockOnce: opts.blockOnce, slow: opts.slow}, nil
		}}
}

type fileOptions struct {
	path      string
	crashAt   int
	blockOnce string
	slow      bool
}

type countFile struct {
	f         *os.File
	crashAt   int
	blockOnce string
	slow      bool
}

func (c *countFile) Write(ctx context.Context, b *record.Batch) error {
	if c.slow {
		<-ctx.Done()
		return fmt.Errorf("slow sink: %w", ctx.Err())
	}
	if c.crashAt > 0 && b.Seq == uint64(c.crashAt) {
		os.Exit(3)
	}
	if c.blockOnce != "" {
		if f, err := os.OpenFile(c.blockOnce, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			f.WriteString(itoa(os.Getpid()))
			f.Close()
			select {} // wedged: ignores its context
		}
	}
	_, err := c.f.WriteString("samples " + itoa(len(b.Samples)) + "\n")
	return err
}
func (c *countFile) Close() error { return c.f.Close() }

// TestHelperServe is the re-executed binary: `gpusampler plugin serve KIND`
// in this test binary.
func TestHelperServe(t *testing.T) {
	if os.Getenv("GPUSAMPLER_HELPER_SERVE") == "" {
		t.Skip("helper process only")
	}
	sdk.ServeKind(fileKind())
	os.Exit(0)
}

// A kind marked OutOfProcess is built by HostRegistry as a plugin client
// that re-executes the binary; the plugin side builds it with the kind's
// own Build. Key errors from that side land at the config's lines.
func TestHostRegistryOutOfProcess(t *testing.T) {
	exe, _ := os.Executable()
	// the plugin's environment is minimal: the helper's variables go in HostOptions.Env
	reg := plugins.HostRegistry(outputs.NewRegistry(fileKind()), plugins.HostOptions{Executable: exe,
		Args: func(string) []string { return []string{"-test.run=^TestHelperServe$"} },
		Env:  []string{"GPUSAMPLER_HELPER_SERVE=1", "GPUSAMPLER_HELPER_PLUGIN=" + testPluginPath}})
	path := filepath.Join(t.TempDir(), "out.txt")
	cfg, err := appconfig.Parse("t.toml", []byte("[[outputs.countfile]]\n  name = \"far\"\n  flush_interval = \"1s\"\n  path = \""+path+"\"\n"),
		appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := reg.Lookup("countfile")
	out, err := k.Build(&cfg.Outputs[0].Block, outputs.BuildEnv{Host: "node7"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.(*plugins.Client); !ok {
		t.Fatalf("built %T, want *plugins.Client", out)
	}
	if err := out.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(7)}); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	got := string(data)
	if strings.Contains(got, "pid "+itoa(os.Getpid())+" ") || !strings.Contains(got, "host node7 name far") ||
		!strings.Contains(got, "samples 7") {
		t.Fatalf("plugin side wrote %q", got)
	}
}

// TestHelperServeShared is the re-executed binary serving every kind in one
// process: `gpusampler plugin serve` in this test binary.
func TestHelperServeShared(t *testing.T) {
	if os.Getenv("GPUSAMPLER_HELPER_SERVE_SHARED") == "" {
		t.Skip("helper process only")
	}
	sdk.ServeKinds(fileKind())
	os.Exit(0)
}

// With HostOptions.Shared the outputs of out-of-process kinds run as
// instances in one process, each built with its own block. When that
// process crashes, every output is rebuilt in one new process, and a
// Write meanwhile is unavailable (the pump keeps the batch). Closing one
// output leaves the process serving the other; the last Close ends it.
func TestHostRegistrySharedProcess(t *testing.T) {
	exe, _ := os.Executable()
	reg := plugins.HostRegistry(outputs.NewRegistry(fileKind()), plugins.HostOptions{Executable: exe, Shared: true,
		Args: func(kind string) []string {
			if kind != "" {
				t.Errorf("shared process asked for kind %q, want \"\"", kind)
			}
			return []string{"-test.run=^TestHelperServeShared$"}
		},
		Env: []string{"GPUSAMPLER_HELPER_SERVE_SHARED=1", "GPUSAMPLER_HELPER_PLUGIN=" + testPluginPath}})
	dir := t.TempDir()
	pathA, pathB := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	cfg, err := appconfig.Parse("t.toml", []byte("[[outputs.countfile]]\n  name = \"a\"\n  path = \""+pathA+"\"\n  crash_at = 3\n"+
		"[[outputs.countfile]]\n  name = \"b\"\n  path = \""+pathB+"\"\n"), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := reg.Lookup("countfile")
	var clients []*plugins.Client
	for i := range cfg.Outputs {
		out, err := k.Build(&cfg.Outputs[i].Block, outputs.BuildEnv{Host: "node7"})
		if err != nil {
			t.Fatal(err)
		}
		c, ok := out.(*plugins.Client)
		if !ok {
			t.Fatalf("built %T, want *plugins.Client", out)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	a, b := clients[0], clients[1]
	pid := a.Stats().PID
	if pid == 0 || pid == os.Getpid() || b.Stats().PID != pid {
		t.Fatalf("pids: a %d, b %d, host %d: want one shared plugin process", pid, b.Stats().PID, os.Getpid())
	}
	write := func(c *plugins.Client, seq uint64, n int) error {
		return c.Write(context.Background(), &record.Batch{Seq: seq, Samples: outputtest.Samples(n)})
	}
	// writeAgain offers a batch until it is taken, as the pump does while
	// the output's process restarts; any other error fails.
	writeAgain := func(c *plugins.Client, seq uint64, n int) {
		t.Helper()
		for {
			err := write(c, seq, n)
			if err == nil {
				return
			}
			if !errors.Is(err, record.ErrUnavailable) && record.Classify(err) != record.KindUnavailable {
				t.Fatalf("write seq %d: %v, want it taken or unavailable while restarting", seq, err)
			}
			time.Sleep(10 * time.Millisecond) // polling the restart, not waiting for it
		}
	}
	for _, w := range []struct {
		c   *plugins.Client
		seq uint64
		n   int
	}{{a, 1, 7}, {b, 1, 5}, {a, 2, 1}} {
		if err := write(w.c, w.seq, w.n); err != nil {
			t.Fatal(err)
		}
	}
	if err := write(a, 3, 1); err == nil {
		t.Fatal("the write that ends the shared process succeeded")
	}
	writeAgain(b, 2, 4)
	writeAgain(a, 4, 2)
	pid2 := a.Stats().PID
	if pid2 == pid || b.Stats().PID != pid2 {
		t.Fatalf("after the crash: a in %d, b in %d (before: %d), want both in one new process", pid2, b.Stats().PID, pid)
	}
	for _, c := range clients {
		if s := c.Stats(); s.Crashes != 1 || s.Starts != 2 || s.Wedges != 0 {
			t.Errorf("stats %+v, want 1 crash, 2 starts, no wedge", s)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := write(b, 3, 3); err != nil {
		t.Fatalf("b after a closed: %v", err)
	}
	if b.Stats().PID != pid2 {
		t.Fatalf("b moved to pid %d after a closed, want %d", b.Stats().PID, pid2)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid2, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("shared process %d after the last Close: kill 0 = %v, want ESRCH (gone)", pid2, err)
	}
	built := func(p int, name string) string { return "built in pid " + itoa(p) + " host node7 name " + name + "\n" }
	for _, f := range []struct{ path, want string }{
		{pathA, built(pid, "a") + "samples 7\nsamples 1\n" + built(pid2, "a") + "samples 2\n"},
		{pathB, built(pid, "b") + "samples 5\n" + built(pid2, "b") + "samples 4\nsamples 3\n"},
	} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != f.want {
			t.Errorf("%s:\n%s\nwant\n%s", filepath.Base(f.path), data, f.want)
		}
	}
}

// sharedHost returns a registry whose countfile outputs share one process
// (this test binary's TestHelperServeShared).
func sharedHost(t *testing.T) *outputs.Registry {
	exe, _ := os.Executable()
	return plugins.HostRegistry(outputs.NewRegistry(fileKind()), plugins.HostOptions{Executable: exe, Shared: true,
		Args: func(string) []string { return []string{"-test.run=^TestHelperServeShared$"} },
		Env:  []string{"GPUSAMPLER_HELPER_SERVE_SHARED=1", "GPUSAMPLER_HELPER_PLUGIN=" + testPluginPath}})
}

// buildClients builds every output of doc with reg, closed at cleanup.
func buildClients(t *testing.T, reg *outputs.Registry, doc string) []*plugins.Client {
	t.Helper()
	cfg, err := appconfig.Parse("t.toml", []byte(doc), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	var clients []*plugins.Client
	for i := range cfg.Outputs {
		k, _ := reg.Lookup(cfg.Outputs[i].Kind)
		out, err := k.Build(&cfg.Outputs[i].Block, outputs.BuildEnv{Host: "node7"})
		if err != nil {
			t.Fatal(err)
		}
		c := out.(*plugins.Client)
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	return clients
}

// A wedged output in the shared process (its Write ignores its context) is
// given up alone: the process it shared keeps serving the other output —
// same pid, no crash or wedge counted for it, none of its batches refused —
// and the wedged output is restarted in a process of its own, where the
// batch it held is delivered. A wedge there, where it is alone, kills that
// process.
func TestSharedProcessWedgeGivenUpAlone(t *testing.T) {
	dir := t.TempDir()
	pathA, pathB := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	blockA := filepath.Join(dir, "a.blocked")
	// write_timeout 1s: a call timeout of 800ms
	clients := buildClients(t, sharedHost(t), "[[outputs.countfile]]\n  name = \"a\"\n  write_timeout = \"1s\"\n  path = \""+pathA+"\"\n  block_once = \""+blockA+"\"\n"+
		"[[outputs.countfile]]\n  name = \"b\"\n  path = \""+pathB+"\"\n")
	a, b := clients[0], clients[1]
	shared := a.Stats().PID
	if shared == 0 || b.Stats().PID != shared {
		t.Fatalf("pids: a %d, b %d: want one shared process", shared, b.Stats().PID)
	}
	write := func(c *plugins.Client, seq uint64, n int) error {
		return c.Write(context.Background(), &record.Batch{Seq: seq, Samples: outputtest.Samples(n)})
	}
	err := write(a, 1, 7)
	if !errors.Is(err, record.ErrUnavailable) || !strings.Contains(err.Error(), "call_timeout") {
		t.Fatalf("wedged write: %v, want unavailable past call_timeout", err)
	}
	// b writes on, in the same process, while a is given up and restarted
	seq := uint64(0)
	for bound := time.Now().Add(2 * time.Minute); a.Stats().PID == 0 || a.Stats().PID == shared; {
		if time.Now().After(bound) {
			t.Fatal("the wedged output was not restarted within 2 minutes")
		}
		seq++
		if err := write(b, seq, 1); err != nil {
			t.Fatalf("healthy output's write %d while its neighbour wedged: %v", seq, err)
		}
		if seq%50 == 0 {
			time.Sleep(10 * time.Millisecond) // polling a's restart, not waiting for it
		}
	}
	isolated := a.Stats().PID
	if st := b.Stats(); st.PID != shared || st.Crashes != 0 || st.Wedges != 0 || st.Starts != 1 {
		t.Fatalf("healthy output's stats %+v: want it still in %d, never restarted", st, shared)
	}
	if st := a.Stats(); st.Wedges != 1 || st.Crashes != 0 || !st.Isolated || isolated == shared {
		t.Fatalf("wedged output's stats %+v: want 1 wedge, isolated in a new process", st)
	}
	if err := syscall.Kill(shared, 0); err != nil {
		t.Fatalf("shared process %d: %v, want it alive", shared, err)
	}
	// the held batch goes to a's new process
	if err := write(a, 1, 7); err != nil {
		t.Fatal(err)
	}
	// a wedge where a is alone kills its process (b unaffected)
	if err := os.Remove(blockA); err != nil {
		t.Fatal(err)
	}
	if err := write(a, 2, 3); !errors.Is(err, record.ErrUnavailable) {
		t.Fatalf("second wedged write: %v, want unavailable", err)
	}
	waitFor(t, func() bool { p := a.Stats().PID; return p != 0 && p != isolated })
	waitFor(t, func() bool { return syscall.Kill(isolated, 0) != nil }) // killed (and reaped)
	if err := write(b, seq+1, 2); err != nil || b.Stats().PID != shared {
		t.Fatalf("healthy output after its neighbour's second wedge: %v, pid %d (want %d)", err, b.Stats().PID, shared)
	}
	data, err := os.ReadFile(pathA)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "samples 7\n"); n != 1 {
		t.Fatalf("a's file:\n%s\nwant the held batch delivered once", data)
	}
	data, _ = os.ReadFile(pathB)
	if n := strings.Count(string(data), "samples "); uint64(n) != seq+1 {
		t.Fatalf("b delivered %d batches, want %d", n, seq+1)
	}
}

// A black-holed sink (each Write waits out its deadline) beside a healthy
// output in the shared process: the deadline budget makes its Write end
// with its own error before the host's call timeout, so it is handled as
// slow (retryable, offered again by the pump), never as wedged: no output
// restarts, and the healthy one writes on in the same process.
func TestSharedProcessSlowSinkIsNotWedged(t *testing.T) {
	dir := t.TempDir()
	pathA, pathB := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	clients := buildClients(t, sharedHost(t), "[[outputs.countfile]]\n  name = \"a\"\n  write_timeout = \"5s\"\n  path = \""+pathA+"\"\n  slow = true\n"+
		"[[outputs.countfile]]\n  name = \"b\"\n  path = \""+pathB+"\"\n")
	a, b := clients[0], clients[1]
	pid := a.Stats().PID
	// write_timeout 5s: call timeout 4s, the output's deadline 3.2s (an
	// 800ms margin for its answer to reach the host)
	for seq := uint64(1); seq <= 2; seq++ {
		// the pump's deadline: write_timeout
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := a.Write(ctx, &record.Batch{Seq: seq, Samples: outputtest.Samples(2)})
		cancel()
		if record.Classify(err) != record.KindRetryable || !strings.Contains(err.Error(), "slow sink") {
			t.Fatalf("slow sink's write %d: %v (%v), want its own retryable error", seq, err, record.Classify(err))
		}
		if err := b.Write(context.Background(), &record.Batch{Seq: seq, Samples: outputtest.Samples(1)}); err != nil {
			t.Fatalf("healthy output's write %d: %v", seq, err)
		}
	}
	for _, c := range clients {
		if st := c.Stats(); st.PID != pid || st.Starts != 1 || st.Wedges != 0 || st.Crashes != 0 {
			t.Fatalf("stats %+v: want both still in %d, never restarted", st, pid)
		}
	}
}
