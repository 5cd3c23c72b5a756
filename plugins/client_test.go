package plugins_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
)

// The plugin client passes the same conformance suite as every output.
func TestClientConformance(t *testing.T) {
	var dump string
	outputtest.Run(t, outputtest.Harness{
		New: func(t *testing.T) record.Output {
			dump = filepath.Join(t.TempDir(), "dump.jsonl")
			c, err := plugins.Start(fastOptions(t, "conf", map[string]any{"dump": dump}))
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		Received: func(t *testing.T) []record.Sample {
			if _, err := os.Stat(dump); err != nil {
				return nil
			}
			return dumpedSamples(t, dump)
		},
	})
}

// Device identities go once per connection and again on change; events,
// summaries and Seq arrive.
func TestClientDevicesOncePerConnection(t *testing.T) {
	rec := filepath.Join(t.TempDir(), "rec.jsonl")
	c, err := plugins.Start(fastOptions(t, "dev", map[string]any{"record": rec}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	d0, d1 := outputtest.Device, outputtest.Device
	d1.Index = 1
	write := func(b *record.Batch) {
		t.Helper()
		if err := c.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	write(&record.Batch{Seq: 1, Devices: []record.Device{d0, d1}, Samples: outputtest.Samples(3)})
	write(&record.Batch{Seq: 2, Samples: outputtest.Samples(3), Events: []record.Event{{Kind: record.EventXID}}})
	d1.Generation++
	write(&record.Batch{Seq: 3, Devices: []record.Device{d1}, Samples: outputtest.Samples(3)})
	// restart the plugin: the new process learns both devices again
	pid := c.Stats().PID
	if err := syscallKill(pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { s := c.Stats(); return s.PID != 0 && s.PID != pid })
	write(&record.Batch{Seq: 4, Samples: outputtest.Samples(3)})
	// Another identity under index 0 with the same Generation (a buffer
	// replayed an earlier process's batches; this process numbers its
	// devices anew): sent, so that the sink does not keep the old one.
	d0b := d0
	d0b.UUID = "GPU-other"
	write(&record.Batch{Seq: 5, Devices: []record.Device{d0b}, Samples: outputtest.Samples(3)})
	write(&record.Batch{Seq: 6, Devices: []record.Device{d0b}, Samples: outputtest.Samples(3)})
	got := readRecords(t, rec)
	want := []struct {
		seq  uint64
		devs string
		ev   int
	}{{1, "0,1", 0}, {2, "", 1}, {3, "1", 0}, {4, "0,1", 0}, {5, "0", 0}, {6, "", 0}}
	if len(got) != len(want) {
		t.Fatalf("records %+v", got)
	}
	for i, w := range want {
		var devs []string
		for _, d := range got[i].Devices {
			devs = append(devs, string(rune('0'+d)))
		}
		if got[i].Seq != w.seq || strings.Join(devs, ",") != w.devs || got[i].Events != w.ev || got[i].Samples != 3 {
			t.Errorf("batch %d: %+v, want seq %d devices %q events %d", i, got[i], w.seq, w.devs, w.ev)
		}
	}
}

// A plugin that refuses keys reports them by key path.
func TestClientConfigKeyErrors(t *testing.T) {
	_, err := plugins.Start(fastOptions(t, "bad", map[string]any{"min_value": int64(-1), "colour": "red"}))
	kerrs := plugins.KeyErrors(err)
	if len(kerrs) != 2 {
		t.Fatalf("err %v, key errors %+v", err, kerrs)
	}
	keys := kerrs[0].Key + " " + kerrs[1].Key
	if !strings.Contains(keys, "min_value") || !strings.Contains(keys, "colour") {
		t.Fatalf("key errors %+v", kerrs)
	}
}

// A plugin that panics in configure fails the start with the panic's text.
func TestClientConfigurePanics(t *testing.T) {
	_, err := plugins.Start(fastOptions(t, "panicky", map[string]any{"panic_configure": true}))
	if err == nil || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("err = %v, want a configure panic", err)
	}
}

// A plugin that writes to stdout breaks the handshake: a clear error, no
// hang.
func TestClientBrokenHandshake(t *testing.T) {
	opts := fastOptions(t, "broken", nil)
	opts.StartTimeout = 5 * time.Second
	opts.Command = func() *exec.Cmd {
		cmd := exec.Command(testPluginPath)
		cmd.Env = append(os.Environ(), "GPUSAMPLER_TESTPLUGIN_BROKEN=stdout")
		return cmd
	}
	_, err := plugins.Start(opts)
	if err == nil || !strings.Contains(err.Error(), "start plugin") {
		t.Fatalf("err = %v", err)
	}
}

// Write errors from the plugin fail the batch (not retried).
func TestClientPluginWriteError(t *testing.T) {
	c, err := plugins.Start(fastOptions(t, "failing", map[string]any{"fail_writes": true}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(2)})
	if err == nil || errors.Is(err, record.ErrUnavailable) || !strings.Contains(err.Error(), "told to fail") {
		t.Fatalf("err = %v", err)
	}
}

// A plugin's error reaches the host with its kind: a permanent refusal is
// permanent on the host (a buffer drops it instead of retrying it for
// ever), an unavailable one unavailable, a plain one retryable.
func TestClientPluginWriteErrorKinds(t *testing.T) {
	for _, want := range []record.ErrorKind{record.KindPermanent, record.KindUnavailable, record.KindRetryable} {
		t.Run(want.String(), func(t *testing.T) {
			c, err := plugins.Start(fastOptions(t, "failing", map[string]any{"fail_kind": want.String()}))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(2)})
			if got := record.Classify(err); got != want || !strings.Contains(err.Error(), "told to fail") {
				t.Fatalf("host sees %v (%v), want %v", got, err, want)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a hang, not a slow machine: restarts under load take seconds
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The plugin's own counters (record.StatsReporter in the plugin process)
// reach the host with the health probes, after the supervision counters.
func TestClientReportsPluginStats(t *testing.T) {
	c, err := plugins.Start(fastOptions(t, "stats", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		if err := c.Write(context.Background(), &record.Batch{Seq: uint64(i + 1), Samples: outputtest.Samples(2)}); err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]record.Field
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) { // a hang, not a slow machine
		got = map[string]record.Field{}
		for _, f := range c.ReportStats(nil) {
			got[f.Key] = f
		}
		if got["test_writes"].Value == 3 {
			break
		}
	}
	if f := got["test_writes"]; f.Value != 3 || !f.Int {
		t.Errorf("test_writes = %+v, want 3 (int); all: %v", f, got)
	}
	if got["plugin_starts"].Value != 1 || got["plugin_crashes"].Value != 0 || got["plugin_wedges"].Value != 0 {
		t.Errorf("supervision counters: %v", got)
	}
	var _ record.StatsReporter = c
}

// The plugin output's counters are cumulative across restarts (a wedged
// process's last reported counters are added to the new process's), and
// after Close they are the final ones, read once the output has closed:
// no probe needs to come between the last Write and Close.
func TestClientStatsSurviveRestartAndClose(t *testing.T) {
	block := filepath.Join(t.TempDir(), "blocked")
	opts := fastOptions(t, "stats-restart", map[string]any{"block_once": block})
	opts.CallTimeout = 300 * time.Millisecond
	opts.HealthInterval = time.Hour // only the restart and Close read the counters below
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	field := func(key string) float64 {
		for _, f := range c.ReportStats(nil) {
			if f.Key == key {
				return f.Value
			}
		}
		return -1
	}
	writes := func() float64 { return field("test_writes") }
	if err := os.WriteFile(block, nil, 0o644); err != nil { // no wedge yet
		t.Fatal(err)
	}
	for i := range 2 {
		if err := c.Write(context.Background(), &record.Batch{Seq: uint64(i + 1), Samples: outputtest.Samples(2)}); err != nil {
			t.Fatal(err)
		}
	}
	c.CheckNow() // one probe: the first process reports test_writes 2
	waitFor(t, func() bool { return writes() == 2 })
	os.Remove(block)
	first := c.Stats().PID
	if err := c.Write(context.Background(), &record.Batch{Seq: 3, Samples: outputtest.Samples(2)}); !errors.Is(err, record.ErrUnavailable) {
		t.Fatalf("wedged write: %v", err)
	}
	waitFor(t, func() bool { p := c.Stats().PID; return p != 0 && p != first })
	if got := writes(); got != 2 {
		t.Fatalf("test_writes after the restart = %v, want the first process's 2", got)
	}
	for _, seq := range []uint64{3, 4} {
		if err := c.Write(context.Background(), &record.Batch{Seq: seq, Samples: outputtest.Samples(2)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := writes(); got != 4 {
		t.Fatalf("test_writes after Close = %v, want 4 (2 + the new process's 2, read after its close)", got)
	}
	// A gauge is the newest process's value, not added up across restarts.
	if got := field("test_last_batch"); got != 2 {
		t.Fatalf("gauge test_last_batch after Close = %v, want 2 (the new process's last batch)", got)
	}
}
