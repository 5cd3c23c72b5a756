package plugins_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/plugins"
)

// A plugin whose resident memory exceeds its limit is killed and
// restarted, the reason counted (Stats.MemoryRestarts,
// plugin_memory_restarts, within plugin_restarts) and logged, apart from
// crashes and wedges.
func TestPluginOverMemoryLimitRestarted(t *testing.T) {
	opts := fastOptions(t, "leak", map[string]any{"leak_mb": 96})
	log, logs := testLogger(t, "leak")
	opts.Logger = log
	opts.MemoryMax = 64 << 20
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const restartLine = "plugin over its memory limit: killed; restarting"
	// The counter moves before the restart's log line is written: wait for
	// both.
	for deadline := time.Now().Add(2 * time.Minute); c.Stats().MemoryRestarts < 2 || warnLines(logs.String(), restartLine) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // liveness bound
			t.Fatalf("after 2 minutes: stats %+v, want 2 memory restarts, each logged:\n%s", c.Stats(), logs.String())
		}
	}
	st := c.Stats()
	if st.Crashes != 0 || st.Wedges != 0 {
		t.Errorf("stats %+v: restarts over the memory limit counted as crashes or wedges", st)
	}
	fields := c.ReportStats(nil)
	mem, _ := fieldValue(fields, "plugin_memory_restarts")
	restarts, _ := fieldValue(fields, "plugin_restarts")
	if mem < 2 || restarts < mem {
		t.Errorf("plugin_memory_restarts %v, plugin_restarts %v: want ≥ 2, and counted in the restarts", mem, restarts)
	}
	if n := warnLines(logs.String(), restartLine); n < 2 {
		t.Errorf("%d memory-limit restarts logged, want ≥ 2:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "memory_max_bytes=67108864") {
		t.Errorf("the restart line does not name the limit:\n%s", logs.String())
	}
}

// memory_max_bytes: unset is the default limit, 0 is no limit, below 1 MiB
// is a key error.
func TestMemoryMaxBytesKey(t *testing.T) {
	reg := outputs.NewRegistry(plugins.Kind())
	block := "[[outputs.plugin]]\n  name = \"my-sink\"\n  path = \"/usr/local/lib/gpusampler/my-sink\"\n  allow_unverified = true\n"
	for _, tc := range []struct {
		line    string
		want    int64
		wantErr string
	}{
		{"", 0, ""},
		{"  memory_max_bytes = 0\n", -1, ""},
		{"  memory_max_bytes = 268435456\n", 256 << 20, ""},
		{"  memory_max_bytes = 1000\n", 0, "test.toml:5: outputs.plugin[0].memory_max_bytes: 1000: want at least 1048576 (1 MiB), or 0 for no limit"},
	} {
		cfg, err := appconfig.Parse("test.toml", []byte(block+tc.line), appconfig.Options{Registry: reg})
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("%q: err %v, want %s", tc.line, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if got := cfg.Outputs[0].Options.(plugins.KindOptions).MemoryMax; got != tc.want {
			t.Errorf("%q: MemoryMax %d, want %d", tc.line, got, tc.want)
		}
	}
}

// The shared process of the built-in outputs has a memory limit of its
// own: over it, the process is killed and every output in it restarted,
// each counting a memory restart (not a crash) and logging the limit.
func TestSharedProcessOverMemoryLimitRestarted(t *testing.T) {
	exe, _ := os.Executable()
	reg := plugins.HostRegistry(outputs.NewRegistry(fileKind()), plugins.HostOptions{Executable: exe, Shared: true,
		SharedMemoryMax: 2 << 20, // below any Go process's resident memory
		Args:            func(string) []string { return []string{"-test.run=^TestHelperServeShared$"} },
		Env:             []string{"GPUSAMPLER_HELPER_SERVE_SHARED=1", "GPUSAMPLER_HELPER_PLUGIN=" + testPluginPath}})
	dir := t.TempDir()
	clients := buildClients(t, reg, "[[outputs.countfile]]\n  name = \"a\"\n  path = \""+filepath.Join(dir, "a")+"\"\n"+
		"[[outputs.countfile]]\n  name = \"b\"\n  path = \""+filepath.Join(dir, "b")+"\"\n")
	for deadline := time.Now().Add(2 * time.Minute); clients[0].Stats().MemoryRestarts < 1 || clients[1].Stats().MemoryRestarts < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // liveness bound
			t.Fatalf("after 2 minutes: stats a %+v, b %+v: want a memory restart each", clients[0].Stats(), clients[1].Stats())
		}
	}
	for _, c := range clients {
		if st := c.Stats(); st.Crashes != 0 || st.Wedges != 0 {
			t.Errorf("stats %+v: the shared process's memory-limit kill counted as a crash or wedge", st)
		}
	}
}
