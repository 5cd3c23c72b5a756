package sampler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// flaky refuses batches with ErrUnavailable while down is set, and records
// the Seq and first sample number of every batch it is offered.
type flaky struct {
	down     atomic.Bool
	mu       sync.Mutex
	accepted []record.Sample
	offered  map[uint64][]float64 // seq → sample numbers, each offer
	refused  int
}

func (f *flaky) Write(ctx context.Context, b *record.Batch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.offered == nil {
		f.offered = map[uint64][]float64{}
	}
	if len(b.Samples) > 0 {
		f.offered[b.Seq] = append(f.offered[b.Seq], b.Samples[0].Value)
	}
	if f.down.Load() {
		f.refused++
		return fmt.Errorf("restarting: %w", record.ErrUnavailable)
	}
	f.accepted = append(f.accepted, b.Samples...)
	return nil
}

func (f *flaky) Close() error { return nil }

// An output that is unavailable for a while loses nothing when the ring
// covers the gap: the pump holds its batch (same Seq) and its cursor.
func TestPumpHoldsBatchWhileUnavailable(t *testing.T) {
	dev := newFakeDevice(0)
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	out := &flaky{}
	if err := e.AddOutput("f", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16}); err != nil {
		t.Fatal(err)
	}
	var phase atomic.Int32
	runUntil(t, e, func() bool {
		st := e.Stats().Outputs[0]
		switch phase.Load() {
		case 0: // running: go down
			if st.Delivered > 50 {
				out.down.Store(true)
				phase.Store(1)
			}
		case 1: // down: wait for several refused offers and a pending batch
			if st.Retries >= 5 && st.Pending > 0 {
				if st.Published != st.Read+st.Dropped+st.Lag || st.Read != st.Delivered+st.Failed+st.Filtered+st.Pending {
					t.Errorf("accounting while held: %+v", st)
				}
				out.down.Store(false)
				phase.Store(2)
			}
		case 2:
			return st.Pending == 0 && st.Delivered > 200
		}
		return false
	})
	st := e.Stats().Outputs[0]
	if st.Failed != 0 || st.Dropped != 0 || st.Published != st.Delivered {
		t.Fatalf("stats %+v: want published = delivered, nothing failed or dropped", st)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.refused < 5 {
		t.Fatalf("refused %d offers", out.refused)
	}
	// every sample exactly once, in order
	first := out.accepted[0].Value
	for i, s := range out.accepted {
		if s.Value != first+float64(i) {
			t.Fatalf("sample %d is number %v, want %v", i, s.Value, first+float64(i))
		}
	}
	// a refused batch was offered again with the same Seq and content
	again := 0
	for seq, offers := range out.offered {
		for _, v := range offers[1:] {
			if v != offers[0] {
				t.Fatalf("seq %d offered with different content", seq)
			}
			again++
		}
	}
	if again < 5 {
		t.Fatalf("only %d re-offers", again)
	}
}

// A batch still held when the pump stops is counted as failed, with what
// the ring held behind it: published = delivered + failed + dropped.
func TestPumpUnavailableAtStopCounted(t *testing.T) {
	dev := newFakeDevice(0)
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	out := &flaky{}
	out.down.Store(true)
	if err := e.AddOutput("f", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16,
		WriteTimeout: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	runUntil(t, e, func() bool { return e.Stats().Outputs[0].Retries >= 3 })
	st := e.Stats().Outputs[0]
	if st.Pending != 0 || st.Failed == 0 || st.Delivered != 0 || st.Published != st.Failed+st.Dropped || st.Read != st.Failed {
		t.Fatalf("stats %+v", st)
	}
}

// absorbing is flaky that also takes the samples of batches it refuses,
// and those a stopping pump hands it (record.Absorber), as an aggregating
// output does.
type absorbing struct {
	flaky
	lastSeq  uint64
	taken    []record.Sample
	absorbed int
}

func (a *absorbing) Write(ctx context.Context, b *record.Batch) error {
	a.mu.Lock()
	if b.Seq != a.lastSeq {
		a.lastSeq = b.Seq
		a.taken = append(a.taken, b.Samples...)
	}
	a.mu.Unlock()
	return a.flaky.Write(ctx, b)
}

func (a *absorbing) Absorb(s []record.Sample) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.taken = append(a.taken, s...)
	a.absorbed += len(s)
}

// A pump that stops with a batch held hands the samples waiting behind it
// to an output that absorbs them: the output has seen every sample the
// pump counts as failed, each once, and no other.
func TestPumpUnavailableAtStopAbsorbed(t *testing.T) {
	dev := newFakeDevice(0)
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	out := &absorbing{}
	out.down.Store(true)
	if err := e.AddOutput("a", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16,
		WriteTimeout: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// Samples wait in the ring behind the held batch.
	var waiting atomic.Bool
	runUntil(t, e, func() bool {
		if st := e.Stats().Outputs[0]; st.Retries >= 3 && st.Lag > 0 {
			waiting.Store(true)
		}
		return waiting.Load()
	})
	st := e.Stats().Outputs[0]
	if st.Pending != 0 || st.Delivered != 0 || st.Dropped != 0 || st.Published != st.Failed || st.Read != st.Failed {
		t.Fatalf("stats %+v", st)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.absorbed == 0 {
		t.Fatalf("nothing absorbed; stats %+v", st)
	}
	if uint64(len(out.taken)) != st.Failed {
		t.Fatalf("output took %d samples, pump counted %d failed", len(out.taken), st.Failed)
	}
	first := out.taken[0].Value
	for i, s := range out.taken {
		if s.Value != first+float64(i) {
			t.Fatalf("sample %d is number %v, want %v", i, s.Value, first+float64(i))
		}
	}
}

// hinting refuses its first batch as unavailable with a retry hint of an
// hour (a collector's Retry-After) and takes every batch after.
type hinting struct {
	mu     sync.Mutex
	offers int
}

func (h *hinting) Write(ctx context.Context, b *record.Batch) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(b.Samples) == 0 {
		return nil
	}
	h.offers++
	if h.offers == 1 {
		return record.Unavailable(record.RetryAfter(fmt.Errorf("429: slow down"), time.Hour))
	}
	return nil
}

func (h *hinting) Close() error { return nil }

func (h *hinting) Offers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.offers
}

// A pump holding a batch the output refused with a retry hint does not
// offer it again before the hint is over: the samples wait in the rings.
func TestPumpHonoursRetryHint(t *testing.T) {
	dev := newFakeDevice(0)
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
		DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	out := &hinting{}
	if err := e.AddOutput("h", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16,
		WriteTimeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	var held atomic.Bool // latched: the stop drops what is held
	runUntil(t, e, func() bool {
		if st := e.Stats().Outputs[0]; st.Pending > 0 && st.Lag > 200 {
			held.Store(true)
		}
		return held.Load()
	})
	if n := out.Offers(); n != 1 {
		t.Errorf("the held batch was offered %d times within its hour's hint", n)
	}
}
