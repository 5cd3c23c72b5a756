package buffer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/backoff"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
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
	writeTimeout time.Duration
	segmentBytes int64
	catalog      *catalog.Catalog
	origin       *record.Origin // nil: none recorded
	shared       []string
	// Test hooks.
	metricNames []string // written to segment headers in place of the catalog's
	now         func() time.Time
	sleep       func(ctx context.Context, d time.Duration) error
	rand        func() float64
	disk        diskHooks
	idle        func() // called each time the delivery goroutine finds the queue empty
	// noDiskBudget leaves the disk queue bounded by its caps alone, not by
	// what its files use (scenarios whose caps are a few hundred bytes).
	noDiskBudget bool
}

// WithLogger sets the logger, which names the output the buffer wraps
// (the buffer adds only its kind); the default discards. The buffer logs
// rarely: a queue replayed or kept on disk, and at most once a minute per
// kind of drop or retry.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithWriteTimeout bounds one Write to the wrapped output (default
// record.DefaultWriteTimeout).
func WithWriteTimeout(d time.Duration) Option { return func(o *options) { o.writeTimeout = d } }

// WithCatalog sets the metric catalog that batches' metric IDs refer to
// (default catalog.Default()). Disk segments record its names; a
// replay maps the IDs of a segment written with another catalog by name.
func WithCatalog(c *catalog.Catalog) Option { return func(o *options) { o.catalog = c } }

// WithOrigin sets the fleet identity (host name, global tags) of the
// batches Write takes: disk segments record it, and a batch replayed from
// a segment written under another one carries that one as its
// record.Batch.Origin, so that the output writes the host and tags it was
// sampled under. An empty host records none (a replay then takes the
// output's own).
func WithOrigin(host string, tags map[string]string) Option {
	return func(o *options) { o.origin = recordpb.OriginOf(host, maps.Clone(tags)) }
}

// WithSharedFiles names files that another writer keeps in a disk
// buffer's directory (the aggregate journal): the disk budget (max_bytes)
// counts them, at their size when each batch is appended, beside the
// segments, so that the directory as a whole stays within it.
func WithSharedFiles(names ...string) Option { return func(o *options) { o.shared = names } }

// WithSegmentBytes sets the disk queue's segment file size (default
// max_bytes/8, between 64 KiB and 16 MiB). Smaller segments free disk
// sooner and drop in finer steps at the cap.
func WithSegmentBytes(n int64) Option { return func(o *options) { o.segmentBytes = n } }

// Buffer is an Output decorator: Write queues a copy of the batch and
// returns without waiting for the wrapped output; a goroutine of its own
// delivers the queue to the wrapped output in order, retrying retryable
// errors with backoff and removing a batch only once the output accepted it
// (or rejected it with record.Permanent).
//
// Concurrency: Write and Close follow record.Output (one caller, never
// concurrently); Stats may be called from any goroutine at any time. The
// wrapped output is called from the buffer's goroutine only, one Write at a
// time, with a Batch the buffer owns and reuses; Close closes it.
type Buffer struct {
	out  record.Output
	cfg  Config
	opts options
	q    queue
	log  *slog.Logger

	mu     sync.Mutex // guards closed, enc, encMsg and idents
	closed bool
	enc    []byte
	encMsg recordpb.Batch
	// idents are the newest identities Write has seen, by device index:
	// the header of the next disk segment.
	idents map[int]record.Device
	// capIdents (memory) are the identities Write had seen when the cap
	// last dropped batches: one of them may have carried an identity the
	// output was never given. lastCap is the cap drop count then.
	capIdents map[int]record.Device
	lastCap   uint64
	// next (memory) takes what is queued at Close (HandOver); hold, when
	// set, keeps this buffer from delivering until its predecessor handed
	// its queue over (closed then).
	next *Buffer
	hold chan struct{}

	wake     chan struct{}
	draining chan struct{}
	ctx      context.Context // cancelled at Close's deadline
	// retryCtx ends the backoff between retries: at Close's deadline, or
	// at once when Close hands the queue over.
	retryCtx  context.Context
	stopRetry context.CancelFunc
	cancel    context.CancelFunc
	done      chan struct{}
	closeErr  error

	handingOver                                    atomic.Bool
	handedBatches, handedRecords                   atomic.Uint64
	delivered, deliveredRecords, replayed, retries atomic.Uint64
	malformedBatches, malformedRecords             atomic.Uint64
	decodeBatches, shutdownBatches                 atomic.Uint64
	decodeRecords                                  atomic.Uint64
	shutdownRecords                                atomic.Uint64
	unmappedBatches, unmappedRecords               atomic.Uint64
	syncErrors                                     atomic.Uint64
	// writing is set while the delivery goroutine is inside the output's
	// Write (or about to call it).
	writing atomic.Bool
	// The delivery goroutine's state, for Finish (under stateMu): idle
	// while it waits with nothing queued, backingOff while it waits to
	// retry a refused batch (or a failed read); stateCh is closed, and
	// replaced, each time one of them is set.
	stateMu          sync.Mutex
	idle, backingOff bool
	stateCh          chan struct{}
	// finishSpent is how long Finish waited for the final delivery (under
	// mu): Close keeps delivering for what is left of CloseTimeout.
	finishSpent time.Duration

	// Owned by the delivery goroutine.
	decMsg recordpb.Batch
	// The segment being delivered (disk): its ID, and how its metric IDs
	// map onto the catalog (remap nil when they need no rewriting).
	haveSeg bool
	curSeg  uint64
	remap   []catalog.MetricID
	// segOrigin is the identity the segment's batches were sampled under
	// when it is not this buffer's own (nil: the output's applies).
	segOrigin *record.Origin
	// loggedOrigin is the last such identity logged (once, not per segment).
	loggedOrigin *record.Origin
	// known holds the identities seen in delivery order, [0] for this
	// process's batches and [1] for replayed ones (device indexes of an
	// earlier process); sent what the output was last given per index.
	known                       [2]map[int]record.Device
	sent                        map[int]record.Device
	refs                        []bool
	refList                     []int
	rnd                         func() float64
	lastDropLog, lastRetryLog   time.Time
	lastMalformedLog, lastIOLog time.Time
}

// Wrap returns out decorated with the buffer cfg describes, or out itself
// for kind "none" (or empty). cfg is validated first. For kind "disk",
// what an earlier process left queued in cfg.Dir is delivered first
// (replayed, at least once). The result's Close closes out.
func Wrap(out record.Output, cfg Config, opts ...Option) (record.Output, error) {
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
func New(out record.Output, cfg Config, opts ...Option) (*Buffer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Kind == "" || cfg.Kind == KindNone {
		return nil, fmt.Errorf("buffer.kind: %q has no buffer (use Wrap)", KindNone)
	}
	cfg = cfg.withDefaults()
	o := options{writeTimeout: record.DefaultWriteTimeout, now: time.Now, sleep: backoff.Sleep}
	for _, f := range opts {
		f(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	if o.rand == nil {
		o.rand = rand.Float64
	}
	if o.catalog == nil {
		o.catalog = catalog.Default()
	}
	if o.metricNames == nil {
		o.metricNames = recordpb.MetricNames(o.catalog)
	}
	b := &Buffer{out: out, cfg: cfg, opts: o, log: o.log.With("buffer", cfg.Kind),
		wake: make(chan struct{}, 1), draining: make(chan struct{}), done: make(chan struct{}), rnd: o.rand,
		stateCh: make(chan struct{}), idents: map[int]record.Device{}, capIdents: map[int]record.Device{},
		sent:  map[int]record.Device{},
		known: [2]map[int]record.Device{{}, {}}}
	switch cfg.Kind {
	case KindMemory:
		b.q = newMemQueue(cfg.MaxBytes, cfg.MaxRecords)
	case KindDisk:
		budget := cfg.MaxBytes
		if o.noDiskBudget {
			budget = 0
		}
		dq, err := openDiskQueue(cfg.Dir, diskOptions{maxBytes: cfg.MaxBytes, maxRecords: cfg.MaxRecords,
			diskBytes: budget, segmentBytes: o.segmentBytes, header: b.segmentHeader(), log: b.log, hooks: o.disk,
			shared: o.shared})
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
	b.retryCtx, b.stopRetry = context.WithCancel(b.ctx)
	go b.run()
	if cfg.Kind == KindDisk {
		go b.syncLoop()
	}
	return b, nil
}

// LastAppended returns the Seq of the newest batch that an earlier process
// appended to the disk queue, as found when the buffer was opened — whether
// it was delivered since or not — and false when the queue held none (or is
// a memory queue). A writer that numbers its batches across restarts learns
// from it whether its last batch before a crash reached the buffer.
func (b *Buffer) LastAppended() (seq uint64, ok bool) {
	dq, isDisk := b.q.(*diskQueue)
	if !isDisk || dq.lastPayload == nil {
		return 0, false
	}
	var msg recordpb.Batch
	var batch record.Batch
	if err := recordpb.DecodeBatch(dq.lastPayload, &msg, &batch); err != nil {
		return 0, false
	}
	return batch.Seq, true
}

// Write queues a copy of batch and returns; it never waits for the wrapped
// output and does not retain batch. An empty batch is ignored. At the cap
// the oldest queued batches are dropped (counted in Stats). It returns
// record.ErrClosed after Close, ErrTooLarge for a batch larger than the
// caps, and the disk's error when the disk queue cannot append.
func (b *Buffer) Write(_ context.Context, batch *record.Batch) error {
	if batch.Len() == 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return record.ErrClosed
	}
	var err error
	if b.enc, err = recordpb.AppendBatch(b.enc[:0], &b.encMsg, batch); err != nil {
		return fmt.Errorf("buffer: %w", err)
	}
	if b.noteIdentities(batch.Devices) && b.cfg.Kind == KindDisk {
		b.q.setHeader(b.segmentHeader())
	}
	if err := b.q.push(b.enc, batch.Len(), b.opts.now().UnixNano()); err != nil {
		return err
	}
	if b.cfg.Kind == KindMemory && len(b.idents) > 0 {
		// Disk segments keep the identities in their headers; memory
		// remembers them when the cap drops batches.
		if c := b.q.stats().capBatches; c != b.lastCap {
			b.lastCap = c
			maps.Copy(b.capIdents, b.idents)
		}
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return nil
}

// noteIdentities records devs as the newest identities and reports whether
// any changed. Called with mu held.
func (b *Buffer) noteIdentities(devs []record.Device) bool {
	changed := false
	for _, d := range devs {
		if old, ok := b.idents[d.Index]; !ok || old != d {
			b.idents[d.Index] = d
			changed = true
		}
	}
	return changed
}

// segmentHeader encodes the header of a new disk segment: the catalog's
// metric names and the newest identities. Write starts a new segment each
// time an identity changes, so a segment's header names the devices of
// every batch in it, whichever of them a restart replays first. Called with mu held (or before
// the buffer is shared).
func (b *Buffer) segmentHeader() []byte {
	h := &recordpb.BufferSegment{Format: 2, MetricNames: b.opts.metricNames}
	h.Host, h.Tags = recordpb.OriginFields(b.opts.origin)
	for _, i := range slices.Sorted(maps.Keys(b.idents)) {
		d := b.idents[i]
		h.Devices = append(h.Devices, recordpb.FromDevice(&d))
	}
	p, err := proto.MarshalOptions{Deterministic: true}.Marshal(h)
	if err != nil {
		// Strings and numbers only: marshalling cannot fail.
		panic(fmt.Sprintf("buffer: encode segment header: %v", err))
	}
	return p
}

// run is the delivery goroutine.
func (b *Buffer) run() {
	defer close(b.done)
	var batch record.Batch
	ioErrs := 0
	draining := false
	for b.ctx.Err() == nil && !b.handingOver.Load() && b.awaitHold() {
		e, ok, err := b.q.next()
		if err != nil {
			if now := b.opts.now(); now.Sub(b.lastIOLog) >= logEvery {
				b.lastIOLog = now
				b.log.Error("buffer read failed; retrying", "err", err)
			}
			b.setState(&b.backingOff, true)
			err := b.opts.sleep(b.ctx, b.backoff(ioErrs))
			b.setState(&b.backingOff, false)
			if err != nil {
				return
			}
			ioErrs++
			continue
		}
		ioErrs = 0
		if !ok {
			if b.opts.idle != nil {
				b.opts.idle()
			}
			if draining {
				return // looked again after Close: nothing left
			}
			b.setState(&b.idle, true)
			select {
			case <-b.wake:
			case <-b.draining:
				// Close refuses writes before it closes draining, so one
				// more look finds a batch queued since the last one.
				draining = true
			case <-b.ctx.Done():
				return
			}
			b.setState(&b.idle, false)
			continue
		}
		b.deliver(e, &batch)
	}
}

// deliver writes one entry to the wrapped output until it is accepted,
// rejected as permanent, or the buffer's context ends.
func (b *Buffer) deliver(e entry, batch *record.Batch) {
	if err := recordpb.DecodeBatch(e.payload, &b.decMsg, batch); err != nil {
		// The payload passed its checksum (disk) or never left memory, so
		// this is an encoding bug or memory corruption: count it as corrupt.
		b.q.ack()
		b.decodeBatches.Add(1)
		b.decodeRecords.Add(uint64(e.records))
		b.logDrop("corrupt", e.records, err)
		return
	}
	if e.header != nil && (!b.haveSeg || e.segment != b.curSeg) {
		b.enterSegment(e)
	}
	if b.remap != nil {
		if n := b.remapMetrics(batch); n > 0 {
			b.unmappedBatches.Add(1)
			b.unmappedRecords.Add(uint64(n))
			e.records -= n
			b.logDrop("unmapped", n, fmt.Errorf("buffer: %d samples or summaries of metrics this catalog does not have", n))
			if batch.Len() == 0 {
				b.q.ack()
				return
			}
		}
	}
	if batch.Origin == nil {
		batch.Origin = b.segOrigin
	} else if batch.Origin.Equal(b.opts.origin) {
		batch.Origin = nil
	}
	origin := 0
	if e.replayed {
		origin = 1
	}
	b.addIdentities(batch, origin)
	for attempt := 0; ; attempt++ {
		// Set before the context is looked at: once Close has cancelled
		// it and then sees writing unset, no Write follows.
		b.writing.Store(true)
		if b.ctx.Err() != nil {
			b.writing.Store(false)
			return // closing: the entry stays in flight, as after a cancelled Write
		}
		ctx, cancel := context.WithTimeout(b.ctx, b.opts.writeTimeout)
		err := b.out.Write(ctx, batch)
		cancel()
		b.writing.Store(false)
		switch {
		case err == nil:
			b.q.ack()
			for _, d := range batch.Devices {
				b.sent[d.Index] = d
			}
			b.delivered.Add(1)
			b.deliveredRecords.Add(uint64(e.records))
			if e.replayed {
				b.replayed.Add(1)
			}
			return
		case record.IsPermanent(err):
			b.q.ack()
			b.malformedBatches.Add(1)
			b.malformedRecords.Add(uint64(e.records))
			if now := b.opts.now(); b.malformedBatches.Load() == 1 || now.Sub(b.lastMalformedLog) >= logEvery {
				b.lastMalformedLog = now
				b.log.Warn("output rejected a batch as malformed; dropped", "seq", batch.Seq,
					"records", e.records, "malformed_total", b.malformedBatches.Load(), "err", err)
			}
			return
		case b.ctx.Err() != nil, b.handingOver.Load():
			return // closing: the entry stays in flight (disk: on disk; memory: handed over at Close)
		}
		b.retries.Add(1)
		if now := b.opts.now(); now.Sub(b.lastRetryLog) >= logEvery {
			b.lastRetryLog = now
			b.log.Warn("output write failed; retrying with backoff", "seq", batch.Seq, "attempt", attempt+1,
				"retries_total", b.retries.Load(), "err", err)
		}
		wait := b.backoff(attempt)
		if hint, ok := record.RetryAfterOf(err); ok {
			// The sink said when to come back (Retry-After, RetryInfo).
			wait = max(wait, min(hint, record.MaxRetryAfter))
		}
		b.setState(&b.backingOff, true)
		err = b.opts.sleep(b.retryCtx, wait)
		b.setState(&b.backingOff, false)
		if err != nil {
			return
		}
	}
}

// setState sets one of the delivery goroutine's states (idle, backingOff)
// and, when it is set true, wakes Finish.
func (b *Buffer) setState(flag *bool, v bool) {
	b.stateMu.Lock()
	defer b.stateMu.Unlock()
	*flag = v
	if v {
		close(b.stateCh)
		b.stateCh = make(chan struct{})
	}
}

// Finish implements record.Finisher: at shutdown, after the pump's final
// Write, it waits for the delivery goroutine to have delivered everything
// queued (then finishes the wrapped output: a plugin's counters refreshed),
// or to have had a batch refused (it is kept, and Close offers it again
// after the backoff), or for ctx to end, and at most CloseTimeout: so that
// the final statistics count what the sink took. The time it waited comes
// off Close's CloseTimeout, so a stop takes no longer than without it.
func (b *Buffer) Finish(ctx context.Context) error {
	b.mu.Lock()
	closed, left := b.closed, b.cfg.CloseTimeout-b.finishSpent
	b.mu.Unlock()
	if closed {
		return record.ErrClosed
	}
	start := time.Now()
	defer func() {
		b.mu.Lock()
		b.finishSpent += time.Since(start)
		b.mu.Unlock()
	}()
	t := time.NewTimer(max(left, 0))
	defer t.Stop()
	for {
		// The queue first: an entry stays counted until it is resolved,
		// and idle is set only after the goroutine found nothing more.
		empty := b.q.stats().batches == 0
		b.stateMu.Lock()
		idle, backingOff, changed := b.idle, b.backingOff, b.stateCh
		b.stateMu.Unlock()
		switch {
		case empty && idle:
			// Nothing is queued and the goroutine waits: the wrapped
			// output is not written to while it finishes.
			return record.Finish(ctx, b.out)
		case backingOff:
			return errors.New("buffer: the output refused a batch at the final delivery; it stays queued for close")
		}
		select {
		case <-changed:
		case <-b.done:
			return errors.New("buffer: delivery ended before the queue was delivered")
		case <-ctx.Done():
			return fmt.Errorf("buffer: final delivery: %w", ctx.Err())
		case <-t.C:
			return fmt.Errorf("buffer: final delivery not done within close_timeout %v; it goes on at close", b.cfg.CloseTimeout)
		}
	}
}

// enterSegment reads the header of the disk segment e comes from: how its
// metric IDs map onto the catalog, and the identities known when it was
// started.
func (b *Buffer) enterSegment(e entry) {
	b.haveSeg, b.curSeg, b.remap, b.segOrigin = true, e.segment, nil, nil
	var h recordpb.BufferSegment
	if err := proto.Unmarshal(e.header, &h); err != nil || h.GetFormat() != 2 {
		// Passed its checksum, so a bug: map nothing rather than guess.
		b.log.Warn("buffer segment header unreadable; its batches' samples are dropped", "segment", e.segment,
			"err", err, "format", h.GetFormat())
		b.remap = []catalog.MetricID{}
		return
	}
	if m, identity := recordpb.MetricMap(h.GetMetricNames(), b.opts.catalog); !identity {
		b.remap = m
		if e.replayed {
			b.log.Info("replaying a segment written with another metric catalog; metric IDs are mapped by name",
				"segment", e.segment)
		}
	}
	if o := recordpb.OriginOf(h.GetHost(), h.GetTags()); o != nil && !o.Equal(b.opts.origin) {
		b.segOrigin = o
		if !o.Equal(b.loggedOrigin) {
			b.loggedOrigin = o
			b.log.Info("replaying segments sampled under another host name or other global tags; their records keep them",
				"segment", e.segment, "host", o.Host, "tags", o.Tags)
		}
	}
	origin := 0
	if e.replayed {
		origin = 1
	}
	for _, d := range h.GetDevices() {
		b.known[origin][int(d.GetIndex())] = d.ToSampler()
	}
}

// remapMetrics rewrites batch's metric IDs with b.remap, dropping the
// samples and summaries whose metric the catalog does not have, and returns
// how many it dropped.
func (b *Buffer) remapMetrics(batch *record.Batch) int {
	m := func(id catalog.MetricID) catalog.MetricID {
		if int(id) >= len(b.remap) {
			return 0
		}
		return b.remap[id]
	}
	n := len(batch.Samples) + len(batch.Summaries)
	for i := range batch.Samples {
		batch.Samples[i].Metric = m(batch.Samples[i].Metric)
	}
	for i := range batch.Summaries {
		batch.Summaries[i].Metric = m(batch.Summaries[i].Metric)
	}
	batch.Samples = slices.DeleteFunc(batch.Samples, func(s record.Sample) bool { return s.Metric == 0 })
	batch.Summaries = slices.DeleteFunc(batch.Summaries, func(s record.Summary) bool { return s.Metric == 0 })
	return n - len(batch.Samples) - len(batch.Summaries)
}

// addIdentities adds to batch the identity of every device its samples,
// summaries and events refer to that the output was not given yet (or was
// given in another form), as far as the batches delivered before it, the
// headers of their disk segments and (memory) the identities known when
// the cap dropped batches tell it: a replayed batch, or one behind a
// dropped batch that carried the identity, still names its devices. origin selects the identities: this process's (0) or an
// earlier one's (1, replay).
func (b *Buffer) addIdentities(batch *record.Batch, origin int) {
	known := b.known[origin]
	for _, d := range batch.Devices {
		known[d.Index] = d
	}
	b.refList = b.refList[:0]
	mark := func(i int) {
		if i < 0 {
			return
		}
		if i >= len(b.refs) {
			b.refs = slices.Grow(b.refs, i+1-len(b.refs))[:i+1]
		}
		if !b.refs[i] {
			b.refs[i] = true
			b.refList = append(b.refList, i)
		}
	}
	for i := range batch.Devices {
		mark(batch.Devices[i].Index)
	}
	have := len(b.refList)
	for i := range batch.Samples {
		mark(int(batch.Samples[i].Device))
	}
	for i := range batch.Summaries {
		mark(int(batch.Summaries[i].Device))
	}
	for i := range batch.Events {
		mark(batch.Events[i].Device)
	}
	missing := b.refList[have:]
	slices.Sort(missing)
	for _, i := range missing {
		d, ok := known[i]
		if !ok && origin == 0 {
			b.mu.Lock()
			d, ok = b.capIdents[i]
			b.mu.Unlock()
		}
		if sd, sent := b.sent[i]; ok && (!sent || sd != d) {
			batch.Devices = append(batch.Devices, d)
		}
	}
	for _, i := range b.refList {
		b.refs[i] = false
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
	return backoff.Jitter(backoff.Delay(b.cfg.RetryInitial, b.cfg.RetryMax, attempt), b.rnd())
}

// syncLoop fsyncs the disk queue every FsyncInterval until Close.
func (b *Buffer) syncLoop() {
	t := time.NewTicker(b.cfg.FsyncInterval)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-t.C:
			if err := b.q.sync(); err != nil {
				b.syncErrors.Add(1)
				if now := b.opts.now(); now.Sub(last) >= logEvery {
					last = now
					b.log.Error("buffer fsync failed (logged at most once a minute)", "err", err,
						"failures_total", b.syncErrors.Load())
				}
			}
		case <-b.draining:
			return
		}
	}
}

// HandOver makes Close pass what b still has queued (the batch in flight
// first, unless the output took it) to next, ahead of next's own batches,
// instead of delivering it within CloseTimeout and dropping the rest: a
// reload that replaces a memory-buffered output loses nothing queued. next
// delivers nothing until b is closed (or next is). Both must be memory
// buffers; call it before next's first Write.
func (b *Buffer) HandOver(next *Buffer) error {
	if b.cfg.Kind != KindMemory || next.cfg.Kind != KindMemory {
		return fmt.Errorf("buffer: hand over from %s to %s: only memory buffers hand their queue over", b.cfg.Kind, next.cfg.Kind)
	}
	next.mu.Lock()
	if next.hold == nil {
		next.hold = make(chan struct{})
	}
	next.mu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		next.release()
		return record.ErrClosed
	}
	b.next = next
	return nil
}

// awaitHold waits while a predecessor has yet to hand its queue over
// (HandOver); false when the buffer's context ended meanwhile.
func (b *Buffer) awaitHold() bool {
	b.mu.Lock()
	hold := b.hold
	b.mu.Unlock()
	if hold == nil {
		return true
	}
	select {
	case <-hold:
	case <-b.draining:
	case <-b.ctx.Done():
		return false
	}
	return true
}

// release lets b deliver (its predecessor handed over). Idempotent.
func (b *Buffer) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hold != nil {
		select {
		case <-b.hold:
		default:
			close(b.hold)
		}
	}
}

// adopt queues a predecessor's entries ahead of b's own, with the
// identities their batches refer to, and lets b deliver.
func (b *Buffer) adopt(es []entry, idents map[int]record.Device) {
	b.mu.Lock()
	maps.Copy(b.capIdents, idents)
	b.mu.Unlock()
	if mq, ok := b.q.(*memQueue); ok && len(es) > 0 {
		mq.prepend(es)
	}
	b.release()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting batches, keeps delivering what is queued for at
// most CloseTimeout (less what Finish waited), then closes the wrapped
// output. What is left stays on
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
	next := b.next
	window := max(b.cfg.CloseTimeout-b.finishSpent, 0) // Finish spent the rest
	b.mu.Unlock()
	if next != nil {
		// Stop delivering (once the write in flight returns); what is
		// left goes to next.
		b.handingOver.Store(true)
		b.stopRetry()
	}
	b.release() // a predecessor that never closed holds nothing back now
	close(b.draining)

	t := time.NewTimer(window)
	stuck := false // the delivery goroutine is still inside the output's Write
	select {
	case <-b.done:
	case <-t.C:
		b.cancel()
		stuck = b.awaitCancelled()
	}
	t.Stop()
	b.cancel()

	if next != nil {
		if mq, ok := b.q.(*memQueue); ok {
			es := mq.take()
			for _, e := range es {
				b.handedBatches.Add(1)
				b.handedRecords.Add(uint64(e.records))
			}
			b.mu.Lock()
			idents := maps.Clone(b.idents)
			maps.Copy(idents, b.capIdents)
			b.mu.Unlock()
			next.adopt(es, idents)
		}
	}
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

// closeGrace is how long Close waits, once it cancelled the output's Write
// at CloseTimeout, for that Write to return. An output still inside Write
// then ignores its context: Close carries on without it (and closes it
// when the Write returns).
const closeGrace = time.Second

// awaitCancelled waits, once b's context is cancelled, for the delivery
// goroutine to end; true when it is still inside the output's Write after
// closeGrace. Anywhere else it runs the buffer's own code, which ends on
// the cancelled context without another Write, however long a loaded
// machine takes to schedule it: that is waited for.
func (b *Buffer) awaitCancelled() (stuck bool) {
	grace := time.NewTimer(closeGrace)
	defer grace.Stop()
	select {
	case <-b.done:
		return false
	case <-grace.C:
	}
	if b.writing.Load() {
		b.log.Warn("output ignored cancellation; closing without waiting for its write", "grace", closeGrace)
		return true
	}
	<-b.done
	return false
}

// Drops counts dropped batches or records by reason.
type Drops struct {
	// Cap: the oldest queued, dropped to make room at max_bytes or
	// max_records.
	Cap uint64
	// Malformed: rejected by the output with record.Permanent.
	Malformed uint64
	// Corrupt: failed its checksum or decode on disk (torn by a crash,
	// damaged on disk). Records are counted where the record header
	// survived; a torn region counts as one batch.
	Corrupt uint64
	// Shutdown: still queued in a memory buffer when Close gave up.
	Shutdown uint64
	// Unmapped: replayed samples and summaries of a metric that the
	// catalog no longer has (a segment written by a version whose catalog
	// differs); records only, batches count those that lost any.
	Unmapped uint64
}

// Total returns the sum over every reason.
func (d Drops) Total() uint64 { return d.Cap + d.Malformed + d.Corrupt + d.Shutdown + d.Unmapped }

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
	// HandedOver counts batches (and their records) passed at Close to the
	// buffer that replaced this one (HandOver).
	HandedOver, HandedOverRecords uint64
	// DroppedBatches and DroppedRecords count losses by reason.
	DroppedBatches, DroppedRecords Drops
	// Disk only. Degraded is set while writes to disk fail (a full disk):
	// new batches are then held in memory, within the caps; HeldBatches
	// and HeldRecords (included in Buffered*) are held now. DiskErrors
	// counts failed writes (appends, segment creates and fsyncs),
	// Degradations the times the buffer degraded. DiskBytes is what its
	// files use on disk (whole blocks, the reserve for the cursor
	// included); it stays within max_bytes.
	Degraded                 bool
	HeldBatches, HeldRecords int64
	DiskErrors, Degradations uint64
	DiskBytes                int64
}

// ReportStats implements record.StatsReporter by passing on the wrapped
// output's counters; the buffer's own (Stats) travel as self-metrics of
// scope "buffer".
func (b *Buffer) ReportStats(dst []record.Field) []record.Field {
	return record.ReportStats(b.out, dst)
}

// Stats returns the buffer's self-metrics. Safe to call from any goroutine.
func (b *Buffer) Stats() Stats {
	qs := b.q.stats()
	s := Stats{Kind: b.cfg.Kind, BufferedBatches: qs.batches, BufferedRecords: qs.records,
		BufferedBytes: qs.bytes, Appended: qs.appended, Delivered: b.delivered.Load(),
		DeliveredRecords: b.deliveredRecords.Load(), Replayed: b.replayed.Load(), Retries: b.retries.Load(),
		HandedOver: b.handedBatches.Load(), HandedOverRecords: b.handedRecords.Load()}
	if qs.oldestNS != 0 {
		s.OldestAge = max(0, b.opts.now().Sub(time.Unix(0, qs.oldestNS)))
	}
	s.DroppedBatches = Drops{Cap: qs.capBatches, Malformed: b.malformedBatches.Load(),
		Corrupt: qs.corruptBatches + b.decodeBatches.Load(), Shutdown: b.shutdownBatches.Load() + qs.shutdownBatches,
		Unmapped: b.unmappedBatches.Load()}
	s.DroppedRecords = Drops{Cap: qs.capRecords, Malformed: b.malformedRecords.Load(),
		Corrupt: qs.corruptRecords + b.decodeRecords.Load(), Shutdown: b.shutdownRecords.Load() + qs.shutdownRecords,
		Unmapped: b.unmappedRecords.Load()}
	s.Degraded, s.HeldBatches, s.HeldRecords = qs.degraded, qs.heldNowBatches, qs.heldNowRecords
	s.DiskErrors, s.Degradations, s.DiskBytes = qs.diskErrors+b.syncErrors.Load(), qs.degradedEpisodes, qs.diskBytes
	return s
}
