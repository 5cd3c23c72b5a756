package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// A disk-buffered output that cannot be built at start is held, not
// skipped: its pump and buffer run, what is published meanwhile waits in
// the buffer (health: held_not_started 1, missed_not_started 0), and once
// the output can be built it receives every sample the device published —
// none is missed, dropped or failed.
func TestDiskBufferedOutputHeldWhileNotStarted(t *testing.T) {
	f := &flakyRegistry{good: newHealthOut()}
	f.broken.Store(true)
	reg := f.registry()
	doc := heldDoc(t) + "retry_initial = \"1ms\"\nretry_max = \"5ms\"\n"
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	src, _ := sim.New(sim.Options{GPUs: 1, Seed: 1})
	a, err := agent.New(src, mustParse(t, reg, doc), agent.Options{Registry: reg, Logger: log,
		StartRetryMin: time.Millisecond, StartRetryMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.NotStarted(); len(got) != 1 || got["sink"] == nil {
		t.Fatalf("NotStarted = %v", got)
	}
	if b := a.Buffers()["sink"]; b == nil {
		t.Fatal("the not-started sink has no buffer running")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	// While sink cannot start, the good output hears that it is held and
	// that nothing is missed; the buffer fills.
	f.good.waitUntil(t, "sink's health while held", func() bool {
		for _, h := range f.good.health {
			if h["output"] == "sink" && h["started"] == "0" && h["held_not_started"] == "1" && h["missed_not_started"] == "0" {
				return f.good.samples > 200
			}
		}
		return false
	})
	for a.Buffers()["sink"].Stats().BufferedRecords < 100 {
		time.Sleep(time.Millisecond) // waiting for the held buffer to fill, not asserting on time
	}
	for f.tries.Load() < 4 {
		time.Sleep(time.Millisecond) // waiting for the retry loop's attempts, not asserting on time
	}
	f.broken.Store(false)
	for len(a.NotStarted()) != 0 {
		time.Sleep(time.Millisecond)
	}
	f.mu.Lock()
	if len(f.built) != 1 {
		t.Fatalf("sink built %d times, want 1", len(f.built))
	}
	sink := f.built[0]
	f.mu.Unlock()
	// Everything published so far reaches it, the held backlog first.
	var before uint64
	for _, d := range a.Engine().Stats().Devices {
		before += d.Published
	}
	sink.waitUntil(t, "the held backlog at the started sink", func() bool { return sink.samples >= before })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := a.Engine().Stats()
	var published uint64
	for _, d := range st.Devices {
		published += d.Published
	}
	var pump sampler.OutputStats
	for _, o := range st.Outputs {
		if o.Name == "sink" {
			pump = o
		}
	}
	bs := a.Buffers()["sink"].Stats()
	sink.mu.Lock()
	got := sink.samples
	sink.mu.Unlock()
	if pump.Published != published || pump.Dropped != 0 || pump.Failed != 0 || bs.DroppedRecords.Total() != 0 || got != published {
		t.Errorf("sink got %d samples of %d published (pump %+v, buffer drops %+v)", got, published, pump, bs.DroppedRecords)
	}
	f.good.mu.Lock()
	var last map[string]string
	for _, h := range f.good.health {
		if h["output"] == "sink" {
			last = h
		}
	}
	f.good.mu.Unlock()
	if last["started"] != "1" || last["held_not_started"] != "0" || last["missed_not_started"] != "0" {
		t.Errorf("sink's last health: %v", last)
	}
	logMu.Lock()
	defer logMu.Unlock()
	logHas(t, logs.String(), "msg=\"output not started: what is published for it is held in its disk buffer until it starts\" output=sink",
		"msg=\"output started; what was held for it in its disk buffer is delivered now\" output=sink")
}

// heldDoc is degradedDoc with a disk buffer on the flaky output.
func heldDoc(t *testing.T) string {
	return degradedDoc + "buffer = \"disk\"\nbuffer_dir = \"" + t.TempDir() + "\"\nbuffer_max_bytes = 10000000\n"
}

// logHas fails t for each of wants that log lacks.
func logHas(t *testing.T, log string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// A reload keeps a held output's buffer and pump when its block is
// unchanged; a changed block's are closed and the new block is held again
// (its disk buffer replays what the old one held); a removed one's are
// closed.
func TestReloadHeldOutput(t *testing.T) {
	doc := heldDoc(t)
	f, a := runBroken(t, doc)
	reg := f.registry()
	held := a.Buffers()["sink"]
	if held == nil {
		t.Fatal("sink not held")
	}
	if err := a.Reload(mustParse(t, reg, doc)); err != nil {
		t.Fatalf("reload with the same held block: %v", err)
	}
	if a.Buffers()["sink"] != held || a.NotStarted()["sink"] == nil {
		t.Fatal("an unchanged held output's buffer was replaced, or it no longer counts as not started")
	}
	for held.Stats().BufferedRecords == 0 {
		time.Sleep(time.Millisecond) // waiting for the held buffer to fill, not asserting on time
	}
	// A changed block: the retry loop (kicked by the reload) holds it again.
	if err := a.Reload(mustParse(t, reg, doc+"label = \"2\"\n")); err != nil {
		t.Fatal(err)
	}
	for {
		if b := a.Buffers()["sink"]; b != nil && b != held {
			break
		}
		time.Sleep(time.Millisecond) // waiting for the retry loop, not asserting on time
	}
	if a.NotStarted()["sink"] == nil {
		t.Fatal("the changed block no longer counts as not started")
	}
	if st := held.Stats(); st.DroppedRecords.Total() != 0 {
		t.Errorf("the replaced held buffer dropped records: %+v", st.DroppedRecords)
	}
	// Removed: nothing of it runs.
	if err := a.Reload(mustParse(t, reg, strings.Split(degradedDoc, "[[outputs.flaky]]")[0])); err != nil {
		t.Fatal(err)
	}
	if a.Buffers()["sink"] != nil || len(a.NotStarted()) != 0 || len(a.Outputs()) != 1 {
		t.Fatalf("a removed held output still runs: buffers %v, not started %v", a.Buffers(), a.NotStarted())
	}
}

// runBroken runs an agent over doc whose flaky output cannot be built
// (retried only an hour later), until the test ends.
func runBroken(t *testing.T, doc string) (*flakyRegistry, *agent.Agent) {
	t.Helper()
	f := &flakyRegistry{good: newHealthOut()}
	f.broken.Store(true)
	reg := f.registry()
	src, _ := sim.New(sim.Options{GPUs: 1, Seed: 1})
	a, err := agent.New(src, mustParse(t, reg, doc), agent.Options{Registry: reg, StartRetryMin: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return f, a
}
