package agent_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// healthOut counts samples and keeps every output_health self-metrics
// event it receives, as output → fields.
type healthOut struct {
	mu      sync.Mutex
	samples uint64
	health  []map[string]string
	changed chan struct{}
}

func newHealthOut() *healthOut { return &healthOut{changed: make(chan struct{}, 1)} }

func (h *healthOut) Write(_ context.Context, b *record.Batch) error {
	h.mu.Lock()
	h.samples += uint64(len(b.Samples))
	for _, ev := range b.Events {
		if ev.Kind != record.EventSelf || len(ev.Attrs) != 2 || ev.Attrs[0].Value != "output_health" {
			continue
		}
		m := map[string]string{"output": ev.Attrs[1].Value}
		for _, f := range ev.Fields {
			m[f.Key] = strconv.FormatFloat(f.Value, 'f', -1, 64)
		}
		h.health = append(h.health, m)
	}
	h.mu.Unlock()
	select {
	case h.changed <- struct{}{}:
	default:
	}
	return nil
}

func (h *healthOut) Close() error { return nil }

// waitUntil waits, on the output's deliveries, until cond holds (called
// with h.mu held). It fails only on a hang.
func (h *healthOut) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for {
		h.mu.Lock()
		ok := cond()
		h.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-h.changed:
		case <-time.After(5 * time.Minute):
			t.Fatalf("nothing delivered for 5 minutes while waiting for %s", what)
		}
	}
}

// flakyRegistry has kind "good" (always builds, into good) and kind
// "flaky", which fails to build while broken is set and then builds into
// a fresh healthOut kept in built.
type flakyRegistry struct {
	good   *healthOut
	broken atomic.Bool
	tries  atomic.Int64
	mu     sync.Mutex
	built  []*healthOut
}

func (f *flakyRegistry) registry() *outputs.Registry {
	return outputs.NewRegistry(outputs.Kind{Kind: "good",
		Build: func(*outputs.Block, outputs.BuildEnv) (record.Output, error) { return f.good, nil },
	}, outputs.Kind{Kind: "flaky",
		Parse: func(t *config.Table) any {
			var label string
			t.String("label", &label)
			return label
		},
		Build: func(*outputs.Block, outputs.BuildEnv) (record.Output, error) {
			f.tries.Add(1)
			if f.broken.Load() {
				return nil, errors.New("connect sink: connection refused")
			}
			h := newHealthOut()
			f.mu.Lock()
			f.built = append(f.built, h)
			f.mu.Unlock()
			return h, nil
		}})
}

const degradedDoc = `
[agent]
stats_interval = "1h"
[sampler]
drain_interval = "20ms"
field_interval = "20ms"
[[outputs.good]]
name = "good"
flush_interval = "10ms"
[[outputs.flaky]]
name = "sink"
flush_interval = "10ms"
`

// An output that cannot be built at start does not stop the others: the
// good output runs and hears, through self-metrics, that "sink" has not
// started; "sink" is retried with backoff and joins once it can be built.
// --strict (Options.Strict) keeps the old exit-at-start.
func TestOutputThatCannotStartIsRetriedWhileOthersRun(t *testing.T) {
	f := &flakyRegistry{good: newHealthOut()}
	f.broken.Store(true)
	reg := f.registry()

	src, _ := sim.New(sim.Options{GPUs: 1, Seed: 1})
	_, err := agent.New(src, mustParse(t, reg, degradedDoc), agent.Options{Registry: reg, Strict: true})
	if err == nil || err.Error() != "test.toml:10: output sink: connect sink: connection refused" {
		t.Fatalf("strict: New = %v, want the output's error", err)
	}

	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	src, _ = sim.New(sim.Options{GPUs: 1, Seed: 1})
	a, err := agent.New(src, mustParse(t, reg, degradedDoc), agent.Options{Registry: reg, Logger: log,
		StartRetryMin: time.Millisecond, StartRetryMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.NotStarted(); len(got) != 1 || got["sink"] == nil || got["sink"].Error() != "test.toml:10: output sink: connect sink: connection refused" {
		t.Fatalf("NotStarted = %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	// The good output writes while sink fails, and is told sink is failing.
	f.good.waitUntil(t, "samples and sink's health", func() bool {
		for _, h := range f.good.health {
			if h["output"] == "sink" && h["failing"] == "1" && h["started"] == "0" {
				return f.good.samples > 100
			}
		}
		return false
	})
	// Several failed attempts later, sink comes up.
	for f.tries.Load() < 4 {
		time.Sleep(time.Millisecond) // waiting for the retry loop's attempts, not asserting on time
	}
	f.broken.Store(false)
	for len(a.NotStarted()) != 0 {
		time.Sleep(time.Millisecond)
	}
	f.mu.Lock()
	sink := f.built[0]
	f.mu.Unlock()
	sink.waitUntil(t, "samples at the started sink", func() bool { return sink.samples > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	if len(f.built) != 1 {
		t.Errorf("sink built %d times once it could be, want 1", len(f.built))
	}
	f.mu.Unlock()
	// The final round of self-metrics says both run.
	f.good.mu.Lock()
	last := map[string]map[string]string{}
	for _, h := range f.good.health {
		last[h["output"]] = h
	}
	f.good.mu.Unlock()
	// Every sample the device published either reached sink's pump or
	// was published while sink had not started (missed_not_started).
	var published uint64
	for _, d := range a.Engine().Stats().Devices {
		published += d.Published
	}
	var sinkPublished uint64
	for _, o := range a.Engine().Stats().Outputs {
		if o.Name == "sink" {
			sinkPublished = o.Published
		}
	}
	missed, _ := strconv.ParseUint(last["sink"]["missed_not_started"], 10, 64)
	if missed == 0 || missed+sinkPublished != published {
		t.Errorf("sink: missed_not_started %d + published to its pump %d, want %d (every sample the device published)",
			missed, sinkPublished, published)
	}
	delete(last["sink"], "missed_not_started")
	want := map[string]map[string]string{
		"good": {"output": "good", "failing": "0", "started": "1", "start_failures": "0", "buffer_degraded": "0",
			"missed_not_started": "0", "held_not_started": "0"},
		"sink": {"output": "sink", "failing": "0", "started": "1", "start_failures": "0", "buffer_degraded": "0",
			"held_not_started": "0"},
	}
	for name, w := range want {
		if got := last[name]; !mapsEqual(got, w) {
			t.Errorf("last health of %s = %v, want %v", name, got, w)
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if n := strings.Count(logs.String(), "connection refused"); n != 1 {
		t.Errorf("the start failure was logged %d times, want once:\n%s", n, logs.String())
	}
	logHas(t, logs.String(), "level=ERROR msg=\"output could not start; the other outputs run and it is retried with backoff (run --strict exits instead)\" output=sink",
		"level=INFO msg=\"output started\" output=sink failed_attempts=")
}

// A reload keeps an output that has not started with the retry loop when
// its block is unchanged (the reload is not refused for it), tries a
// changed block at once, and forgets a removed one.
func TestReloadKeepsNotStartedOutputPending(t *testing.T) {
	f, a := runBroken(t, degradedDoc)
	reg := f.registry()
	if err := a.Reload(mustParse(t, reg, degradedDoc)); err != nil {
		t.Fatalf("reload with the same not-started block: %v", err)
	}
	if got := f.tries.Load(); got != 1 {
		t.Errorf("the unchanged block was built %d times, want 1 (the reload leaves it to the retry loop, an hour away)", got)
	}
	if _, ok := a.NotStarted()["sink"]; !ok {
		t.Fatal("sink no longer pending after the reload")
	}
	// A changed block is tried at once, by the retry loop.
	if err := a.Reload(mustParse(t, reg, degradedDoc+"label = \"2\"\n")); err != nil {
		t.Fatal(err)
	}
	for f.tries.Load() < 2 {
		time.Sleep(time.Millisecond) // waiting for the retry loop, not asserting on time
	}
	if _, ok := a.NotStarted()["sink"]; !ok {
		t.Fatal("sink no longer pending after its changed block failed too")
	}
	// Removed while pending: forgotten.
	if err := a.Reload(mustParse(t, reg, strings.SplitN(degradedDoc, "[[outputs.flaky]]", 2)[0])); err != nil {
		t.Fatal(err)
	}
	if got := a.NotStarted(); len(got) != 0 {
		t.Errorf("NotStarted after removing the block = %v", got)
	}
	// Added again and buildable: the reload builds it, as any new output.
	f.broken.Store(false)
	if err := a.Reload(mustParse(t, reg, degradedDoc)); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Outputs()["sink"]; !ok || len(a.NotStarted()) != 0 {
		t.Errorf("sink not running after it was added back: outputs %v, not started %v", a.Outputs(), a.NotStarted())
	}
}

// --stats names an output that has not started, with the samples it missed.
func TestFormatStatsNotStarted(t *testing.T) {
	ev := record.Event{Kind: record.EventSelf, Device: -1,
		Attrs: []record.Attr{{Key: "scope", Value: "output_health"}, {Key: "output", Value: "sink"}},
		Fields: []record.Field{{Key: "failing", Value: 1, Int: true}, {Key: "started", Value: 0, Int: true},
			{Key: "start_failures", Value: 3, Int: true}, {Key: "missed_not_started", Value: 1380, Int: true}}}
	got := agent.FormatStats(sampler.Stats{}, []record.Event{ev})
	want := "gpusampler stats:\n  output sink         NOT STARTED: 3 failed start attempts; retrying with backoff (the log says why); 1380 samples published meanwhile never reach it\n"
	if got != want {
		t.Errorf("FormatStats:\n%q\nwant\n%q", got, want)
	}
	ev.Fields = append(ev.Fields[:3], record.Field{Key: "missed_not_started", Value: 0, Int: true},
		record.Field{Key: "held_not_started", Value: 1, Int: true})
	got = agent.FormatStats(sampler.Stats{}, []record.Event{ev})
	want = "gpusampler stats:\n  output sink         NOT STARTED: 3 failed start attempts; retrying with backoff (the log says why); 0 samples published meanwhile never reach it; what is published now is held in its disk buffer until it starts\n"
	if got != want {
		t.Errorf("FormatStats, held:\n%q\nwant\n%q", got, want)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Run ends when its context does, even while an output that cannot start
// is retried back to back (an attempt due or under way when the run ends
// is not repeated).
func TestRunEndsWhileOutputRetries(t *testing.T) {
	f := &flakyRegistry{good: newHealthOut()}
	f.broken.Store(true)
	reg := f.registry()
	src, _ := sim.New(sim.Options{GPUs: 1, Seed: 1})
	a, err := agent.New(src, mustParse(t, reg, degradedDoc), agent.Options{Registry: reg,
		StartRetryMin: time.Nanosecond, StartRetryMax: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for f.tries.Load() < 20 {
		time.Sleep(time.Millisecond) // waiting for the retry loop's attempts, not asserting on time
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return after its context ended: the retry loop kept going")
	}
}
