package plugins_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// counter is an in-process output that keeps every sample count.
type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Write(_ context.Context, b *record.Batch) error {
	c.mu.Lock()
	c.n += len(b.Samples)
	c.mu.Unlock()
	return nil
}
func (c *counter) Close() error { return nil }

// runEngine runs e until stop returns true (polled), then stops it.
func runEngine(t *testing.T, e *sampler.Engine, step func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	deadline := time.Now().Add(90 * time.Second)
	for !step() {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatal("test did not finish within 90s")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func newSimEngine(t *testing.T) *sampler.Engine {
	t.Helper()
	src, err := sim.New(sim.Options{GPUs: 2, Profile: "training"})
	if err != nil {
		t.Fatal(err)
	}
	e, err := sampler.New(src, sampler.Config{DrainInterval: 20 * time.Millisecond, FieldInterval: 10 * time.Millisecond,
		RingSize: 1 << 18})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func statsOf(e *sampler.Engine, name string) sampler.OutputStats {
	for _, o := range e.Stats().Outputs {
		if o.Name == name {
			return o
		}
	}
	return sampler.OutputStats{}
}

// SIGKILL the plugin 20 times during a run: it is back every time, and
// per output published = delivered + dropped exactly, with 0 dropped
// (the ring covers every gap) and every batch in the sink.
func TestSIGKILLPluginIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	c, err := plugins.Start(fastOptions(t, "victim", map[string]any{"record": rec}))
	if err != nil {
		t.Fatal(err)
	}
	e := newSimEngine(t)
	local := &counter{}
	pump := sampler.PumpOptions{FlushInterval: 10 * time.Millisecond}
	if err := e.AddOutput("victim", c, pump); err != nil {
		t.Fatal(err)
	}
	if err := e.AddOutput("local", local, pump); err != nil {
		t.Fatal(err)
	}
	const kills = 20
	killed := 0
	var pids []int
	var lastKill time.Time
	var deliveredAtKill uint64
	runEngine(t, e, func() bool {
		st := c.Stats()
		if st.PID == 0 {
			return false
		}
		// kill only once the restarted plugin has taken a batch
		if d := statsOf(e, "victim").Delivered; d > deliveredAtKill && time.Since(lastKill) > 30*time.Millisecond {
			if killed == kills {
				return true
			}
			if len(pids) > 0 && pids[len(pids)-1] == st.PID {
				return false
			}
			pids = append(pids, st.PID)
			if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %d: %v", st.PID, err)
			}
			killed++
			lastKill, deliveredAtKill = time.Now(), d
		}
		return false
	})
	st := c.Stats()
	// (a killed process not yet reaped when probed may count as wedged)
	if st.Crashes+st.Wedges != kills || st.Starts != kills+1 {
		t.Errorf("supervisor stats %+v, want %d restarts and %d starts", st, kills, kills+1)
	}
	for _, name := range []string{"victim", "local"} {
		o := statsOf(e, name)
		if o.Published != o.Delivered+o.Dropped || o.Dropped != 0 || o.Failed != 0 || o.Pending != 0 {
			t.Errorf("%s: %+v: want published = delivered, none dropped or failed", name, o)
		}
		t.Logf("%s: published %d delivered %d dropped %d retries %d", name, o.Published, o.Delivered, o.Dropped, o.Retries)
	}
	// the sink saw every batch (de-duplicated by seq) with the delivered count
	seen := map[uint64]int{}
	for _, r := range readRecords(t, rec) {
		seen[r.Seq] = r.Samples
	}
	var total uint64
	for _, n := range seen {
		total += uint64(n)
	}
	victim := statsOf(e, "victim")
	if total != victim.Delivered {
		t.Errorf("sink holds %d distinct samples, pump delivered %d", total, victim.Delivered)
	}
	if local.n != int(statsOf(e, "local").Delivered) {
		t.Errorf("local output got %d, pump says %d", local.n, statsOf(e, "local").Delivered)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("killed plugin %d still alive", pid)
		}
	}
}

// SIGSTOP the plugin: detected as wedged, killed by pid, restarted; the
// other output loses nothing.
func TestSIGSTOPPluginIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	c, err := plugins.Start(fastOptions(t, "stopped", map[string]any{"record": rec}))
	if err != nil {
		t.Fatal(err)
	}
	e := newSimEngine(t)
	local := &counter{}
	pump := sampler.PumpOptions{FlushInterval: 10 * time.Millisecond}
	e.AddOutput("stopped", c, pump)
	e.AddOutput("local", local, pump)
	var stoppedPID int
	var localAtStop uint64
	phase := 0
	runEngine(t, e, func() bool {
		switch phase {
		case 0:
			if statsOf(e, "stopped").Delivered > 1000 {
				stoppedPID = c.Stats().PID
				syscall.Kill(stoppedPID, syscall.SIGSTOP)
				localAtStop = statsOf(e, "local").Delivered
				phase = 1
			}
		case 1: // the other output keeps delivering while the plugin is stopped
			if c.Stats().Wedges == 1 && c.Stats().PID != 0 && statsOf(e, "local").Delivered > localAtStop+1000 {
				phase = 2
			}
		case 2:
			return statsOf(e, "stopped").Pending == 0 && statsOf(e, "stopped").Retries > 0
		}
		return false
	})
	if alive(stoppedPID) {
		syscall.Kill(stoppedPID, syscall.SIGKILL)
		t.Errorf("stopped plugin %d was not killed", stoppedPID)
	}
	st := c.Stats()
	if st.Wedges != 1 || st.Starts != 2 {
		t.Errorf("supervisor stats %+v, want 1 wedge and 2 starts", st)
	}
	for _, name := range []string{"stopped", "local"} {
		o := statsOf(e, name)
		if o.Published != o.Delivered+o.Dropped || o.Dropped != 0 || o.Failed != 0 {
			t.Errorf("%s: %+v", name, o)
		}
	}
	t.Logf("restart after wedge took %v", st.LastRestart)
}

// A binary whose checksum does not match is refused before it runs.
func TestChecksumMismatch(t *testing.T) {
	reg := outputs.NewRegistry(plugins.Kind())
	cfgText := `
[[outputs.plugin]]
  name = "my-sink"
  path = "` + testPluginPath + `"
  sha256 = "` + strings.Repeat("ab", 32) + `"
`
	cfg, err := appconfig.Parse("test.toml", []byte(cfgText), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := reg.Lookup("plugin")
	_, err = k.Build(&cfg.Outputs[0].Block, outputs.BuildEnv{})
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), testPluginPath) {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

// Key errors from the plugin come back at the config file's lines.
func TestPluginKeyErrorsAtLines(t *testing.T) {
	reg := outputs.NewRegistry(plugins.Kind())
	cfgText := `[[outputs.plugin]]
  name = "my-sink"
  path = "` + testPluginPath + `"
  allow_unverified = true
  [outputs.plugin.config]
    min_value = 5000
    colour = "red"
`
	cfg, err := appconfig.Parse("test.toml", []byte(cfgText), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := reg.Lookup("plugin")
	_, err = k.Build(&cfg.Outputs[0].Block, outputs.BuildEnv{})
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	for _, want := range []string{"test.toml:6: outputs.plugin[0].config.min_value: 5000 is out of range",
		"test.toml:7: outputs.plugin[0].config.colour: unknown key"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
}

// A plugin that panics in configure: the startup error names the output.
func TestConfigurePanicNamesOutput(t *testing.T) {
	reg := outputs.NewRegistry(plugins.Kind())
	cfgText := `[[outputs.plugin]]
  name = "panicky-sink"
  path = "` + testPluginPath + `"
  allow_unverified = true
  [outputs.plugin.config]
    panic_configure = true
`
	dir := t.TempDir()
	path := filepath.Join(dir, "gpusampler.toml")
	os.WriteFile(path, []byte(cfgText), 0o644)
	cfg, err := appconfig.Load(path, appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	src, _ := sim.New(sim.Options{GPUs: 1})
	_, err = newAgent(src, cfg, reg, true)
	if err == nil || !strings.Contains(err.Error(), "output panicky-sink") || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("strict: err = %v", err)
	}
	t.Log(err)
	// Without --strict the agent runs and keeps retrying it, with the
	// same error.
	src, _ = sim.New(sim.Options{GPUs: 1})
	a, err := newAgent(src, cfg, reg, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := a.NotStarted()["panicky-sink"]; got == nil || !strings.Contains(got.Error(), "output panicky-sink") || !strings.Contains(got.Error(), "panic") {
		t.Errorf("not started: %v", got)
	}
}

// The host killed with SIGKILL leaves no plugin process behind.
func TestHostSIGKILLNoOrphanIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pids")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHost$")
	cmd.Env = append(os.Environ(), "GPUSAMPLER_HELPER_HOST="+pidFile, "GPUSAMPLER_HELPER_PLUGIN="+testPluginPath)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	waitFor(t, func() bool {
		data, _ := os.ReadFile(pidFile)
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			var pid int
			if _, err := fmtSscan(f, &pid); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) == 2
	})
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("plugin %d not running before the host is killed", pid)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	waitFor(t, func() bool { return !alive(pids[0]) && !alive(pids[1]) })
}

// TestHelperHost is the host process TestHostSIGKILLNoOrphanIntegration
// kills: it starts two plugins, writes their pids, and waits.
func TestHelperHost(t *testing.T) {
	pidFile := os.Getenv("GPUSAMPLER_HELPER_HOST")
	if pidFile == "" {
		t.Skip("helper process only")
	}
	var pids []string
	for i := range 2 {
		opts := fastOptions(t, "orphan", nil)
		opts.Name = opts.Name + string(rune('a'+i))
		c, err := plugins.Start(opts)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, itoa(c.Stats().PID))
	}
	os.WriteFile(pidFile, []byte(strings.Join(pids, " ")), 0o644)
	time.Sleep(time.Minute)
}
