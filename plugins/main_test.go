package plugins_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
)

// testPluginPath is the test plugin, built once per test binary.
var testPluginPath string

func TestMain(m *testing.M) {
	if p := os.Getenv("GPUSAMPLER_HELPER_PLUGIN"); p != "" { // a helper host process: reuse the parent's build
		testPluginPath = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "gpusampler-plugins-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testPluginPath = filepath.Join(dir, "testplugin")
	if out, err := exec.Command("go", "build", "-o", testPluginPath, "./internal/testplugin").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build testplugin: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// logBuffer collects log records (for asserting that plugin logs arrive).
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testLogger(t *testing.T, name string) (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	h := slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(h).With("output", name), lb
}

// fastOptions are supervision settings that keep fault tests short.
func fastOptions(t *testing.T, name string, cfg map[string]any) plugins.Options {
	log, _ := testLogger(t, name)
	return plugins.Options{Name: name, Kind: "plugin", Config: cfg, Logger: log,
		Command:     func() *exec.Cmd { return exec.Command(testPluginPath) },
		CallTimeout: 2 * time.Second, HealthInterval: 50 * time.Millisecond, HealthTimeout: 200 * time.Millisecond,
		BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond, ResetAfter: 300 * time.Millisecond}
}

// pluginLine is one line of the test plugin's record file.
type pluginLine struct {
	Seq     uint64  `json:"seq"`
	Samples int     `json:"samples"`
	First   float64 `json:"first"`
	Devices []int   `json:"devices"`
	Events  int     `json:"events"`
	PID     int     `json:"pid"`
}

func readRecords(t *testing.T, path string) []pluginLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []pluginLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r pluginLine
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue // a line cut short by SIGKILL
		}
		out = append(out, r)
	}
	return out
}

// dumpedSamples reads the test plugin's dump file.
func dumpedSamples(t *testing.T, path string) []record.Sample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []record.Sample
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s struct {
			T int64   `json:"t"`
			V float64 `json:"v"`
			D uint16  `json:"d"`
			M uint16  `json:"m"`
		}
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, record.Sample{TimeNS: s.T, Value: s.V, Device: s.D, Metric: catalog.MetricID(s.M)})
	}
	return out
}

// alive reports whether pid is a live (not zombie) process running the
// test plugin binary.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && strings.HasPrefix(exe, testPluginPath)
}

func testPluginCmd() *exec.Cmd { return exec.Command(testPluginPath) }
