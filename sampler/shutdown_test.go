package sampler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// stuckOut accepts its first writes, then blocks in Write until release is
// closed, like a stdout nobody reads.
type stuckOut struct {
	accept    int
	blocked   chan struct{} // closed when a Write starts blocking
	release   chan struct{}
	closed    chan struct{}
	once      sync.Once
	closeOnce sync.Once
}

func (s *stuckOut) Write(ctx context.Context, b *record.Batch) error {
	if s.accept > 0 {
		s.accept--
		return nil
	}
	s.once.Do(func() { close(s.blocked) })
	<-s.release // ignores ctx, as a write(2) into a full pipe does
	return nil
}

func (s *stuckOut) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

// runUntilBlocked runs e until out blocks in a Write, then stops it and
// returns Run's error (failing the test if either never happens).
func runUntilBlocked(t *testing.T, e *sampler.Engine, out *stuckOut) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case <-out.blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("the output never blocked")
	}
	cancel()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second): // a failure guard, not a timing check
		t.Fatal("Run did not return: shutdown waits on a blocked output")
	}
	return nil
}

// An output blocked in Write does not hold up shutdown: after the shutdown
// timeout Run returns an error naming it, what it had not delivered is
// counted (failed, unflushed) so published = delivered + failed + dropped
// + filtered, and a Write that returns later is not counted again.
func TestShutdownGivesUpStuckOutput(t *testing.T) {
	dev := newFakeDevice(0)
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16,
		ShutdownTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	out := &stuckOut{accept: 3, blocked: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
	defer close(out.release)
	if err := e.AddOutput("stuck", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16}); err != nil {
		t.Fatal(err)
	}
	err = runUntilBlocked(t, e, out)
	if err == nil || !strings.Contains(err.Error(), "output stuck: not flushed within the 100ms shutdown timeout") {
		t.Fatalf("Run = %v, want the stuck output named", err)
	}
	st := e.Stats().Outputs[0]
	if st.Unflushed == 0 || st.Failed != st.Unflushed || st.Delivered == 0 || st.Pending != 0 || st.Lag != 0 ||
		st.Published != st.Delivered+st.Failed+st.Filtered+st.Dropped || st.Read != st.Published-st.Dropped {
		t.Fatalf("stats %+v: want the unflushed samples counted as failed, published = delivered + failed + filtered + dropped", st)
	}
	if !strings.Contains(err.Error(), ": "+strconv.FormatUint(st.Unflushed, 10)+" samples not delivered") {
		t.Fatalf("Run = %v, want %d samples named", err, st.Unflushed)
	}
	// the blocked Write returns late: nothing is counted twice
	out.release <- struct{}{}
	<-out.closed
	if after := e.Stats().Outputs[0]; after != st {
		t.Fatalf("stats changed after the late Write:\n%+v\n%+v", st, after)
	}
}

// nopOut accepts everything.
type nopOut struct{}

func (nopOut) Write(context.Context, *record.Batch) error { return nil }
func (nopOut) Close() error                               { return nil }

// Removing or replacing an output blocked in Write waits at most the
// shutdown timeout: the call returns an error naming it and the samples it
// had not delivered (counted as failed and unflushed: a replacement
// inherits them), and the blocked pump does not hold up Run's shutdown.
func TestRemoveAndReplaceGiveUpStuckOutput(t *testing.T) {
	for _, replace := range []bool{false, true} {
		t.Run(map[bool]string{false: "remove", true: "replace"}[replace], func(t *testing.T) {
			dev := newFakeDevice(0)
			e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
				DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16,
				ShutdownTimeout: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			out := &stuckOut{accept: 3, blocked: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
			defer close(out.release)
			if err := e.AddOutput("stuck", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			select {
			case <-out.blocked:
			case <-time.After(30 * time.Second):
				t.Fatal("the output never blocked")
			}
			if replace {
				err = e.ReplaceOutput("stuck", nopOut{}, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond})
			} else {
				err = e.RemoveOutput("stuck")
			}
			if err == nil || !strings.Contains(err.Error(), "output stuck: not flushed within the 100ms shutdown timeout") {
				t.Fatalf("got %v, want the stuck output named", err)
			}
			if replace {
				st := e.Stats().Outputs[0]
				if !strings.Contains(err.Error(), ": "+strconv.FormatUint(st.Unflushed, 10)+" samples not delivered") || st.Unflushed == 0 {
					t.Fatalf("got %v; stats %+v: want the unflushed samples named and inherited", err, st)
				}
			}
			cancel()
			select {
			case err = <-done:
			case <-time.After(60 * time.Second): // a failure guard, not a timing check
				t.Fatal("Run did not return: shutdown waits on the given-up output")
			}
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
		})
	}
}

// The final statistics come after every output's final flush: at
// AfterFinalFlush each output's Delivered counts every sample its sink
// holds at the end (nothing was flushed before the stop here), and an event
// emitted then still reaches every output before it closes.
func TestAfterFinalFlushCountsTheFinalFlush(t *testing.T) {
	clk := clocktest.New(time.Now().Add(-time.Hour))
	dev := newFakeDevice(0).onClock(clk)
	var e *sampler.Engine
	seen := map[string]uint64{}
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: time.Hour, Select: onlyPowerBuffer,
		AfterFinalFlush: func() {
			for _, o := range e.Stats().Outputs {
				seen[o.Name] = o.Delivered
			}
			e.Emit(record.Event{Kind: record.EventSelf, Message: "final"})
		}})
	if err != nil {
		t.Fatal(err)
	}
	outs := map[string]*collector{"a": {}, "b": {}}
	for name, out := range outs {
		if err := e.AddOutput(name, out, sampler.PumpOptions{FlushInterval: time.Hour}); err != nil {
			t.Fatal(err)
		}
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
	for name, out := range outs {
		n := uint64(len(out.snapshot()))
		if n == 0 || seen[name] != n {
			t.Errorf("output %s: Delivered %d at AfterFinalFlush, its sink holds %d samples at the end", name, seen[name], n)
		}
		out.mu.Lock()
		final := slices.ContainsFunc(out.events, func(ev record.Event) bool { return ev.Message == "final" })
		out.mu.Unlock()
		if !final || !out.closed {
			t.Errorf("output %s: the event emitted at AfterFinalFlush delivered %v, closed %v; want both", name, final, out.closed)
		}
	}
}

// An output that reads, but slowly, does not hold up the stop: the device
// loop's final publication of a held backlog waits at most half the
// shutdown timeout, then publishes it all and the slow output's full lane
// drops what it has no room for (counted). Before, the loop waited as long
// as the output kept reading (here: about half an hour).
func TestFinalFlushBoundedBySlowReader(t *testing.T) {
	clk := clocktest.New(time.Now().Add(-time.Hour))
	dev := newFakeDevice(0).onClock(clk)
	dev.depth = 1 << 20
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: time.Hour, Select: onlyPowerBuffer, RingSize: 64, ShutdownTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	slow := &collector{}
	slow.delay.Store(int64(time.Second))
	if err := e.AddOutput("slow", slow, sampler.PumpOptions{FlushInterval: time.Millisecond, MaxBatch: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	waitFirstDrain(t, e)
	clk.Advance(time.Minute) // the final drain takes 6000 samples: 2048 of them are held
	cancel()
	select {
	case err = <-done:
	case <-time.After(5 * time.Minute): // a failure guard, not a timing check
		t.Fatal("Run did not return: the final publication waits on a slow reader")
	}
	if err == nil || !strings.Contains(err.Error(), "output slow: not flushed within") {
		t.Fatalf("Run = %v, want the slow output named", err)
	}
	st := e.Stats()
	o := st.Outputs[0]
	if o.Dropped == 0 || o.Published != o.Delivered+o.Failed+o.Filtered+o.Dropped || st.Devices[0].Held != 0 {
		t.Fatalf("output %+v, device held %d: want the backlog published (dropped by the full lane, counted), published = delivered + failed + filtered + dropped",
			o, st.Devices[0].Held)
	}
}

// An output stuck at the final flush does not keep the others from the
// rest of the shutdown: with AfterFinalFlush, a healthy output beside it
// still gets the final events and closes, and only the stuck one is
// reported (the barrier waited for the stuck one until the timeout, then
// gave the healthy one no time to close: it was reported not flushed).
func TestShutdownStuckOutputBesideHealthyAfterFinalFlush(t *testing.T) {
	dev := newFakeDevice(0)
	var e *sampler.Engine
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16,
		ShutdownTimeout: 200 * time.Millisecond,
		AfterFinalFlush: func() { e.Emit(record.Event{Kind: record.EventSelf, Message: "final"}) }})
	if err != nil {
		t.Fatal(err)
	}
	out := &stuckOut{accept: 3, blocked: make(chan struct{}), release: make(chan struct{}), closed: make(chan struct{})}
	defer close(out.release)
	healthy := &collector{}
	if err := e.AddOutput("stuck", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16}); err != nil {
		t.Fatal(err)
	}
	if err := e.AddOutput("healthy", healthy, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	err = runUntilBlocked(t, e, out)
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
	for _, o := range e.Stats().Outputs {
		if o.Name == "healthy" && (o.Unflushed != 0 || o.Delivered != o.Published) {
			t.Fatalf("healthy output %+v: want everything delivered", o)
		}
	}
}

// blackHole refuses every Write with err (wrapping record.ErrUnavailable:
// a sink that is down; a plain error, retryable: a request that timed out)
// until hole is set; from then on a Write blocks, ignoring its context,
// until release is closed, as a Write to a sink that accepts the
// connection and never answers waits out the sink's own timeout.
type blackHole struct {
	err     error
	hole    atomic.Bool
	holed   chan struct{} // closed by the first Write into the hole
	once    sync.Once
	release chan struct{}
	closed  atomic.Bool
}

func (b *blackHole) Write(ctx context.Context, _ *record.Batch) error {
	if b.hole.Load() {
		b.once.Do(func() { close(b.holed) })
		<-b.release
	}
	return b.err
}

func (b *blackHole) Close() error {
	b.closed.Store(true)
	return nil
}

// An output that refused the last batch offered to it at stop (unavailable,
// or a Write that timed out) is not handed the final events: they are
// counted as dropped, its held samples as failed, it is closed, and Run
// returns no error (nothing went uncounted). Before, the final events were
// written to it: a sink that answers only by timing out kept the stop past
// the shutdown timeout and Run failed with "0 samples not delivered". The
// healthy output beside it still gets the final events and is closed.
func TestShutdownUnavailableOutputFinalEventsDropped(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"unavailable", fmt.Errorf("connection refused: %w", record.ErrUnavailable)},
		{"retryable", errors.New("Client.Timeout exceeded while awaiting headers")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newFakeDevice(0)
			out := &blackHole{err: tc.err, holed: make(chan struct{}), release: make(chan struct{})}
			defer close(out.release)
			healthy := &collector{}
			var e *sampler.Engine
			e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
				DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16,
				ShutdownTimeout: time.Hour, // no timer decides here
				AfterFinalFlush: func() {
					out.hole.Store(true) // a Write from here on waits out the sink
					e.Emit(record.Event{Kind: record.EventSelf, Message: "final"})
				}})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.AddOutput("blackhole", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16,
				WriteTimeout: 50 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			if err := e.AddOutput("healthy", healthy, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			for i := 0; e.Stats().Outputs[0].Retries < 3; i++ {
				if i == 120_000 { // 10 min: a hang, not a slow machine
					t.Fatal("the output was never offered a batch 3 times")
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run = %v, want nil: an output unavailable at stop is counted, not an error", err)
				}
			case <-out.holed:
				t.Fatal("the final events were written to the output that refused its last batch at stop")
			}
			var bh, ok sampler.OutputStats
			for _, o := range e.Stats().Outputs {
				if o.Name == "blackhole" {
					bh = o
				} else {
					ok = o
				}
			}
			if bh.EventsDropped == 0 || bh.EventsDelivered != 0 || bh.Delivered != 0 || bh.Unflushed != 0 || bh.Pending != 0 ||
				bh.Failed == 0 || bh.Published != bh.Delivered+bh.Failed+bh.Filtered+bh.Dropped || !out.closed.Load() {
				t.Fatalf("black-holed output %+v, closed %v: want the final events dropped, the samples failed, none unflushed, closed",
					bh, out.closed.Load())
			}
			healthy.mu.Lock()
			final := slices.ContainsFunc(healthy.events, func(ev record.Event) bool { return ev.Message == "final" })
			closed := healthy.closed
			healthy.mu.Unlock()
			if !final || !closed || ok.Delivered != ok.Published || ok.EventsDropped != 0 {
				t.Fatalf("healthy output %+v: final event %v, closed %v; want everything delivered and closed", ok, final, closed)
			}
		})
	}
}

// An output that refused batches until the stop but takes the one offered
// again while the stop waits for it (an unavailable output gets up to its
// write timeout to come back) is not taken for unavailable: nothing is
// counted failed and it gets the final events.
func TestShutdownOutputBackAtStopGetsFinalEvents(t *testing.T) {
	dev := newFakeDevice(0)
	out := &flakyCollector{}
	out.down.Store(true)
	var e *sampler.Engine
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16,
		ShutdownTimeout: time.Hour,
		AfterFinalFlush: func() { e.Emit(record.Event{Kind: record.EventSelf, Message: "final"}) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.AddOutput("back", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16,
		WriteTimeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	for i := 0; e.Stats().Outputs[0].Retries < 3; i++ {
		if i == 120_000 { // 10 min: a hang, not a slow machine
			t.Fatal("the output was never offered a batch 3 times")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	out.down.Store(false) // back while the stop waits for it
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	st := e.Stats().Outputs[0]
	out.mu.Lock()
	final := slices.ContainsFunc(out.events, func(ev record.Event) bool { return ev.Message == "final" })
	out.mu.Unlock()
	if !final || st.Failed != 0 || st.EventsDropped != 0 || st.Delivered != st.Published || st.Delivered == 0 {
		t.Fatalf("stats %+v, final event delivered %v: want everything delivered, the final event too", st, final)
	}
}

// flakyCollector is a collector that refuses every batch as unavailable
// while down is set.
type flakyCollector struct {
	collector
	down atomic.Bool
}

func (f *flakyCollector) Write(ctx context.Context, b *record.Batch) error {
	if f.down.Load() {
		return fmt.Errorf("restarting: %w", record.ErrUnavailable)
	}
	return f.collector.Write(ctx, b)
}
