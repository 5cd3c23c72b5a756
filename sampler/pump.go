package sampler

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Pump defaults.
const (
	DefaultFlushInterval = 100 * time.Millisecond
	DefaultMaxBatch      = 4096
	// dropLogEvery bounds how often a pump logs that it is dropping.
	dropLogEvery = time.Minute
)

// PumpOptions configure one output's pump. The zero value means defaults.
type PumpOptions struct {
	// FlushInterval: how often the pump moves what the rings hold to the
	// output.
	FlushInterval time.Duration
	// MaxBatch caps the samples in one Write; a backlog goes out in several.
	MaxBatch int
	// WriteTimeout bounds one Write.
	WriteTimeout time.Duration
	// Select, when set, passes only the metrics it returns true for; the
	// others are counted as filtered. It is called once per metric of the
	// engine's catalog when the output is attached (a pure function of the
	// metric), not per sample.
	Select func(*catalog.Metric) bool
}

// OutputStats are one output's self-metrics. For every output, at any
// moment after a flush: Published = Read + Dropped, and Read = Delivered +
// Failed + Filtered + Pending. The counters add up across replacements of
// the output (Engine.ReplaceOutput, ReplaceOutputWith: a config reload):
// they count since the output's name was first attached.
type OutputStats struct {
	Name string
	// Published samples into the rings since the output was attached, up to
	// its cursors' positions.
	Published uint64
	// Read samples taken from the rings.
	Read uint64
	// Dropped samples: published while this output's ring lane was full
	// (the lane keeps the oldest unread samples and refuses the newest).
	Dropped uint64
	// Filtered samples not selected for this output.
	Filtered uint64
	// Delivered samples in batches the output accepted.
	Delivered uint64
	// Failed samples in batches the output rejected with an error.
	Failed uint64
	// Pending samples are in a batch held for retry because the output
	// refused it as unavailable or retryable (see record.ErrorKind); 0 after the
	// pump stops (what is still held then counts as failed).
	Pending uint64
	// Retries counts Writes refused as unavailable or retryable after
	// which the batch was kept and offered again.
	Retries uint64
	// EventsDelivered and EventsDropped count events.
	EventsDelivered, EventsDropped uint64
	// Writes counts Write calls; WriteErrors those that failed.
	Writes, WriteErrors uint64
	// LastWriteLatency and MaxWriteLatency of Write calls.
	LastWriteLatency, MaxWriteLatency time.Duration
	// Lag is how many published samples the output has not read yet.
	Lag uint64
	// Unflushed samples (part of Failed) were not delivered because the
	// output did not finish its final flush and Close within the engine's
	// shutdown timeout (a sink or reader that stopped taking data).
	Unflushed uint64
}

// pump moves records from every ring to one output. The cursors, batch and
// identity bookkeeping are owned by the pump's goroutine; stats are atomics.
type pump struct {
	e       *Engine
	name    string
	out     record.Output
	opts    PumpOptions
	cursors []*cursor
	evPos   uint64
	// evEnd, when set (position + 1), is where a replacement pump started
	// reading the event log: this pump reads nothing from there on.
	evEnd   atomic.Uint64
	sentGen []uint64 // per loop: Generation+1 of the identity last delivered
	batch   record.Batch
	seq     uint64
	held    bool // batch was refused (unavailable or retryable): offer it again before reading more
	// refused: the last Write was refused as unavailable or retryable
	// (the batch then held, or failed once its offers were spent).
	refused bool
	// abandoned: at stop, the output refused the last batch offered to it
	// (or asked for time, record.RetryAfter, that the stop does not have):
	// what it had not taken is counted as failed (abandon) and nothing
	// more is written to it (dropRest).
	abandoned bool
	offers    int // Writes of the held batch that failed as retryable
	// heldKind is the kind of the last refusal of the held batch.
	heldKind record.ErrorKind
	// holdUntil: the output's retry hint (record.RetryAfterOf) of the last
	// refusal; the held batch is not offered before it.
	holdUntil time.Time
	// keep is Select's verdict per MetricID (false past the catalog's
	// end); nil when there is no Select and every sample passes.
	keep []bool

	stopCh   chan struct{}
	stopOnce sync.Once
	// barrier, when set before stop (Engine.Run with AfterFinalFlush),
	// holds a stopped pump between its samples' final flush (it closes
	// drained) and its last events' flush and Close (once barrier is
	// closed).
	barrier, drained chan struct{}
	// finishCtx, set with barrier, bounds the output's Finish
	// (record.Finisher) between the final flush and drained.
	finishCtx context.Context
	// wgDone releases the engine's wait for this pump: when it ends, or
	// when it is given up after a removal.
	wgDone   sync.Once
	done     chan struct{}
	closeErr error

	lastDropLog time.Time

	// acctMu is held by the pump's goroutine while it accounts a Write's
	// result, and by giveUp, so that an output given up at shutdown is
	// counted once: by giveUp, never again by a Write that returns late.
	acctMu sync.Mutex
	gaveUp atomic.Bool

	published, read, dropped, filtered, delivered, failed atomic.Uint64
	pending, retries                                      atomic.Uint64
	evDelivered, evDropped, writes, writeErrors, lag      atomic.Uint64
	lastLatency, maxLatency                               atomic.Int64
	unflushed                                             atomic.Uint64

	// The counters of the pumps this one replaced: inhPrev while the
	// replaced pump may still flush, then inhBase, its final counters
	// (settle). Guarded by inhMu.
	inhMu   sync.Mutex
	inhPrev *pump
	inhBase OutputStats
}

func newPump(e *Engine, name string, out record.Output, opts PumpOptions) *pump {
	return newPumpReplacing(e, name, out, opts, nil)
}

// newPumpReplacing makes a pump whose lanes take old's place in every ring
// (ring.Swap), or new lanes when old is nil.
func newPumpReplacing(e *Engine, name string, out record.Output, opts PumpOptions, old *pump) *pump {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = record.DefaultWriteTimeout
	}
	pos := e.events.position()
	if old != nil {
		pos = e.events.handOver(&old.evEnd)
	}
	p := &pump{e: e, name: name, out: out, opts: opts, evPos: pos,
		sentGen: make([]uint64, len(e.loops)), stopCh: make(chan struct{}), done: make(chan struct{})}
	now, stuck := e.cfg.Clock.Now().UnixNano(), int64(stuckAfter(opts))
	for i, l := range e.loops {
		var c *cursor
		if old != nil {
			c = l.ring.Swap(old.cursors[i])
		} else {
			c = l.ring.NewCursor()
		}
		c.stuckAfter.Store(stuck)
		c.ackedAt.Store(now)
		p.cursors = append(p.cursors, c)
	}
	if opts.Select != nil {
		p.keep = selection(e.cfg.Catalog, opts.Select)
	}
	p.batch.Samples = make([]record.Sample, 0, opts.MaxBatch)
	p.inhPrev = old
	return p
}

// selection asks sel once about every metric of cat and returns the
// verdicts indexed by MetricID, so that a pump filters each sample with one
// index instead of a catalog lookup and a call.
func selection(cat *catalog.Catalog, sel func(*catalog.Metric) bool) []bool {
	keep := make([]bool, cat.Len())
	for _, m := range cat.All() {
		keep[m.ID] = sel(&m)
	}
	return keep
}

// settle freezes the counters inherited from the replaced pump once it has
// stopped.
func (p *pump) settle() {
	p.inhMu.Lock()
	defer p.inhMu.Unlock()
	if p.inhPrev != nil {
		p.inhBase, p.inhPrev = p.inhPrev.snapshot(), nil
	}
}

// inherited returns the counters of the pumps p replaced.
func (p *pump) inherited() OutputStats {
	p.inhMu.Lock()
	defer p.inhMu.Unlock()
	if p.inhPrev != nil {
		return p.inhPrev.snapshot()
	}
	return p.inhBase
}

// detach removes the pump's lanes from the rings.
func (p *pump) detach() {
	for i, l := range p.e.loops {
		l.ring.Detach(p.cursors[i])
	}
}

func (p *pump) stop() { p.stopOnce.Do(func() { close(p.stopCh) }) }

func (p *pump) run(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stopCh:
			p.refused = false // only a refusal at stop counts below
			p.flushAll(ctx)
			// An unavailable output gets up to WriteTimeout (at most half
			// the engine's shutdown timeout) to come back before what it
			// has not taken is given up. A batch refused as retryable is
			// not offered again: the process is stopping.
			wait := min(p.opts.WriteTimeout, p.e.cfg.ShutdownTimeout/2)
			for deadline := time.Now().Add(wait); p.held && p.heldKind == record.KindUnavailable && !p.gaveUp.Load() && time.Now().Before(deadline); {
				time.Sleep(min(p.opts.FlushInterval, 50*time.Millisecond))
				p.flushAll(ctx)
			}
			// An output that has not taken the last batch offered to it at
			// stop is unavailable: a Write that returned in time is what
			// says so, a slow one that succeeds is not. (One still inside
			// its Write when the shutdown timeout ends is stuck: giveUp.)
			p.abandoned = p.held || p.refused
			p.abandon()
			if p.barrier != nil {
				p.finish()
				close(p.drained)
				<-p.barrier
			}
			// The events emitted at the barrier (final self-metrics): to an
			// output that refused its last batch they are counted as
			// dropped, not written (dropRest).
			if p.abandoned {
				p.dropRest()
			} else if p.barrier != nil {
				p.flushAll(ctx)
				p.abandon()
			}
			p.closeErr = p.out.Close()
			return
		case <-t.C:
			p.flushAll(ctx)
		}
	}
}

// finish lets the output hand on what it still holds and bring its own
// counters up to date (record.Finisher) before the final statistics are
// read: within WriteTimeout, and only as long as the engine waits for the
// final flush (finishCtx). What it could not hand on, its Close still
// tries to.
func (p *pump) finish() {
	if p.gaveUp.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(p.finishCtx, p.opts.WriteTimeout)
	defer cancel()
	if err := record.Finish(ctx, p.out); err != nil {
		p.e.log.Debug("output did not finish handing on what it holds before the final statistics; its close goes on trying",
			"output", p.name, "err", err)
	}
}

// flushAll moves everything the rings and the event log hold to the output,
// in batches of at most MaxBatch samples.
//
// A batch the output refused with record.ErrUnavailable is held: the next flush
// offers it again first and reads nothing more until it goes through.
func (p *pump) flushAll(ctx context.Context) {
	if p.gaveUp.Load() {
		return
	}
	b := &p.batch
	if p.held && time.Now().Before(p.holdUntil) {
		p.account(0, 0) // the output asked for time (record.RetryAfter)
		return
	}
	if p.held && !p.write(ctx) {
		p.account(0, 0)
		return
	}
	for i, l := range p.e.loops {
		// A GPU that has not answered since the start has no UUID or name
		// yet: the outputs first hear of it when it answers, with its
		// identity (its lost event names it by index meanwhile).
		if id := l.identity.Load(); p.sentGen[i] != id.Generation+1 && id.UUID != "" {
			b.Devices = append(b.Devices, *id)
		}
	}
	var evDropped uint64
	b.Events, p.evPos, evDropped = p.e.events.read(p.evPos, b.Events, &p.evEnd)
	p.evDropped.Add(evDropped)

	var read, filtered uint64
	for _, c := range p.cursors {
		for {
			if len(b.Samples) == p.opts.MaxBatch {
				ok := p.write(ctx)
				p.account(read, filtered) // keep stats fresh during a long backlog
				read, filtered = 0, 0
				if !ok {
					return // held: retried on the next flush
				}
				p.acknowledge()
			}
			start := len(b.Samples)
			n := c.Read(b.Samples[start:p.opts.MaxBatch])
			if n == 0 {
				break
			}
			read += uint64(n)
			kept, f := p.selectIn(b.Samples[start : start+n])
			b.Samples = b.Samples[:start+len(kept)]
			filtered += f
		}
	}
	if p.write(ctx) {
		p.acknowledge()
	}
	p.account(read, filtered)
}

// selectIn moves the samples of s that Select passes to its front and
// returns them, with how many it filtered out.
func (p *pump) selectIn(s []record.Sample) (kept []record.Sample, filtered uint64) {
	keep := p.keep
	if keep == nil {
		return s, 0
	}
	kept = s[:0]
	for _, x := range s {
		if int(x.Metric) < len(keep) && keep[x.Metric] {
			kept = append(kept, x)
		}
	}
	return kept, uint64(len(s) - len(kept))
}

// account publishes the cursors' accounting to the stats atomics. read and
// filtered are the samples read and filtered since the last call.
func (p *pump) account(read, filtered uint64) {
	p.acctMu.Lock()
	defer p.acctMu.Unlock()
	if !p.gaveUp.Load() {
		p.accountLocked(read, filtered)
	}
}

// refresh brings Published, Dropped and Lag up to the cursors' positions
// now, from any goroutine (Stats between flushes show them as of the last
// flush otherwise).
func (p *pump) refresh() {
	p.acctMu.Lock()
	defer p.acctMu.Unlock()
	if p.gaveUp.Load() {
		return
	}
	pub, drop, lag := p.cursorTotals()
	p.published.Store(pub)
	p.dropped.Store(drop)
	p.lag.Store(lag)
}

// cursorTotals sums what the output's cursors saw published, dropped and
// still have to read.
func (p *pump) cursorTotals() (pub, drop, lag uint64) {
	for _, c := range p.cursors {
		pub += c.Published()
		drop += c.Dropped()
		lag += c.Lag()
	}
	return pub, drop, lag
}

// accountLocked is account with acctMu held.
func (p *pump) accountLocked(read, filtered uint64) {
	pub, drop, lag := p.cursorTotals()
	p.read.Add(read)
	p.filtered.Add(filtered)
	prevDrop := p.dropped.Swap(drop)
	p.published.Store(pub)
	p.lag.Store(lag)
	if drop > prevDrop && time.Since(p.lastDropLog) >= dropLogEvery {
		p.lastDropLog = time.Now()
		p.e.log.Warn("output lagging: its ring lane was full, the newest samples were dropped", "output", p.name,
			"dropped_total", drop, "lag", lag)
	}
}

// abandon runs when the pump stops with a batch still held: that batch and
// whatever the rings still hold for this output are counted as read and
// failed, so the accounting stays exact.
func (p *pump) abandon() {
	p.acctMu.Lock()
	defer p.acctMu.Unlock()
	if !p.held || p.gaveUp.Load() {
		return
	}
	b := &p.batch
	p.held, p.offers = false, 0
	p.pending.Store(0)
	n := uint64(len(b.Samples))
	p.evDropped.Add(uint64(len(b.Events)))
	// Events published while the batch was held, up to where a
	// replacement took over (a removed output's end is now: none count).
	if e := p.evEnd.Load(); e != 0 && e-1 > p.evPos {
		p.evDropped.Add(e - 1 - p.evPos)
		p.evPos = e - 1
	}
	b.Reset()
	p.failed.Add(n)
	if failed := n + p.failRingsLocked(); failed > 0 {
		p.e.log.Warn("output unavailable at stop; held samples dropped", "output", p.name, "samples", failed)
	}
}

// failRingsLocked, with acctMu held, reads what the rings still hold for
// this output and counts it as read and failed (what Select passes) or
// filtered, so the accounting stays exact; it returns the samples counted
// failed. An output that took the held batch's samples although it refused
// the batch (an aggregate) takes these too (record.Absorber): its own
// counters then cover every sample the pump counts as failed.
func (p *pump) failRingsLocked() uint64 {
	ab, _ := p.out.(record.Absorber)
	var read, filtered uint64
	buf := p.batch.Samples[:cap(p.batch.Samples)]
	for _, c := range p.cursors {
		for k := c.Read(buf); k > 0; k = c.Read(buf) {
			read += uint64(k)
			kept, f := p.selectIn(buf[:k])
			filtered += f
			if ab != nil && len(kept) > 0 {
				ab.Absorb(kept)
			}
		}
	}
	p.failed.Add(read - filtered)
	p.accountLocked(read, filtered)
	p.acknowledge() // failed and counted: taken
	return read - filtered
}

// dropRest takes the place of the final flush for a pump whose output
// refused the last batch offered to it at stop (unavailable, or a Write
// that timed out: see run) and has taken nothing since. The
// events published since — the final self-metrics emitted at the barrier,
// and those published while the batch was held — are counted as dropped,
// and anything the rings still hold as failed, instead of being written: a
// sink that answers only by timing out would otherwise keep the stop
// waiting past the shutdown timeout for records it would refuse anyway.
func (p *pump) dropRest() {
	p.acctMu.Lock()
	defer p.acctMu.Unlock()
	if p.gaveUp.Load() {
		return
	}
	b := &p.batch
	var lost uint64
	b.Events, p.evPos, lost = p.e.events.read(p.evPos, b.Events[:0], &p.evEnd)
	events := lost + uint64(len(b.Events))
	p.evDropped.Add(events)
	b.Reset()
	samples := p.failRingsLocked()
	if events+samples > 0 {
		p.e.log.Warn("output unavailable at stop; final events dropped, not written", "output", p.name,
			"events", events, "samples", samples)
	}
}

// giveUp is called by the engine, from its own goroutine, when the pump has
// not finished its final flush and Close within the shutdown timeout (its
// output is blocked in Write or Close). Everything published for this
// output that it has not delivered, failed or filtered yet — the batch in
// the blocked Write, a held batch, what the rings still hold — is counted
// as failed (and as Unflushed), so Published = Delivered + Failed +
// Filtered + Dropped holds at exit; whatever the blocked call does later is
// not counted again. It returns the samples so counted.
func (p *pump) giveUp() uint64 {
	p.acctMu.Lock()
	defer p.acctMu.Unlock()
	if p.gaveUp.Swap(true) {
		return 0
	}
	var pub, drop uint64
	for _, c := range p.cursors {
		pub += c.Published()
		drop += c.Dropped()
	}
	var lost uint64
	if done := drop + p.delivered.Load() + p.failed.Load() + p.filtered.Load(); pub > done {
		lost = pub - done
	}
	p.failed.Add(lost)
	p.unflushed.Store(lost)
	p.published.Store(pub)
	p.dropped.Store(drop)
	p.read.Store(pub - drop)
	p.lag.Store(0)
	p.pending.Store(0)
	return lost
}

// write hands the batch to the output if it holds anything, then resets it.
// It returns false when the output refused the batch as unavailable, or as
// retryable fewer than record.RetryableOffers times: the batch is then held (not
// reset) for the next flush. A permanent refusal, or the last retryable
// one, fails the batch.
func (p *pump) write(ctx context.Context) bool {
	b := &p.batch
	if b.Len() == 0 {
		return true
	}
	b.Seq = p.seq + 1
	wctx, cancel := context.WithTimeout(ctx, p.opts.WriteTimeout)
	start := time.Now()
	err := p.out.Write(wctx, b)
	lat := time.Since(start)
	cancel()
	p.acctMu.Lock()
	defer p.acctMu.Unlock()
	if p.gaveUp.Load() {
		return false // counted by giveUp; read nothing more
	}
	p.writes.Add(1)
	p.lastLatency.Store(int64(lat))
	if int64(lat) > p.maxLatency.Load() {
		p.maxLatency.Store(int64(lat))
	}
	kind := record.Classify(err)
	p.refused = kind == record.KindUnavailable || kind == record.KindRetryable
	if kind == record.KindRetryable {
		p.offers++
	}
	if kind == record.KindUnavailable || (kind == record.KindRetryable && p.offers < record.RetryableOffers) {
		p.retries.Add(1)
		p.heldKind = kind
		p.holdUntil = time.Time{}
		if hint, ok := record.RetryAfterOf(err); ok {
			p.holdUntil = time.Now().Add(min(hint, record.MaxRetryAfter))
		}
		if !p.held {
			p.held = true
			p.pending.Store(uint64(len(b.Samples)))
			p.e.log.Debug("output refused a batch; held for retry", "output", p.name, "samples", len(b.Samples),
				"kind", kind, "err", err)
		}
		return false
	}
	p.offers = 0
	if p.held {
		p.held = false
		p.pending.Store(0)
	}
	// The batch is done with, delivered or failed: the next one is a new
	// batch and gets a new Seq (an output that sees the same Seq again
	// takes it for this batch offered again).
	p.seq++
	if err != nil {
		p.writeErrors.Add(1)
		p.failed.Add(uint64(len(b.Samples)))
		p.evDropped.Add(uint64(len(b.Events)))
		if errs := p.writeErrors.Load(); errs == 1 || time.Since(p.lastDropLog) >= dropLogEvery {
			p.lastDropLog = time.Now()
			p.e.log.Warn("output write failed; batch dropped", "output", p.name, "samples", len(b.Samples),
				"kind", kind, "write_errors_total", errs, "err", err)
		}
	} else {
		p.delivered.Add(uint64(len(b.Samples)))
		p.evDelivered.Add(uint64(len(b.Events)))
		for _, d := range b.Devices {
			for i, l := range p.e.loops {
				if int(l.index) == d.Index {
					p.sentGen[i] = d.Generation + 1
				}
			}
		}
	}
	b.Reset()
	return true
}

func (p *pump) snapshot() OutputStats {
	b := p.inherited()
	return OutputStats{Name: p.name, Published: b.Published + p.published.Load(), Read: b.Read + p.read.Load(),
		Dropped: b.Dropped + p.dropped.Load(), Filtered: b.Filtered + p.filtered.Load(),
		Delivered: b.Delivered + p.delivered.Load(), Failed: b.Failed + p.failed.Load(), Pending: p.pending.Load(),
		Retries: b.Retries + p.retries.Load(), EventsDelivered: b.EventsDelivered + p.evDelivered.Load(),
		EventsDropped: b.EventsDropped + p.evDropped.Load(), Writes: b.Writes + p.writes.Load(),
		WriteErrors: b.WriteErrors + p.writeErrors.Load(), LastWriteLatency: time.Duration(p.lastLatency.Load()),
		MaxWriteLatency: max(b.MaxWriteLatency, time.Duration(p.maxLatency.Load())), Lag: p.lag.Load(),
		Unflushed: b.Unflushed + p.unflushed.Load()}
}
