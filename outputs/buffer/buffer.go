package buffer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/sampler"
)

// ErrTooLarge is returned by Write for a batch that alone exceeds the
// buffer's max_bytes or max_records. Such a batch is not queued (the pump
// counts it as failed); lower the pump's batch size or raise the caps.
var ErrTooLarge = errors.New("buffer: batch exceeds the buffer's capacity")

func tooLarge(bytes int64, records int) error {
	return fmt.Errorf("%w (%d bytes, %d records)", ErrTooLarge, bytes, records)
}

// logEvery bounds how often one kind of problem (a retried write, a dropped
// batch) is logged.
const logEvery = time.Minute

// Option configures what Config, being plain data, does not.
type Option func(*options)

type options struct {
	log          *slog.Logger
	name         string
	writeTimeout time.Duration
	segmentBytes int64
	// Test hooks.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	rand  func() float64
	disk  diskHooks
}

// WithLogger sets the logger; the default discards. The buffer logs
// rarely: a queue replayed or kept on disk, and at most once a minute per
// kind of drop or retry.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithName names the output in logs.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithWriteTimeout bounds one Write to the wrapped output (default
// sampler.DefaultWriteTimeout).
func WithWriteTimeout(d time.Duration) Option { return func(o *options) { o.writeTimeout = d } }

// WithSegmentBytes sets the disk queue's segment file size (default
// max_bytes/8, between 64 KiB and 16 MiB). Smaller segments free disk
// sooner and drop in finer steps at the cap.
func WithSegmentBytes(n int64) Option { return func(o *options) { o.segmentBytes = n } }

// Buffer is an Output decorator: Write queues a copy of the batch and
// returns without waiting for the wrapped output; a goroutine of its own
// delivers the queue to the wrapped output in order, retrying retryable
// errors with backoff and removing a batch only once the output accepted it
// (or rejected it with sampler.Permanent).
//
// Concurrency: Write and Close follow sampler.Output (one caller, never
// concurrently); Stats may be called from any goroutine at any time. The
// wrapped output is called from the buffer's goroutine only, one Write at a
// time, with a Batch the buffer owns and reuses; Close closes it.
type Buffer struct {
	out  sampler.Output
	cfg  Config
	opts options
	q    queue
	log  *slog.Logger

	mu     sync.Mutex // guards closed and enc
	closed bool
	enc    []byte

	wake     chan struct{}
	draining chan struct{}
	ctx      context.Context // cancelled at Close's deadline
	cancel   context.CancelFunc
	done     chan struct{}
	closeErr error

	delivered, deliveredRecords, replayed, retries atomic.Uint64
	malformedBatches, malformedRecords             atomic.Uint64
	decodeBatches, shutdownBatches                 atomic.Uint64
	decodeRecords                                  atomic.Uint64
	shutdownRecords                                atomic.Uint64

	// Owned by the delivery goroutine.
	rnd                         func() float64
	lastDropLog, lastRetryLog   time.Time
	lastMalformedLog, lastIOLog time.Time
}

// Wrap returns out decorated with the buffer cfg describes, or out itself
// for kind "none" (or empty). cfg is validated first. For kind "disk",
// what an earlier process left queued in cfg.Dir is delivered first
// (replayed, at least once). The result's Close closes out.
func Wrap(out sampler.Output, cfg Config, opts ...Option) (sampler.Output, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Kind == "" || cfg.Kind == KindNone {
		return out, nil
	}
	return New(out, cfg, opts...)
}

// New is Wrap for kinds "memory" and "disk", returning the *Buffer so that
// the caller can read its Stats.
func New(out sampler.Output, cfg Config, opts ...Option) (*Buffer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Kind == "" || cfg.Kind == KindNone {
		return nil, fmt.Errorf("buffer.kind: %q has no buffer (use Wrap)", KindNone)
	}
	cfg = cfg.withDefaults()
	o := options{writeTimeout: sampler.DefaultWriteTimeout, now: time.Now, sleep: sleepCtx}
	for _, f := range opts {
		f(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.rand == nil {
		o.rand = rand.Float64
	}
	b := &Buffer{out: out, cfg: cfg, opts: o, log: o.log.With("output", o.name, "buffer", cfg.Kind),
		wake: make(chan struct{}, 1), draining: make(chan struct{}), done: make(chan struct{}), rnd: o.rand}
	switch cfg.Kind {
	case KindMemory:
		b.q = newMemQueue(cfg.MaxBytes, cfg.MaxRecords)
	case KindDisk:
		dq, err := openDiskQueue(cfg.Dir, diskOptions{maxBytes: cfg.MaxBytes, maxRecords: cfg.MaxRecords,
			segmentBytes: o.segmentBytes, log: b.log, hooks: o.disk})
		if err != nil {
			return nil, err
		}
		b.q = dq
		if st := dq.stats(); st.batches > 0 || st.corruptBatches > 0 {
			b.log.Info("replaying disk buffer", "dir", cfg.Dir, "batches", st.batches, "records", st.records,
				"bytes", st.bytes, "corrupt_skipped", st.corruptBatches)
		}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	go b.run()
	if cfg.Kind == KindDisk {
		go b.syncLoop()
	}
	return b, nil
}

// Write queues a copy of batch and returns; it never waits for the wrapped
// output and does not retain batch. An empty batch is ignored. At the cap
// the oldest queued batches are dropped (counted in Stats). It returns
// sampler.ErrClosed after Close, ErrTooLarge for a batch larger than the
// caps, and the disk's error when the disk queue cannot append.
func (b *Buffer) Write(_ context.Context, batch *sampler.Batch) error {
	if batch.Len() == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return sampler.ErrClosed
	}
	b.enc = appendBatch(b.enc[:0], batch)
	if err := b.q.push(b.enc, batch.Len(), b.opts.now().UnixNano()); err != nil {
		return err
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return nil
}

// run is the delivery goroutine.
func (b *Buffer) run() {
	defer close(b.done)
	var batch sampler.Batch
	ioErrs := 0
	for b.ctx.Err() == nil {
		e, ok, err := b.q.next()
		if err != nil {
			if now := b.opts.now(); now.Sub(b.lastIOLog) >= logEvery {
				b.lastIOLog = now
				b.log.Error("buffer read failed; retrying", "err", err)
			}
			if b.opts.sleep(b.ctx, b.backoff(ioErrs)) != nil {
				return
			}
			ioErrs++
			continue
		}
		ioErrs = 0
		if !ok {
			select {
			case <-b.draining:
				return
			default:
			}
			select {
			case <-b.wake:
			case <-b.draining:
			case <-b.ctx.Done():
				return
			}
			continue
		}
		b.deliver(e, &batch)
	}
}

// deliver writes one entry to the wrapped output until it is accepted,
// rejected as permanent, or the buffer's context ends.
func (b *Buffer) deliver(e entry, batch *sampler.Batch) {
	if err := decodeBatch(batch, e.payload); err != nil {
		// The payload passed its checksum (disk) or never left memory, so
		// this is a codec bug or memory corruption: count it as corrupt.
		b.q.ack()
		b.decodeBatches.Add(1)
		b.decodeRecords.Add(uint64(e.records))
		b.logDrop("corrupt", e.records, err)
		return
	}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(b.ctx, b.opts.writeTimeout)
		err := b.out.Write(ctx, batch)
		cancel()
		switch {
		case err == nil:
			b.q.ack()
			b.delivered.Add(1)
			b.deliveredRecords.Add(uint64(e.records))
			if e.replayed {
				b.replayed.Add(1)
			}
			return
		case sampler.IsPermanent(err):
			b.q.ack()
			b.malformedBatches.Add(1)
			b.malformedRecords.Add(uint64(e.records))
			if now := b.opts.now(); b.malformedBatches.Load() == 1 || now.Sub(b.lastMalformedLog) >= logEvery {
				b.lastMalformedLog = now
				b.log.Warn("output rejected a batch as malformed; dropped", "seq", batch.Seq,
					"records", e.records, "malformed_total", b.malformedBatches.Load(), "err", err)
			}
			return
		case b.ctx.Err() != nil:
			return // closing: the entry stays in flight (disk: on disk)
		}
		b.retries.Add(1)
		if now := b.opts.now(); now.Sub(b.lastRetryLog) >= logEvery {
			b.lastRetryLog = now
			b.log.Warn("output write failed; retrying with backoff", "seq", batch.Seq, "attempt", attempt+1,
				"retries_total", b.retries.Load(), "err", err)
		}
		if b.opts.sleep(b.ctx, b.backoff(attempt)) != nil {
			return
		}
	}
}

func (b *Buffer) logDrop(reason string, records int, err error) {
	if now := b.opts.now(); now.Sub(b.lastDropLog) >= logEvery {
		b.lastDropLog = now
		b.log.Warn("buffer dropped a batch", "reason", reason, "records", records, "err", err)
	}
}

// backoff returns the delay before retry attempt+1: RetryInitial doubled
// per attempt, capped at RetryMax, with "equal jitter" (uniform in [d/2,
// d]) so that many outputs recovering together spread out.
func (b *Buffer) backoff(attempt int) time.Duration {
	return backoffDelay(b.cfg.RetryInitial, b.cfg.RetryMax, attempt, b.rnd())
}

func backoffDelay(initial, maxDelay time.Duration, attempt int, r float64) time.Duration {
	d := maxDelay
	if attempt < 62 {
		if x := initial << attempt; x > 0 && x < maxDelay {
			d = x
		}
	}
	return d/2 + time.Duration(r*float64(d-d/2))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// syncLoop fsyncs the disk queue every FsyncInterval until Close.
func (b *Buffer) syncLoop() {
	t := time.NewTicker(b.cfg.FsyncInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if err := b.q.sync(); err != nil {
				b.log.Error("buffer fsync failed", "err", err)
			}
		case <-b.draining:
			return
		}
	}
}

// Close stops accepting batches, keeps delivering what is queued for at
// most CloseTimeout, then closes the wrapped output. What is left stays on
// disk for the next start (kind "disk", after a final fsync) or is counted
// as dropped with reason "shutdown" (kind "memory"). A second Close returns
// nil.
func (b *Buffer) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.draining)

	t := time.NewTimer(b.cfg.CloseTimeout)
	stuck := false // the delivery goroutine is still inside the output's Write
	select {
	case <-b.done:
	case <-t.C:
		b.cancel()
		// An output that ignores its context could hold the goroutine;
		// give it a moment, then carry on without it.
		grace := time.NewTimer(min(b.cfg.CloseTimeout, time.Second))
		select {
		case <-b.done:
		case <-grace.C:
			b.log.Warn("output ignored cancellation; closing without waiting for its write")
			stuck = true
		}
		grace.Stop()
	}
	t.Stop()
	b.cancel()

	st := b.q.stats()
	var errs []error
	if st.batches > 0 {
		if b.cfg.Kind == KindMemory {
			b.shutdownBatches.Add(uint64(st.batches))
			b.shutdownRecords.Add(uint64(st.records))
			b.log.Warn("closing with batches undelivered; dropped", "reason", "shutdown",
				"batches", st.batches, "records", st.records)
		} else {
			b.log.Info("closing with batches undelivered; kept on disk for the next start", "dir", b.cfg.Dir,
				"batches", st.batches, "records", st.records, "bytes", st.bytes)
		}
	}
	if err := b.q.close(); err != nil {
		errs = append(errs, fmt.Errorf("close buffer: %w", err))
	}
	if stuck {
		// The output is called one Write at a time, never concurrently
		// with Close: close it once its Write returns.
		go func() {
			<-b.done
			b.out.Close()
		}()
		errs = append(errs, errors.New("buffer: output still writing at close; it is closed when its write returns"))
	} else if err := b.out.Close(); err != nil {
		errs = append(errs, err)
	}
	b.closeErr = errors.Join(errs...)
	return b.closeErr
}

// Drops counts dropped batches or records by reason.
type Drops struct {
	// Cap: the oldest queued, dropped to make room at max_bytes or
	// max_records.
	Cap uint64
	// Malformed: rejected by the output with sampler.Permanent.
	Malformed uint64
	// Corrupt: failed its checksum or decode on disk (torn by a crash,
	// damaged on disk). Records are counted where the record header
	// survived; a torn region counts as one batch.
	Corrupt uint64
	// Shutdown: still queued in a memory buffer when Close gave up.
	Shutdown uint64
}

// Total returns the sum over every reason.
func (d Drops) Total() uint64 { return d.Cap + d.Malformed + d.Corrupt + d.Shutdown }

// Stats are a buffer's self-metrics. Buffered* are gauges (queued plus the
// batch being delivered); the rest count since the buffer was built.
type Stats struct {
	Kind string
	// BufferedBatches, BufferedRecords and BufferedBytes are what waits for
	// the output. Bytes are encoded bytes (disk: with record headers).
	BufferedBatches, BufferedRecords, BufferedBytes int64
	// OldestAge is the age of the oldest buffered batch (0 when empty).
	OldestAge time.Duration
	// Appended counts batches queued by Write.
	Appended uint64
	// Delivered counts batches (and their records) the output accepted.
	Delivered, DeliveredRecords uint64
	// Replayed counts delivered batches that an earlier process had queued
	// on disk.
	Replayed uint64
	// Retries counts failed Writes that were retried.
	Retries uint64
	// DroppedBatches and DroppedRecords count losses by reason.
	DroppedBatches, DroppedRecords Drops
}

// ReportStats implements sampler.StatsReporter by passing on the wrapped
// output's counters; the buffer's own (Stats) travel as self-metrics of
// scope "buffer".
func (b *Buffer) ReportStats(dst []sampler.Field) []sampler.Field {
	return sampler.ReportStats(b.out, dst)
}

// Stats returns the buffer's self-metrics. Safe to call from any goroutine.
func (b *Buffer) Stats() Stats {
	qs := b.q.stats()
	s := Stats{Kind: b.cfg.Kind, BufferedBatches: qs.batches, BufferedRecords: qs.records,
		BufferedBytes: qs.bytes, Appended: qs.appended, Delivered: b.delivered.Load(),
		DeliveredRecords: b.deliveredRecords.Load(), Replayed: b.replayed.Load(), Retries: b.retries.Load()}
	if qs.oldestNS != 0 {
		s.OldestAge = max(0, b.opts.now().Sub(time.Unix(0, qs.oldestNS)))
	}
	s.DroppedBatches = Drops{Cap: qs.capBatches, Malformed: b.malformedBatches.Load(),
		Corrupt: qs.corruptBatches + b.decodeBatches.Load(), Shutdown: b.shutdownBatches.Load()}
	s.DroppedRecords = Drops{Cap: qs.capRecords, Malformed: b.malformedRecords.Load(),
		Corrupt: qs.corruptRecords + b.decodeRecords.Load(), Shutdown: b.shutdownRecords.Load()}
	return s
}
