package agent

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/backoff"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// Delays between start attempts of an output that could not start
// (Options.StartRetryMin and StartRetryMax when set).
const (
	DefaultStartRetryMin = time.Second
	DefaultStartRetryMax = time.Minute
)

// pendingOutput is an output whose block could not be built: it is retried
// with backoff while the other outputs run. Guarded by Agent.mu; a retry
// builds outside the lock and installs the result only if the entry is
// still the same pointer (a reload that changes or removes the block
// replaces or deletes the entry).
type pendingOutput struct {
	block    *appconfig.Output
	cfg      *appconfig.Config // the config the block came from (file, host, global tags)
	err      error             // the last attempt's error
	failures uint64            // failed attempts since the block was configured
	delay    time.Duration     // before the next attempt
	next     time.Time         // when the next attempt is due
	// published0 is the engine's published samples when the block was
	// configured: what was published since never reached this output.
	published0 uint64
	// held, for a block with a disk buffer, stands in for the output
	// while it cannot be built: its pump, aggregation and buffer run
	// (a.running has the block), so what is published meanwhile is held
	// on disk and delivered once it starts. heldAt is the engine's
	// published samples when the holding began (missed before it).
	held   *heldOutput
	heldAt uint64
	// missedBefore is what the block's earlier versions missed (a reload
	// changed it while it had not started): published0 is then the
	// reload's.
	missedBefore uint64
}

// missed returns the samples published while p's output had not started
// and nothing held them for it (published: the engine's total now).
func (p *pendingOutput) missed(published uint64) uint64 {
	if p.held != nil {
		published = p.heldAt
	}
	return p.missedBefore + published - min(published, p.published0)
}

// startedLate records that p's output started, its pump attached now (a
// retry's) or when it was held (a held block's pump ran since): from then
// on its missed_not_started is what it missed before its pump was
// attached, fixed. a.mu held.
func (a *Agent) startedLate(p *pendingOutput) {
	delete(a.pending, p.block.Name)
	// healthEvents counts published - (lateStart + what the pump saw since
	// it was attached): the samples published before the attachment, less
	// lateStart, which makes that p.missed at the attachment.
	a.lateStart[p.block.Name] = p.published0 - min(p.published0, p.missedBefore)
}

// heldOutput is the innermost output of a disk-buffered block whose
// output could not be built: until set hands it the built output, Write
// refuses every batch as unavailable, so that the buffer keeps it (within
// buffer_max_bytes, the oldest dropped and counted at the cap) and offers
// it again. Write and Close come from the buffer's goroutine, set from the
// retry loop.
type heldOutput struct {
	mu     sync.Mutex
	out    record.Output
	err    error // why the output has not started
	closed bool
}

func (h *heldOutput) current() (record.Output, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.out, h.err
}

// set hands h the built output; false (out not taken) after Close.
func (h *heldOutput) set(out record.Output) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.out = out
	return true
}

// setErr records the newest reason the output has not started.
func (h *heldOutput) setErr(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

func (h *heldOutput) Write(ctx context.Context, b *record.Batch) error {
	out, err := h.current()
	if out == nil {
		return record.Unavailable(fmt.Errorf("output has not started: %w", err))
	}
	return out.Write(ctx, b)
}

func (h *heldOutput) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	if h.out != nil {
		return h.out.Close()
	}
	return nil
}

// Finish passes on to the started output (record.Finisher); an output
// not started has nothing to finish.
func (h *heldOutput) Finish(ctx context.Context) error {
	if out, _ := h.current(); out != nil {
		return record.Finish(ctx, out)
	}
	return nil
}

// ReportStats passes on the started output's counters.
func (h *heldOutput) ReportStats(dst []record.Field) []record.Field {
	if out, _ := h.current(); out != nil {
		return record.ReportStats(out, dst)
	}
	return dst
}

// hold starts holding for p (a pending block with a disk buffer): its
// wrappers around a heldOutput, attached to the engine. It reports whether
// it did; a block without a disk buffer, or whose wrappers cannot be built
// either (the buffer's directory, say), is not held. a.mu held or not yet
// shared; attach adds the built output to the engine (New attaches later).
func (a *Agent) hold(p *pendingOutput, attach bool) (builtOutput, bool) {
	if p.held != nil || p.block.Buffer.Kind != "disk" {
		return builtOutput{}, false
	}
	h := &heldOutput{err: p.err}
	b, err := a.wrap(p.cfg, p.block, h)
	if err != nil {
		a.log.Debug("output not held while it cannot start", "output", p.block.Name, "err", err)
		return builtOutput{}, false
	}
	if attach {
		if err := a.eng.AddOutput(p.block.Name, b.out, p.block.PumpOptions()); err != nil {
			b.out.Close()
			return builtOutput{}, false
		}
		a.running[p.block.Name] = p.block
		a.setBuffer(b)
	}
	p.held, p.heldAt = h, a.publishedSamples()
	a.log.Info("output not started: what is published for it is held in its disk buffer until it starts",
		"output", p.block.Name, "buffer_dir", p.block.Buffer.Dir, "buffer_max_bytes", p.block.Buffer.MaxBytes)
	return b, true
}

// publishedSamples returns the samples every device published so far.
func (a *Agent) publishedSamples() uint64 {
	var n uint64
	for _, d := range a.eng.Stats().Devices {
		n += d.Published
	}
	return n
}

// defer records that o could not be built from cfg at start (err) and logs
// it once; the retry loop tries again after the backoff. a.mu held or not
// yet shared.
func (a *Agent) deferStart(cfg *appconfig.Config, o *appconfig.Output, err error) {
	p := &pendingOutput{block: o, cfg: cfg, err: err, failures: 1, delay: a.retryMin(), published0: a.publishedSamples()}
	p.next = time.Now().Add(p.delay)
	a.pending[o.Name] = p
	a.log.Error("output could not start; the other outputs run and it is retried with backoff (run --strict exits instead)",
		"output", o.Name, "err", err)
}

func (a *Agent) retryMin() time.Duration {
	if a.opts.StartRetryMin > 0 {
		return a.opts.StartRetryMin
	}
	return DefaultStartRetryMin
}

func (a *Agent) retryMax() time.Duration {
	return max(cmp.Or(a.opts.StartRetryMax, DefaultStartRetryMax), a.retryMin())
}

// NotStarted returns the configured outputs that have not started (their
// block could not be built, at start or by a reload's retry), with the last
// attempt's error.
func (a *Agent) NotStarted() map[string]error {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[string]error, len(a.pending))
	for name, p := range a.pending {
		m[name] = p.err
	}
	return m
}

// retryLoop retries the outputs that could not start, each when its
// backoff is due, until ctx ends.
func (a *Agent) retryLoop(ctx context.Context) {
	for ctx.Err() == nil {
		a.mu.Lock()
		var due *pendingOutput
		var wait time.Duration
		now := time.Now()
		for _, name := range slices.Sorted(maps.Keys(a.pending)) {
			p := a.pending[name]
			d := p.next.Sub(now)
			if d <= 0 {
				due = p
				break
			}
			if wait == 0 || d < wait {
				wait = d
			}
		}
		a.mu.Unlock()
		if due != nil {
			a.retry(ctx, due)
			continue
		}
		var tick <-chan time.Time
		var t *time.Timer
		if wait > 0 {
			t = time.NewTimer(wait)
			tick = t.C
		}
		select {
		case <-ctx.Done():
		case <-a.retryKick:
		case <-tick:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// retry makes one start attempt of p. The build runs without the lock (a
// plugin's start may take seconds); its result is installed only if p is
// still the pending entry of its output.
func (a *Agent) retry(ctx context.Context, p *pendingOutput) {
	name := p.block.Name
	if p.held != nil {
		a.retryHeld(ctx, p)
		return
	}
	built, err := a.build(p.cfg, []*appconfig.Output{p.block})
	published := a.publishedSamples() // before the lock: the engine's own locks come first
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending[name] != p || ctx.Err() != nil {
		if err == nil {
			built[0].out.Close()
		}
		return
	}
	if err != nil {
		defer a.hold(p, true)
	}
	if err == nil {
		b := built[0]
		if err = a.eng.AddOutput(name, b.out, b.block.PumpOptions()); err == nil {
			a.startedLate(p)
			a.running[name] = b.block
			a.setBuffer(b)
			// What was published while it could not start never reaches
			// it: counted (output_health missed_not_started).
			a.log.Info("output started", "output", name, "failed_attempts", p.failures,
				"samples_missed_meanwhile", p.missed(published))
			return
		}
		b.out.Close()
	}
	a.retryFailed(p, err)
}

// retryHeld makes one start attempt of a held output: only the output
// itself is built; its wrappers run already.
func (a *Agent) retryHeld(ctx context.Context, p *pendingOutput) {
	name := p.block.Name
	out, err := a.buildInner(p.cfg, p.block)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending[name] != p || ctx.Err() != nil || (err == nil && !p.held.set(out)) {
		if err == nil {
			out.Close()
		}
		return
	}
	if err == nil {
		a.startedLate(p)
		a.log.Info("output started; what was held for it in its disk buffer is delivered now", "output", name,
			"failed_attempts", p.failures, "samples_missed_before_holding", p.missed(0))
		return
	}
	p.held.setErr(err)
	a.retryFailed(p, err)
}

// retryFailed records p's failed start attempt (err) and its next one.
func (a *Agent) retryFailed(p *pendingOutput, err error) {
	name := p.block.Name
	same := p.err != nil && p.err.Error() == err.Error()
	p.err, p.failures = err, p.failures+1
	p.delay = backoff.Delay(a.retryMin(), a.retryMax(), int(p.failures-1))
	p.next = time.Now().Add(p.delay)
	if same {
		a.log.Debug("output still cannot start; retrying", "output", name, "failed_attempts", p.failures, "next_in", p.delay, "err", err)
	} else {
		a.log.Error("output still cannot start, for another reason; retrying", "output", name, "failed_attempts", p.failures, "next_in", p.delay, "err", err)
	}
}

// kickRetry wakes the retry loop (a reload changed the pending outputs).
func (a *Agent) kickRetry() {
	select {
	case a.retryKick <- struct{}{}:
	default:
	}
}

// reloadPending decides, for a reload to cfg, what becomes of the outputs
// that have not started: a block that is still configured and unchanged
// keeps its place and backoff; a changed one is tried again at once with
// its new block; a removed one is forgotten. It returns the new pending set
// and the blocks it covers (the reload builds none of them itself). a.mu
// held; nothing is changed until the caller commits the result.
// published is the engine's published samples now: a changed block's
// missed_not_started goes on from its old block's.
func (a *Agent) reloadPending(cfg *appconfig.Config, envChanged bool, published uint64) (map[string]*pendingOutput, map[string]bool) {
	next := map[string]*pendingOutput{}
	covered := map[string]bool{}
	for _, o := range cfg.Outputs {
		p, ok := a.pending[o.Name]
		if !ok {
			continue
		}
		covered[o.Name] = true
		if !envChanged && p.block.Same(o) {
			next[o.Name] = p
			continue
		}
		// What the old block missed stays missed; its held buffer (if
		// any) keeps what it held, replayed by the new block's. From now
		// until the new block is held or started, samples are missed.
		next[o.Name] = &pendingOutput{block: o, cfg: cfg, err: p.err, failures: p.failures,
			delay: a.retryMin(), next: time.Now(), published0: published, missedBefore: p.missed(published)}
	}
	return next, covered
}

// healthEvents returns one self-metrics event (scope "output_health") per
// configured output, in name order: failing is 1 while the output has not
// started or its plugin is in a crash storm (plugin_failing in detail),
// started whether it runs, start_failures the failed start attempts of a
// block that has not started, buffer_degraded 1 while its disk buffer
// cannot write to disk (it holds new batches in memory; failing too),
// missed_not_started the samples published (by st's devices) while the
// output had not started, which never reach it. a.mu held.
func (a *Agent) healthEvents(now time.Time, detail []record.Event, st sampler.Stats) []record.Event {
	var published uint64
	for _, d := range st.Devices {
		published += d.Published
	}
	attached := map[string]uint64{} // published since each pump was attached
	for _, o := range st.Outputs {
		attached[o.Name] = o.Published
	}
	ns := now.UnixNano()
	stormy := map[string]bool{}
	for _, ev := range detail {
		for _, f := range ev.Fields {
			if f.Key == "plugin_failing" && f.Value != 0 {
				stormy[attr(ev, "output")] = true
			}
		}
	}
	names := slices.Sorted(maps.Keys(a.running))
	for name := range a.pending {
		if _, ok := a.running[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var evs []record.Event
	for _, name := range names {
		p := a.pending[name]
		var failures, missed uint64
		if p != nil {
			failures = p.failures
			missed = p.missed(published)
		} else if p0, late := a.lateStart[name]; late {
			// Published between the block's configuration and its pump's
			// attachment: all published since, less what the pump saw.
			missed = published - min(published, p0+attached[name])
		}
		degraded := false
		if b := a.buffers[name]; b != nil && (p == nil || p.held != nil) {
			degraded = b.Stats().Degraded
		}
		evs = append(evs, record.Event{Kind: record.EventSelf, Device: -1, StartNS: ns, EndNS: ns,
			Attrs: []record.Attr{{Key: "scope", Value: "output_health"}, {Key: "output", Value: name}},
			Fields: []record.Field{intField("failing", b2u(p != nil || stormy[name] || degraded)), intField("started", b2u(p == nil)),
				intField("start_failures", failures), intField("buffer_degraded", b2u(degraded)),
				intField("missed_not_started", missed), intField("held_not_started", b2u(p != nil && p.held != nil))}})
	}
	return evs
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// startHealth sends the outputs' health once at the start of a run when one
// of them could not start (and self-metrics are on), so that a health
// check sees it before the first stats interval ends.
func (a *Agent) startHealth() {
	if _, send := a.statsSettings(); !send {
		return
	}
	st := a.eng.Stats()
	a.mu.Lock()
	var evs []record.Event
	if len(a.pending) > 0 {
		evs = a.healthEvents(time.Now(), nil, st)
	}
	a.mu.Unlock()
	for _, ev := range evs {
		a.eng.Emit(ev)
	}
}
