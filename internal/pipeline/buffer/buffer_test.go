package buffer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// kindEnv builds buffers of one kind for the shared scenario suite.
type kindEnv struct {
	kind string
	// entryBytes is what one queued batch of payload bytes counts against
	// max_bytes.
	entryBytes func(payload int) int64
}

var kinds = []kindEnv{
	{KindMemory, func(p int) int64 { return int64(p) }},
	{KindDisk, func(p int) int64 { return int64(p) + frameHeaderSize }},
}

// newTestBuffer builds a buffer of env's kind around out. dir is used for
// disk (a temp dir when empty).
func (env kindEnv) newBuffer(t *testing.T, out record.Output, cfg Config, opts ...Option) *Buffer {
	t.Helper()
	cfg.Kind = env.kind
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 1 << 30
	}
	if cfg.MaxRecords == 0 {
		cfg.MaxRecords = 1 << 30
	}
	if cfg.Dir == "" && env.kind == KindDisk {
		cfg.Dir = t.TempDir()
	}
	if cfg.FsyncInterval == 0 {
		cfg.FsyncInterval = time.Hour // tests sync on Close
	}
	if cfg.CloseTimeout == 0 {
		cfg.CloseTimeout = time.Minute // never reached: the sinks answer
	}
	sr := &sleepRecorder{}
	// The scenarios check the caps (some of a few hundred bytes) alone;
	// TestDiskBudget checks what the files use.
	opts = append([]Option{withSleep(sr.Sleep), withRand(func() float64 { return 1 }), withoutDiskBudget()}, opts...)
	b, err := New(out, cfg, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// TestScenarios is the shared suite: every scenario runs against both
// buffer kinds with the same expectations.
func TestScenarios(t *testing.T) {
	for _, env := range kinds {
		t.Run(env.kind, func(t *testing.T) {
			t.Run("OrderKept", func(t *testing.T) { scenarioOrder(t, env) })
			t.Run("CapRecords", func(t *testing.T) { scenarioCap(t, env, false) })
			t.Run("CapBytes", func(t *testing.T) { scenarioCap(t, env, true) })
			t.Run("RetryableRetried", func(t *testing.T) { scenarioRetry(t, env) })
			t.Run("MalformedDroppedOnce", func(t *testing.T) { scenarioMalformed(t, env) })
			t.Run("CloseTimeout", func(t *testing.T) { scenarioCloseTimeout(t, env) })
			t.Run("OutputContract", func(t *testing.T) { scenarioContract(t, env) })
			t.Run("WriteThenCloseWhileIdle", func(t *testing.T) { scenarioWriteThenCloseWhileIdle(t, env) })
			t.Run("OldestAge", func(t *testing.T) { scenarioOldestAge(t, env) })
		})
	}
}

func scenarioOrder(t *testing.T, env kindEnv) {
	sink := &fakeSink{}
	b := env.newBuffer(t, sink, Config{})
	var want [][]byte
	for seq := uint64(1); seq <= 200; seq++ {
		tb := testBatch(seq, int(seq%17)+1)
		want = append(want, encode(tb))
		if err := b.Write(context.Background(), tb); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sink.Accepted(t); !slices.Equal(got, seqRange(1, 200)) {
		t.Fatalf("accepted %v, want 1..200 in order", got)
	}
	for i := range want {
		if string(sink.got[i]) != string(want[i]) {
			t.Fatalf("batch %d differs from what was written", i+1)
		}
	}
	st := b.Stats()
	if st.Delivered != 200 || st.Appended != 200 || st.BufferedBatches != 0 || st.DroppedBatches.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
	if sink.closed != 1 {
		t.Fatalf("wrapped output closed %d times, want 1", sink.closed)
	}
}

// plainBatch is testBatch with samples only, so that every batch of n
// samples has the same size.
func plainBatch(seq uint64, n int) *record.Batch {
	b := testBatch(seq, n)
	b.Devices, b.Events = nil, nil
	return b
}

// scenarioCap: the sink holds batch 1 in flight; batches 2..11 arrive with
// room for 3; the 7 oldest queued (2..8) are dropped, exactly.
func scenarioCap(t *testing.T, env kindEnv, byBytes bool) {
	const recs = 5
	payload := len(encode(plainBatch(2, recs)))
	cfg := Config{MaxRecords: 3 * recs}
	if byBytes {
		cfg = Config{MaxBytes: 3 * env.entryBytes(payload)}
	}
	sink := &fakeSink{gate: make(chan struct{}), entered: make(chan uint64, 100)}
	b := env.newBuffer(t, sink, cfg, WithSegmentBytes(int64(2*(payload+frameHeaderSize)+int(segHeaderSize))))
	ctx := context.Background()
	if err := b.Write(ctx, plainBatch(1, recs)); err != nil {
		t.Fatal(err)
	}
	<-sink.entered // batch 1 is in flight
	for seq := uint64(2); seq <= 11; seq++ {
		if err := b.Write(ctx, plainBatch(seq, recs)); err != nil {
			t.Fatal(err)
		}
	}
	st := b.Stats()
	if st.DroppedBatches.Cap != 7 || st.DroppedRecords.Cap != 7*recs || st.BufferedBatches != 4 ||
		st.BufferedRecords != 4*recs {
		t.Fatalf("at the cap: %+v", st)
	}
	close(sink.gate)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := sink.Accepted(t), []uint64{1, 9, 10, 11}; !slices.Equal(got, want) {
		t.Fatalf("accepted %v, want %v", got, want)
	}
	st = b.Stats()
	if st.Delivered != 4 || st.DroppedBatches.Cap != 7 || st.DroppedBatches.Total() != 7 || st.BufferedBatches != 0 {
		t.Fatalf("after close: %+v", st)
	}
	// A batch larger than the caps alone is refused, not queued.
	if b2 := env.newBuffer(t, &fakeSink{}, Config{MaxRecords: recs - 1, MaxBytes: 1 << 20}); true {
		defer b2.Close()
		if err := b2.Write(ctx, plainBatch(1, recs)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("oversized batch: %v, want ErrTooLarge", err)
		}
	}
}

var errUnavailable = errors.New("sink: service unavailable")

func scenarioRetry(t *testing.T, env kindEnv) {
	const failures = 6
	sink := &fakeSink{script: func(call int, _ *record.Batch) error {
		if call <= failures {
			return errUnavailable
		}
		return nil
	}}
	sr := &sleepRecorder{}
	b := env.newBuffer(t, sink, Config{RetryInitial: time.Millisecond, RetryMax: 8 * time.Millisecond},
		withSleep(sr.Sleep))
	for seq := uint64(1); seq <= 20; seq++ {
		if err := b.Write(context.Background(), testBatch(seq, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sink.Accepted(t); !slices.Equal(got, seqRange(1, 20)) {
		t.Fatalf("accepted %v, want 1..20 once each, in order", got)
	}
	if calls := sink.Calls(); !slices.Equal(calls[:failures+1], slices.Repeat([]uint64{1}, failures+1)) {
		t.Fatalf("calls %v: batch 1 must be retried until accepted", calls)
	}
	st := b.Stats()
	if st.Retries != failures || st.Delivered != 20 || st.DroppedBatches.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
	ms := time.Millisecond
	if got, want := sr.Delays(), []time.Duration{ms, 2 * ms, 4 * ms, 8 * ms, 8 * ms, 8 * ms}; !slices.Equal(got, want) {
		t.Fatalf("backoff delays %v, want %v (doubling, capped)", got, want)
	}
}

func scenarioMalformed(t *testing.T, env kindEnv) {
	sink := &fakeSink{script: func(_ int, b *record.Batch) error {
		if b.Seq == 3 || b.Seq == 4 {
			return record.Permanent(errors.New("sink: 400 field type conflict"))
		}
		return nil
	}}
	logs := &countingHandler{}
	b := env.newBuffer(t, sink, Config{}, WithLogger(slog.New(logs)), withClock(newFakeClock().Now))
	for seq := uint64(1); seq <= 6; seq++ {
		if err := b.Write(context.Background(), testBatch(seq, 4)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := sink.Accepted(t), []uint64{1, 2, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("accepted %v, want %v", got, want)
	}
	if got, want := sink.Calls(), seqRange(1, 6); !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v: a malformed batch is sent once, never retried", got, want)
	}
	st := b.Stats()
	if st.DroppedBatches.Malformed != 2 || st.DroppedRecords.Malformed != 8 || st.Retries != 0 || st.Delivered != 4 {
		t.Fatalf("stats %+v", st)
	}
	if n := logs.Count("output rejected a batch as malformed; dropped"); n != 1 {
		t.Fatalf("malformed logged %d times within a minute, want 1", n)
	}
}

// scenarioCloseTimeout: the sink never answers; Close gives up after
// CloseTimeout. Memory counts what is left as dropped (shutdown); disk
// keeps it and the next buffer on the same directory replays it.
func scenarioCloseTimeout(t *testing.T, env kindEnv) {
	sink := &fakeSink{gate: make(chan struct{}), entered: make(chan uint64, 100)}
	dir := t.TempDir()
	b := env.newBuffer(t, sink, Config{Dir: dir, CloseTimeout: time.Millisecond})
	for seq := uint64(1); seq <= 5; seq++ {
		if err := b.Write(context.Background(), testBatch(seq, 2)); err != nil {
			t.Fatal(err)
		}
	}
	<-sink.entered
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	st := b.Stats()
	if st.Delivered != 0 {
		t.Fatalf("delivered %d through a blocked sink", st.Delivered)
	}
	if env.kind == KindMemory {
		if st.DroppedBatches.Shutdown != 5 || st.DroppedRecords.Shutdown != 10 || st.BufferedBatches != 0 {
			t.Fatalf("memory after close: %+v", st)
		}
		return
	}
	if st.DroppedBatches.Total() != 0 || st.BufferedBatches != 5 {
		t.Fatalf("disk after close: %+v", st)
	}
	sink2 := &fakeSink{}
	b2 := env.newBuffer(t, sink2, Config{Dir: dir})
	if err := b2.Write(context.Background(), testBatch(6, 2)); err != nil {
		t.Fatal(err)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sink2.Accepted(t); !slices.Equal(got, seqRange(1, 6)) {
		t.Fatalf("after restart accepted %v, want 1..6 (replayed with their Seq, then new)", got)
	}
	if st := b2.Stats(); st.Replayed != 5 || st.Delivered != 6 {
		t.Fatalf("after restart: %+v", st)
	}
}

func scenarioContract(t *testing.T, env kindEnv) {
	sink := &fakeSink{}
	b := env.newBuffer(t, sink, Config{})
	ctx := context.Background()
	if err := b.Write(ctx, &record.Batch{Seq: 1}); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	tb := testBatch(10, 8)
	want := encode(tb)
	if err := b.Write(ctx, tb); err != nil {
		t.Fatal(err)
	}
	// The caller reuses its batch: the buffer must not have kept it.
	tb.Samples[0].Value = -1
	tb.Devices[0].UUID = "changed"
	tb.Reset()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.Write(ctx, testBatch(11, 1)); !errors.Is(err, record.ErrClosed) {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
	if len(sink.got) != 1 || string(sink.got[0]) != string(want) {
		t.Fatalf("sink got %d batches; the one written must arrive unchanged", len(sink.got))
	}
	if sink.closed != 1 {
		t.Fatalf("wrapped output closed %d times", sink.closed)
	}
}

// scenarioWriteThenCloseWhileIdle: the delivery goroutine has just found
// the queue empty when a batch is written and Close is called. Close must
// still deliver that batch (it once returned at the sight of Close,
// dropping it as "shutdown" while the sink was healthy).
func scenarioWriteThenCloseWhileIdle(t *testing.T, env kindEnv) {
	sink := &fakeSink{}
	idle, release := make(chan struct{}, 1), make(chan struct{})
	first := true
	b := env.newBuffer(t, sink, Config{}, withIdle(func() {
		if first {
			first = false
			idle <- struct{}{}
			<-release
		}
	}))
	<-idle // the goroutine looked, found nothing, and waits here
	tb := testBatch(1, 4)
	want := encode(tb)
	if err := b.Write(context.Background(), tb); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	<-b.draining // Close has refused further writes
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if len(sink.got) != 1 || string(sink.got[0]) != string(want) {
		t.Fatalf("sink got %d batches; the one written before Close must arrive unchanged", len(sink.got))
	}
	if st := b.Stats(); st.DroppedRecords.Shutdown != 0 {
		t.Fatalf("%d records counted as dropped at shutdown, want 0: %+v", st.DroppedRecords.Shutdown, st)
	}
}

func scenarioOldestAge(t *testing.T, env kindEnv) {
	clock := newFakeClock()
	sink := &fakeSink{gate: make(chan struct{}), entered: make(chan uint64, 10)}
	b := env.newBuffer(t, sink, Config{}, withClock(clock.Now))
	if err := b.Write(context.Background(), testBatch(1, 1)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Second)
	if err := b.Write(context.Background(), testBatch(2, 1)); err != nil {
		t.Fatal(err)
	}
	<-sink.entered
	clock.Advance(4 * time.Second)
	if st := b.Stats(); st.OldestAge != 7*time.Second || st.BufferedBatches != 2 || st.BufferedRecords != 2 ||
		st.BufferedBytes != 2*env.entryBytes(len(encode(testBatch(1, 1)))) {
		t.Fatalf("stats %+v, want oldest 7s, 2 batches", st)
	}
	close(sink.gate)
	b.Close()
	if st := b.Stats(); st.OldestAge != 0 || st.BufferedBatches != 0 || st.BufferedBytes != 0 {
		t.Fatalf("after drain %+v", st)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  Config
		want []string // substrings of the error; none: valid
	}{
		{Config{}, nil},
		{Config{Kind: "none"}, nil},
		{Config{Kind: "memory", MaxBytes: 1, MaxRecords: 1}, nil},
		{Config{Kind: "disk", MaxBytes: 1, Dir: "/x"}, nil},
		{Config{Kind: "ram"}, []string{`buffer.kind: unknown kind "ram"`}},
		{Config{Kind: "memory"}, []string{"buffer.max_bytes: must be positive", "buffer.max_records: must be positive"}},
		{Config{Kind: "disk", MaxBytes: 1}, []string{"buffer.dir: required"}},
		{Config{Kind: "disk", MaxBytes: 1, Dir: "d", MaxRecords: -1}, []string{"buffer.max_records: must not be negative"}},
		{Config{Kind: "memory", MaxBytes: 1, MaxRecords: 1, FsyncInterval: -1, CloseTimeout: -1},
			[]string{"buffer.fsync_interval: must not be negative", "buffer.close_timeout: must not be negative"}},
		{Config{Kind: "memory", MaxBytes: 1, MaxRecords: 1, RetryInitial: time.Second, RetryMax: time.Millisecond},
			[]string{"buffer.retry_max: must be at least retry_initial"}},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		if len(c.want) == 0 {
			if err != nil {
				t.Errorf("%+v: %v", c.cfg, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%+v: valid, want %q", c.cfg, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %q lacks %q", c.cfg, err, w)
			}
		}
	}
}

func TestWrapNone(t *testing.T) {
	sink := &fakeSink{}
	for _, kind := range []string{"", KindNone} {
		out, err := Wrap(sink, Config{Kind: kind})
		if err != nil || out != record.Output(sink) {
			t.Fatalf("kind %q: got %v, %v; want the output itself", kind, out, err)
		}
	}
	if _, err := Wrap(sink, Config{Kind: KindMemory}); err == nil {
		t.Fatal("invalid config accepted")
	}
}

func TestDiskDirLocked(t *testing.T) {
	dir := t.TempDir()
	b := kinds[1].newBuffer(t, &fakeSink{}, Config{Dir: dir})
	defer b.Close()
	if _, err := New(&fakeSink{}, Config{Kind: KindDisk, MaxBytes: 1 << 20, Dir: dir}); err == nil {
		t.Fatal("a second buffer opened a directory in use")
	}
}

// A sink's retry hint (record.RetryAfter: Retry-After, RetryInfo)
// lengthens the backoff to at least the hint, at most
// record.MaxRetryAfter; a hint shorter than the backoff changes nothing.
func TestRetryAfterHint(t *testing.T) {
	for _, env := range kinds {
		hints := []time.Duration{7 * time.Second, time.Microsecond, time.Hour}
		sink := &fakeSink{script: func(call int, _ *record.Batch) error {
			if call <= len(hints) {
				return record.Unavailable(record.RetryAfter(errUnavailable, hints[call-1]))
			}
			return nil
		}}
		sr := &sleepRecorder{}
		b := env.newBuffer(t, sink, Config{RetryInitial: time.Millisecond, RetryMax: 8 * time.Millisecond}, withSleep(sr.Sleep))
		if err := b.Write(context.Background(), testBatch(1, 3)); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if got, want := sr.Delays(), []time.Duration{7 * time.Second, 2 * time.Millisecond, record.MaxRetryAfter}; !slices.Equal(got, want) {
			t.Errorf("%s: delays %v, want %v", env.kind, got, want)
		}
		if got := sink.Accepted(t); !slices.Equal(got, []uint64{1}) {
			t.Errorf("%s: accepted %v", env.kind, got)
		}
	}
}
