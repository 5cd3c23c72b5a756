package plugins_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/sampler"
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
	batch := &sampler.Batch{Seq: 1, Samples: outputtest.Samples(5)}
	err = c.Write(context.Background(), batch)
	if !errors.Is(err, sampler.ErrUnavailable) || !strings.Contains(err.Error(), "call_timeout") {
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
	want := []record{{Seq: 1, Samples: 5, First: batch.Samples[0].Value, PID: st.PID}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("records %+v, want %+v", got, want)
	}
}
