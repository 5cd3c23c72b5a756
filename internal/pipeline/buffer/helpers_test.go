package buffer

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
)

// Test-only options: injected clock, backoff sleep, jitter and disk hooks.
func withClock(now func() time.Time) Option { return func(o *options) { o.now = now } }
func withSleep(f func(context.Context, time.Duration) error) Option {
	return func(o *options) { o.sleep = f }
}
func withRand(f func() float64) Option { return func(o *options) { o.rand = f } }
func withDiskHooks(h diskHooks) Option { return func(o *options) { o.disk = h } }
func withIdle(f func()) Option         { return func(o *options) { o.idle = f } }
func withoutDiskBudget() Option        { return func(o *options) { o.noDiskBudget = true } }

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// sleepRecorder returns at once and records the delays asked for.
type sleepRecorder struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *sleepRecorder) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRecorder) Delays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delays)
}

// testBatch builds a deterministic batch for seq with n samples; every
// tenth batch carries a device identity and an event.
func testBatch(seq uint64, n int) *record.Batch {
	b := &record.Batch{Seq: seq}
	for i := range n {
		b.Samples = append(b.Samples, record.Sample{TimeNS: 1_700_000_000_000_000_000 + int64(seq)*1e8 + int64(i)*1e6,
			Value: float64(seq) + float64(i)/8, Device: uint16(i % 2), Metric: catalog.MetricID(1 + i%5)})
	}
	if seq%10 == 0 {
		b.Devices = append(b.Devices, record.Device{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200", Backend: "sim",
			Simulated: true, SlowdownTempC: 87, Generation: seq})
		b.Events = append(b.Events, record.Event{Kind: record.EventThrottle, StartNS: int64(seq), EndNS: int64(seq) + 5,
			Message: "power cap", Attrs: []record.Attr{{Key: "reason", Value: "sw_power_cap"}}})
	}
	return b
}

// randomBatch builds a random batch (fuzz seeds, model test).
func randomBatch(r *rand.Rand, seq uint64) *record.Batch {
	b := &record.Batch{Seq: seq}
	for range r.IntN(3) {
		b.Devices = append(b.Devices, record.Device{Index: r.IntN(8), UUID: fmt.Sprintf("GPU-%d", r.Uint32()),
			Name: "NVIDIA H200", PCIBusID: "0000:19:00.0", MemoryTotalMiB: r.Uint64N(1 << 20),
			DriverVersion: "570.86", Backend: "nvml", Simulated: r.IntN(2) == 0, MaxOperatingTempC: r.Float64() * 100,
			Generation: r.Uint64()})
	}
	t := r.Int64N(1 << 62)
	for range r.IntN(40) {
		t += r.Int64N(2e8) - 1e7
		b.Samples = append(b.Samples, record.Sample{TimeNS: t, Value: r.NormFloat64() * 1e3,
			Device: uint16(r.IntN(8)), Metric: catalog.MetricID(r.IntN(300)), Flags: record.Flags(r.IntN(2))})
	}
	for range r.IntN(3) {
		e := record.Event{Kind: record.EventXID, Device: r.IntN(8), StartNS: r.Int64(), EndNS: -r.Int64N(5),
			Message: "xid 79"}
		for range r.IntN(3) {
			e.Attrs = append(e.Attrs, record.Attr{Key: "k", Value: fmt.Sprint(r.Int())})
		}
		b.Events = append(b.Events, e)
	}
	return b
}

// encode and decodeBatch are the buffer's payload encoding (records'
// protobuf Batch), for tests that look at payloads.
func encode(b *record.Batch) []byte { return appendBatch(nil, b) }

func appendBatch(dst []byte, b *record.Batch) []byte {
	p, err := recordpb.AppendBatch(dst, &recordpb.Batch{}, b)
	if err != nil {
		panic(err)
	}
	return p
}

func decodeBatch(dst *record.Batch, p []byte) error {
	return recordpb.DecodeBatch(p, &recordpb.Batch{}, dst)
}

// fakeSink is an Output that records what it accepted (deep copies, by
// encoding). script, when set, decides each call's error. gate, when set,
// makes Write wait for a value (or its closing) before answering.
type fakeSink struct {
	script  func(call int, b *record.Batch) error
	gate    chan struct{}
	entered chan uint64 // receives each call's Seq, when set

	mu     sync.Mutex
	calls  int
	seqs   []uint64 // every Write call's Seq, accepted or not
	got    [][]byte // encodings of accepted batches
	closed int
}

func (s *fakeSink) Write(ctx context.Context, b *record.Batch) error {
	s.mu.Lock()
	s.calls++
	call := s.calls
	s.seqs = append(s.seqs, b.Seq)
	s.mu.Unlock()
	if s.entered != nil {
		s.entered <- b.Seq
	}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var err error
	if s.script != nil {
		err = s.script(call, b)
	}
	if err == nil {
		s.mu.Lock()
		s.got = append(s.got, encode(b))
		s.mu.Unlock()
	}
	return err
}

func (s *fakeSink) Close() error {
	s.mu.Lock()
	s.closed++
	s.mu.Unlock()
	return nil
}

// Accepted returns the Seqs of the accepted batches, in order.
func (s *fakeSink) Accepted(t testing.TB) []uint64 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint64
	for _, p := range s.got {
		var b record.Batch
		if err := decodeBatch(&b, p); err != nil {
			t.Fatalf("sink holds an undecodable batch: %v", err)
		}
		out = append(out, b.Seq)
	}
	return out
}

func (s *fakeSink) Calls() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seqs)
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// countingHandler counts log records by message.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.counts[r.Message]++
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) Count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}
