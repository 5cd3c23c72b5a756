package plugins_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
)

// A plugin whose Write blocks while its process stays alive (and answers
// health probes) is killed by pid once the Write runs past call_timeout,
// and restarted; the batch is kept and delivered to the new process.
func TestWedgedWriteRestartsPlugin(t *testing.T) {
	dir := t.TempDir()
	rec, block := filepath.Join(dir, "rec.jsonl"), filepath.Join(dir, "blocked")
	opts := fastOptions(t, "wedged-write", map[string]any{"record": rec, "block_once": block})
	opts.CallTimeout = 300 * time.Millisecond
	opts.HealthTimeout = 2 * time.Second // probes alone would not call it wedged in time
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := c.Stats().PID
	batch := &record.Batch{Seq: 1, Samples: outputtest.Samples(5)}
	err = c.Write(context.Background(), batch)
	if !errors.Is(err, record.ErrUnavailable) || !strings.Contains(err.Error(), "call_timeout") {
		t.Fatalf("blocked Write: %v, want ErrUnavailable naming call_timeout (the pump keeps the batch)", err)
	}
	data, _ := os.ReadFile(block)
	if got := strings.TrimSpace(string(data)); got != strconv.Itoa(first) {
		t.Fatalf("the blocking process was %q, want the first one %d", got, first)
	}
	waitFor(t, func() bool { st := c.Stats(); return st.PID != 0 && st.PID != first })
	if alive(first) {
		t.Errorf("wedged plugin %d still alive", first)
	}
	st := c.Stats()
	if st.Wedges != 1 || st.Crashes != 0 || st.Starts != 2 {
		t.Errorf("stats %+v, want 1 wedge, 0 crashes, 2 starts", st)
	}
	// the pump offers the same batch again
	if err := c.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	got := readRecords(t, rec)
	want := []pluginLine{{Seq: 1, Samples: 5, First: batch.Samples[0].Value, PID: st.PID}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records %+v, want %+v", got, want)
	}
}

// manualClock is a clock a test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (m *manualClock) Now() time.Time { m.mu.Lock(); defer m.mu.Unlock(); return m.now }
func (m *manualClock) Add(d time.Duration) {
	m.mu.Lock()
	m.now = m.now.Add(d)
	m.mu.Unlock()
}

func fieldValue(fs []record.Field, key string) (float64, bool) {
	for _, f := range fs {
		if f.Key == key {
			return f.Value, true
		}
	}
	return 0, false
}

// A crash storm marks the plugin failing (Stats, plugin_failing) instead
// of stretching the restart delay: every delay stays at most BackoffMax,
// and the mark clears once the window holds fewer restarts.
func TestCrashStormMarksFailing(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_000_000, 0)}
	opts := fastOptions(t, "storm", nil)
	log, logs := testLogger(t, "storm")
	opts.Logger = log
	opts.StormRestarts, opts.StormWindow, opts.Now = 3, time.Minute, clock.Now
	opts.BackoffMin, opts.BackoffMax = 10*time.Millisecond, 40*time.Millisecond
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 1; i <= 4; i++ {
		pid := c.Stats().PID
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { st := c.Stats(); return st.Crashes == uint64(i) && st.PID != 0 && st.PID != pid })
		st := c.Stats()
		if want := i >= 3; st.Failing != want {
			t.Errorf("after %d crashes: failing %v, want %v", i, st.Failing, want)
		}
		v, ok := fieldValue(c.ReportStats(nil), "plugin_failing")
		if want := map[bool]float64{true: 1, false: 0}[i >= 3]; !ok || v != want {
			t.Errorf("after %d crashes: plugin_failing = %v (present %v), want %v", i, v, ok, want)
		}
	}
	if n := warnLines(logs.String(), "plugin crash storm"); n != 1 {
		t.Errorf("crash storm logged %d times, want once", n)
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if i := strings.Index(l, "backoff="); i >= 0 {
			d, err := time.ParseDuration(strings.Fields(l[i+len("backoff="):])[0])
			if err != nil || d > opts.BackoffMax {
				t.Errorf("restart delay %v (%v) over the cap %v: %s", d, err, opts.BackoffMax, l)
			}
		}
	}
	clock.Add(time.Minute) // the window moves past every crash
	if st := c.Stats(); st.Failing {
		t.Errorf("still failing a window after the last crash: %+v", st)
	}
}

// A plugin's log line arrives with its own time and one output attribute;
// a replaced plugin (killed, restarted) and a shutdown log nothing at
// ERROR.
func TestPluginLogLines(t *testing.T) {
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	opts := fastOptions(t, "tidy", map[string]any{"record": rec})
	log, logs := testLogger(t, "tidy")
	opts.Logger = log
	before := time.Now()
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	waitFor(t, func() bool { return strings.Contains(logs.String(), "testplugin configured") })
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "testplugin configured") {
			line = l
		}
	}
	if n := strings.Count(line, "output="); n != 1 || strings.Contains(line, "timestamp=") || strings.Contains(line, "plugin_logger") {
		t.Errorf("plugin line %q: want one output attribute, no timestamp or plugin_logger", line)
	}
	ts, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(strings.Fields(line)[0], "time="))
	if err != nil || ts.Before(before.Add(-time.Millisecond)) || ts.After(after) {
		t.Errorf("plugin line time %v (%v), want within the start [%v, %v]", ts, err, before, after)
	}
	pid := c.Stats().PID
	syscall.Kill(pid, syscall.SIGKILL)
	waitFor(t, func() bool { st := c.Stats(); return st.PID != 0 && st.PID != pid })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 0 {
		t.Errorf("%d ERROR lines for a replacement and a shutdown:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "/proc/self/fd/") {
		t.Errorf("the log shows the descriptor path, not the plugin's:\n%s", logs.String())
	}
}
