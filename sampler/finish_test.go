package sampler_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// holding is an output that, like a buffer, takes a batch's samples at
// Write and hands them to its sink later: at Finish (record.Finisher), or
// at Close. taken counts what its sink holds.
type holding struct {
	mu       sync.Mutex
	held     int
	finishes int
	closed   bool
	// finishedBeforeClose is set when Finish came before Close.
	finishedBeforeClose bool
	taken               atomic.Uint64
	// block, when set, makes Finish wait for it, ignoring its context (a
	// sink that stopped answering).
	block chan struct{}
}

func (h *holding) Write(_ context.Context, b *record.Batch) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held += len(b.Samples)
	return nil
}

func (h *holding) hand() {
	h.taken.Add(uint64(h.held))
	h.held = 0
}

func (h *holding) Finish(context.Context) error {
	if h.block != nil {
		<-h.block
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finishes++
	h.finishedBeforeClose = !h.closed
	h.hand()
	return nil
}

func (h *holding) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	h.hand()
	return nil
}

// Before AfterFinalFlush every output finishes (record.Finisher): what an
// output still held after the final flush has reached its sink when the
// final statistics are read, and Finish comes once, before Close.
func TestAfterFinalFlushAfterFinish(t *testing.T) {
	clk := clocktest.New(time.Now().Add(-time.Hour))
	dev := newFakeDevice(0).onClock(clk)
	var e *sampler.Engine
	var atHook uint64
	out := &holding{}
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: time.Hour, Select: onlyPowerBuffer,
		AfterFinalFlush: func() { atHook = out.taken.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddOutput("holding", out, sampler.PumpOptions{FlushInterval: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx) }()
	waitFirstDrain(t, e)
	clk.Advance(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	total := out.taken.Load()
	if total == 0 || atHook != total {
		t.Errorf("its sink held %d samples at AfterFinalFlush, %d at the end; want all of them at AfterFinalFlush", atHook, total)
	}
	if out.finishes != 1 || !out.finishedBeforeClose {
		t.Errorf("Finish called %d times, before Close %v; want once, before Close", out.finishes, out.finishedBeforeClose)
	}
}

// An output whose Finish never returns (its sink stopped answering, the
// context ignored) holds the stop no longer than one stuck in a Write: the
// healthy output beside it still gets the final events and closes, and
// only the stuck one is reported.
func TestShutdownStuckFinishBesideHealthy(t *testing.T) {
	dev := newFakeDevice(0)
	var e *sampler.Engine
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16,
		ShutdownTimeout: 200 * time.Millisecond,
		AfterFinalFlush: func() { e.Emit(record.Event{Kind: record.EventSelf, Message: "final"}) }})
	if err != nil {
		t.Fatal(err)
	}
	stuck := &holding{block: make(chan struct{})}
	defer close(stuck.block)
	healthy := &collector{}
	if err := e.AddOutput("stuck", stuck, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := e.AddOutput("healthy", healthy, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	waitFirstDrain(t, e)
	cancel()
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a failure guard, not a timing check
		t.Fatal("Run did not return: shutdown waits on an output's Finish")
	}
	if err == nil || !strings.Contains(err.Error(), "output stuck: not flushed") || strings.Contains(err.Error(), "output healthy") {
		t.Fatalf("Run = %v, want the stuck output named, not the healthy one", err)
	}
	healthy.mu.Lock()
	final := slices.ContainsFunc(healthy.events, func(ev record.Event) bool { return ev.Message == "final" })
	closed := healthy.closed
	healthy.mu.Unlock()
	if !final || !closed {
		t.Fatalf("healthy output: final event %v, closed %v; want both", final, closed)
	}
}
