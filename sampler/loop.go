package sampler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// DeviceState is where a device loop stands.
type DeviceState uint32

// Device states: ok → lost → recovering → ok, per device, by UUID; hung
// while one driver call has not returned within Config.CallTimeout.
const (
	DeviceOK DeviceState = iota
	// DeviceLost: the device answered "gpu lost"; it is probed again with
	// backoff.
	DeviceLost
	// DeviceRecovering: a probe is re-acquiring the device by UUID.
	DeviceRecovering
	// DeviceHung: a driver call on the device is overdue.
	DeviceHung
)

func (s DeviceState) String() string {
	switch s {
	case DeviceOK:
		return "ok"
	case DeviceLost:
		return "lost"
	case DeviceRecovering:
		return "recovering"
	case DeviceHung:
		return "hung"
	}
	return fmt.Sprintf("state(%d)", uint32(s))
}

// maxLostBackoff caps the driver event watch's retry backoff as a multiple
// of Config.LostRetryInterval.
const maxLostBackoff = 12

// bufferState is the drain state of one sample-buffer type on one device.
type bufferState struct {
	typ       catalog.BufferType
	metric    catalog.MetricID
	supported bool
	cursor    uint64        // newest raw timestamp delivered
	depth     int           // largest drain seen: the buffer's depth estimate
	capacity  int           // the backend's reported capacity; 0 unknown
	periodUS  uint64        // measured sample period
	interval  time.Duration // this buffer's drain interval
	// limit bounds interval: the freshness limit of the buffer's class
	// (Config.DrainInterval or Config.SecondaryDrainInterval), halved by
	// each suspected loss down to MinDrainInterval.
	limit time.Duration
	// spanned: the interval has been set from the buffer's span once.
	spanned bool
	// resumed: the cursor comes from before a gap in sampling (the last
	// run, or a lost device) and no drain has delivered since: samples
	// missing after it were taken while nothing drained, not because the
	// interval is too long, so they are counted but do not shorten it.
	resumed bool
	// emptyAtNS is when the engine last knew the buffer to hold nothing it
	// had not delivered, before it ever drained a sample: the last drain
	// that found it empty (an idle engine's buffer), or the start of a run
	// whose device did not answer. The first drain that finds samples
	// checks what the driver may have overwritten since.
	emptyAtNS int64
	// verify: the cursor was restored from the cursor store and no drain
	// has confirmed it yet; the first drain that finds nothing new checks
	// it against what the buffer holds (checkRestored).
	verify bool
	// drainedAt is when the buffer was last drained (engine clock), 0
	// before the first drain: a drain far later than its interval (a hung
	// call, a stalled loop) does not shorten the interval when it finds an
	// overrun.
	drainedAt time.Time
	next      time.Time
	// media: a video, JPEG or optical-flow engine's utilization buffer,
	// dry while its engine idles (see readDryMedia); dryRead is when its
	// metric may be point-read next (a RareInterval after the last drain
	// that found samples or the last point read), noDryRead set once the
	// device said it has no point read for it.
	media     bool
	dryRead   time.Time
	noDryRead bool
}

// deviceLoop samples one device. Everything but the atomics is owned by the
// loop's goroutine.
type deviceLoop struct {
	e        *Engine
	src      DeviceSource
	index    uint16
	ring     *ring
	identity atomic.Pointer[record.Device]
	// idMu serializes identity replacements (recovery, attribution); reads
	// stay lock-free through identity.
	idMu sync.Mutex
	// pids are the host PIDs of the newest process poll (attribution).
	pids atomic.Pointer[[]uint32]
	// procAttribution is each process's own attribution by host PID
	// (Engine.SetProcessAttribution), put on its process events.
	procAttribution atomic.Pointer[map[uint32]record.Attribution]
	tb              *timebase

	buffers  []*bufferState
	fastIDs  []catalog.MetricID
	fastOut  []Reading
	slowIDs  []catalog.MetricID
	slowOut  []Reading
	rareIDs  []catalog.MetricID // slow state marked Rare, read every RareInterval
	rareOut  []Reading
	gpmIDs   []catalog.MetricID // GPM profiling, read every GPMInterval
	gpmOut   []Reading
	pointID  []catalog.MetricID // utilization point read for idle GPUs
	pointOut []Reading
	// fbIDs are buffer metrics whose buffer the device does not support,
	// read with point queries at the field interval instead (marked
	// record.FlagPointRead).
	fbIDs []catalog.MetricID
	fbOut []Reading
	// dryIDs are the dry media buffers' metrics to point-read in this
	// round of drains (readDryMedia); dryAsk and dryOut its scratch.
	dryIDs, dryAsk []catalog.MetricID
	dryOut         []Reading

	raw []RawSample
	pub []record.Sample
	// heldSince is when flush began holding samples back (a burst bigger
	// than a lane); zero while none are held.
	heldSince time.Time
	// heldDepth is the most samples one drain from the start (cursor 0:
	// everything the buffer holds) of any of the device's buffers
	// returned: what a full buffer holds as measured (the driver's buffers
	// of one device are alike in depth; a reported capacity can overstate
	// it).
	heldDepth int

	// Per-process polling (ProcessSource); procs is nil when the source
	// cannot list processes, per-process sampling is off, or the device
	// said not supported.
	procs      ProcessSource
	procCursor uint64
	procBuf    []Process
	procFields []record.Field
	procAttrs  []record.Attr

	// Lost-device state: lostAt is when the device was found lost,
	// nextProbe when it is probed again (every LostRetryInterval from
	// lostAt). startErr is the error of the identity read at New when the
	// device did not answer: the loop then starts lost.
	lost      bool
	lostAt    time.Time
	nextProbe time.Time
	startErr  error
	restored  bool // the cursor store was asked
	// ack holds the cursors published and how far the outputs took them
	// (see ack.go).
	ack ackState

	// Watchdog: callStart is when the current driver call began (Unix ns, 0
	// when none is in flight) and callOp what it is; hung is set by the
	// engine's watchdog and cleared by the loop when the call returns.
	callStart atomic.Int64
	callOp    atomic.Pointer[string]
	hungFlag  atomic.Bool
	hungMu    sync.Mutex
	state     atomic.Uint32
	done      chan struct{}

	// counters, read by Stats from other goroutines
	drains, nothingNew, suspectedLosses, lostEstimate atomic.Uint64
	cursorsDiscarded, held                            atomic.Uint64
	pointReads, readErrors, published, fieldReads     atomic.Uint64
	hung, recoveries, probes                          atomic.Uint64
	abandoned                                         atomic.Bool
	processPolls, processesSeen                       atomic.Uint64
	pointFallbacks                                    atomic.Uint64
	newestNS                                          atomic.Int64
	clockKind                                         atomic.Uint32
	minDrainNS                                        atomic.Int64
}

func newDeviceLoop(e *Engine, src DeviceSource, id record.Device) *deviceLoop {
	l := &deviceLoop{e: e, src: src, index: uint16(id.Index), ring: newRing(e.cfg.RingSize), tb: newTimebase(e.cfg.Clock, e.host),
		done: make(chan struct{})}
	l.identity.Store(&id)
	cat := e.cfg.Catalog
	sel := func(m *catalog.Metric) bool { return e.cfg.Select == nil || e.cfg.Select(m) }
	for _, m := range cat.All() {
		if !sel(&m) {
			continue
		}
		switch m.Src.Kind {
		case catalog.FromBuffer:
			limit := e.cfg.SecondaryDrainInterval
			if slices.Contains(e.cfg.PrimaryBuffers, m.Src.Buffer) {
				limit = e.cfg.DrainInterval
			}
			// Drained at its freshness limit until its span is known.
			l.buffers = append(l.buffers, &bufferState{typ: m.Src.Buffer, metric: m.ID, supported: true,
				interval: limit, limit: limit, media: isMedia(m.Src.Buffer)})
		case catalog.FromField:
			if m.Rare {
				l.rareIDs = append(l.rareIDs, m.ID) // health counters: one batch per RareInterval
			} else {
				l.fastIDs = append(l.fastIDs, m.ID)
			}
		case catalog.FromQuery:
			if m.Rare {
				l.rareIDs = append(l.rareIDs, m.ID)
			} else {
				l.slowIDs = append(l.slowIDs, m.ID)
			}
		case catalog.FromGPM:
			l.gpmIDs = append(l.gpmIDs, m.ID)
		}
	}
	for _, id := range []catalog.MetricID{catalog.MetricUtilGPU, catalog.MetricUtilMemory} {
		if m, ok := cat.Get(id); ok && sel(&m) {
			l.pointID = append(l.pointID, id)
		}
	}
	l.fastOut = make([]Reading, len(l.fastIDs))
	l.slowOut = make([]Reading, len(l.slowIDs))
	l.rareOut = make([]Reading, len(l.rareIDs))
	l.gpmOut = make([]Reading, len(l.gpmIDs))
	l.pointOut = make([]Reading, len(l.pointID))
	l.raw = make([]RawSample, 0, 256)
	l.pub = make([]record.Sample, 0, 1024)
	l.minDrainNS.Store(int64(e.cfg.DrainInterval))
	if ps, ok := src.(ProcessSource); ok && e.cfg.ProcessInterval > 0 {
		l.procs = ps
	}
	return l
}

func (l *deviceLoop) run(ctx context.Context) {
	defer close(l.done)
	clk := l.e.cfg.Clock
	now := clk.Now()
	if l.startErr != nil {
		l.markLost(l.startErr, now, "device does not answer at start; probing it")
		// What the buffers take from now on is this run's to deliver: the
		// first drain after the device answers counts what was overwritten
		// before it.
		for _, b := range l.buffers {
			b.emptyAtNS = now.UnixNano()
		}
	}
	for _, b := range l.buffers {
		b.next = now
	}
	if !l.lost {
		l.askCapacity()
		l.restoreCursors()
	}
	nextField, nextSlow, nextRare, nextGPM, nextProc := now, now, now, now, now
	fieldEvery, slowEvery, rareEvery, gpmEvery := l.e.cfg.FieldInterval, l.e.cfg.SlowInterval, l.e.cfg.RareInterval, l.e.cfg.GPMInterval
	timer := clk.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			// Final drain: deliver what the buffers took since the last one.
			if !l.lost {
				l.drainDue(clk.Now(), true)
			}
			l.finalFlush()
			return
		case <-timer.C():
		}
		now = clk.Now()
		if l.lost {
			if l.flush(now) { // samples held from before the loss
				timer.Reset(min(MinDrainInterval, l.nextProbe.Sub(now)))
				if now.Before(l.nextProbe) {
					continue
				}
			}
			if now.Before(l.nextProbe) {
				timer.Reset(l.nextProbe.Sub(now))
				continue
			}
			l.retryLost(now)
			if l.lost {
				l.nextProbe = advance(l.nextProbe, l.probeInterval(now), now)
				timer.Reset(l.nextProbe.Sub(now))
				continue
			}
			// Recovered: drain at once from the kept cursors: the driver's
			// buffers still hold what they took while the device was lost,
			// as far back as their span reaches.
			l.askCapacity()
			l.restoreCursors()
			for _, b := range l.buffers {
				b.next = now
				b.resumed = b.cursor != 0
			}
			nextField, nextSlow = now, now
		}
		// Slow state first: it holds what outputs make tags of (pstate),
		// so the history a drain returns is tagged like what follows it,
		// from the first drain on.
		if len(l.slowIDs) > 0 && !now.Before(nextSlow) {
			l.readInto(l.slowIDs, l.slowOut, now, 0, &l.slowIDs, &l.slowOut)
			nextSlow = advance(nextSlow, slowEvery, now)
		}
		if !l.lost {
			l.drainDue(now, false)
		}
		if l.lost { // found lost just now: nothing but probes from here
			next := l.nextProbe
			if l.flush(now) {
				next = now.Add(MinDrainInterval)
			}
			timer.Reset(next.Sub(now))
			continue
		}
		if (len(l.fastIDs) > 0 || len(l.fbIDs) > 0) && !now.Before(nextField) {
			if len(l.fastIDs) > 0 {
				l.readInto(l.fastIDs, l.fastOut, now, 0, &l.fastIDs, &l.fastOut)
				l.fieldReads.Add(1)
			}
			if len(l.fbIDs) > 0 {
				l.readInto(l.fbIDs, l.fbOut, now, record.FlagPointRead, &l.fbIDs, &l.fbOut)
				l.pointReads.Add(1)
			}
			nextField = advance(nextField, fieldEvery, now)
		}
		if len(l.rareIDs) > 0 && !now.Before(nextRare) {
			l.readInto(l.rareIDs, l.rareOut, now, 0, &l.rareIDs, &l.rareOut)
			nextRare = advance(nextRare, rareEvery, now)
		}
		if len(l.gpmIDs) > 0 && !now.Before(nextGPM) {
			// One read of every GPM metric: one snapshot per interval.
			l.readInto(l.gpmIDs, l.gpmOut, now, 0, &l.gpmIDs, &l.gpmOut)
			nextGPM = advance(nextGPM, gpmEvery, now)
		}
		if l.procs != nil && !now.Before(nextProc) {
			l.pollProcesses(now)
			nextProc = advance(nextProc, l.e.cfg.ProcessInterval, now)
		}
		next := now.Add(time.Minute)
		if l.flush(now) {
			next = now.Add(MinDrainInterval) // held samples: publish more soon
		}
		if l.procs != nil && nextProc.Before(next) {
			next = nextProc
		}
		if len(l.slowIDs) > 0 && nextSlow.Before(next) {
			next = nextSlow
		}
		if len(l.rareIDs) > 0 && nextRare.Before(next) {
			next = nextRare
		}
		if (len(l.fastIDs) > 0 || len(l.fbIDs) > 0) && nextField.Before(next) {
			next = nextField
		}
		if len(l.gpmIDs) > 0 && nextGPM.Before(next) {
			next = nextGPM
		}
		for _, b := range l.buffers {
			if b.supported && b.next.Before(next) {
				next = b.next
			}
		}
		timer.Reset(next.Sub(clk.Now()))
	}
}

// restoreCursors sets the cursors of buffers not drained yet to what the
// cursor store saved for this GPU, once its UUID is known.
func (l *deviceLoop) restoreCursors() {
	st := l.e.cfg.Cursors
	uuid := l.identity.Load().UUID
	if st == nil || uuid == "" || l.restored {
		return
	}
	l.restored = true
	if ig, ok := st.(interface{ Ignored(uuid string) int }); ok {
		l.cursorsDiscarded.Add(uint64(ig.Ignored(uuid)))
	}
	saved := st.Load(uuid)
	n := 0
	now := l.e.cfg.Clock.Now()
	for _, b := range l.buffers {
		c, ok := saved[b.typ]
		if !ok || b.cursor != 0 {
			continue
		}
		if l.aheadOfNow(c, now) {
			l.discardCursor(b, c, "later than now")
			continue
		}
		b.cursor = c
		b.resumed = true
		b.verify = true
		n++
	}
	l.mark(false) // nothing published yet: the outputs need take nothing
	if n > 0 {
		l.e.log.Info("drain cursors restored from the last run", "device", l.index, "uuid", uuid, "buffers", n)
	}
}

// cursorSlack is how far a restored cursor may lie ahead of the engine's
// clock before it is taken for a cursor from a clock that has since been
// stepped back.
const cursorSlack = time.Second

// aheadOfNow reports whether raw driver timestamp c lies in the future of
// now, on the realtime clock or, for a boot-time-sized value, on the
// boot-time clock: no sample the driver takes for a while can pass it.
func (l *deviceLoop) aheadOfNow(c uint64, now time.Time) bool {
	raw := time.Duration(c) * time.Microsecond
	rt := time.Duration(now.UnixNano())
	if raw > rt/2 { // Unix time
		return raw > rt+cursorSlack
	}
	off, ok, step := l.e.host.offset(now)
	l.reportClockStep(step, now)
	return ok && raw > rt-time.Duration(off)+cursorSlack
}

// reportClockStep logs and emits (record.EventClockStep) a realtime clock
// step of step ns that this loop's look at the host offset re-anchored
// (0: none). The host offset hands a step to the one look that made it:
// reported here, it is reported once per host.
func (l *deviceLoop) reportClockStep(step int64, now time.Time) {
	if step == 0 {
		return
	}
	l.e.log.Warn("realtime clock stepped: boot-time driver timestamps re-anchored", "step", time.Duration(step))
	nowNS := now.UnixNano()
	l.e.Emit(record.Event{Kind: record.EventClockStep, Device: int(l.index), StartNS: nowNS, EndNS: nowNS,
		Message: "realtime clock stepped against the boot-time clock; driver timestamps re-anchored",
		Attrs:   []record.Attr{{Key: "step_ns", Value: strconv.FormatInt(step, 10)}, {Key: "scope", Value: "host"}}})
}

// discardCursor drops buffer b's restored cursor c, which cannot be right
// (why: later than now, or than the newest sample the buffer holds): the
// wall clock was stepped back since it was saved, or the state file was
// edited or copied. Trusting it would skip every sample until the driver's
// clock passes it; instead the buffer is drained as at a fresh start (its
// whole content delivered). Counted per device (DeviceStats.CursorsDiscarded),
// logged once per run.
func (l *deviceLoop) discardCursor(b *bufferState, c uint64, why string) {
	b.cursor, b.resumed, b.verify = 0, false, false
	l.cursorsDiscarded.Add(1)
	if l.e.cursorWarned.CompareAndSwap(false, true) {
		l.e.log.Warn("drain cursor from the last run discarded: it is "+why+" (wall clock stepped back, or state copied); the buffer is drained as at a fresh start",
			"device", l.index, "uuid", l.identity.Load().UUID, "buffer", b.typ.String(), "cursor_us", c)
	}
}

// checkRestored checks a restored cursor that a drain found nothing newer
// than: one drain from the start tells the newest sample the buffer holds.
// A cursor later than it is discarded and what the buffer holds is
// returned for delivery as at a fresh start; otherwise nothing is
// returned and the cursor stands.
func (l *deviceLoop) checkRestored(b *bufferState, now time.Time) []RawSample {
	b.verify = false
	l.enter(&opDrain)
	raw, err := l.src.Drain(b.typ, 0, l.raw[:0])
	l.exit()
	l.raw = raw[:0]
	l.drains.Add(1)
	if err != nil {
		if !errors.Is(err, ErrNothingNew) && !errors.Is(err, ErrNotSupported) {
			l.callFailed(err, now)
		}
		return nil
	}
	newest := uint64(0)
	for _, r := range raw {
		newest = max(newest, r.TimeUS)
	}
	l.heldDepth = max(l.heldDepth, len(raw))
	if len(raw) == 0 || newest >= b.cursor {
		return nil
	}
	l.discardCursor(b, b.cursor, "later than the newest sample the driver's buffer holds")
	return raw
}

// askCapacity asks the backend for each buffer's capacity it does not know
// yet.
func (l *deviceLoop) askCapacity() {
	capa, ok := l.src.(BufferCapacitor)
	if !ok {
		return
	}
	for _, b := range l.buffers {
		if b.capacity == 0 {
			l.enter(&opCapacity)
			b.capacity = capa.BufferCapacity(b.typ)
			l.exit()
		}
	}
}

// advance moves a schedule forward by one period, skipping missed ticks.
func advance(next time.Time, every time.Duration, now time.Time) time.Time {
	next = next.Add(every)
	if !next.After(now) {
		next = now.Add(every)
	}
	return next
}

// flush publishes what the loop collected (l.pub), oldest first. A burst
// bigger than an output's lane (a first drain of very deep buffers) is not
// offered whole, which would make every output drop most of it: it is
// published in steps of what the fullest lane has room for, the rest held
// back, before anything newer, and offered again on the next rounds, a
// MinDrainInterval apart (the loop calls flush again), until none is left.
// A lane whose output is stuck (no read for backlogHoldLimit) is not
// waited for, and at most maxHeldLanes lanes' worth is held: beyond that
// the oldest is published, and a lane without room drops it (counted), as
// it would without a backlog. It reports whether samples are held.
func (l *deviceLoop) flush(now time.Time) bool {
	if len(l.pub) == 0 {
		return false
	}
	n := len(l.pub)
	if capa := l.ring.Cap(); !l.heldSince.IsZero() || n > capa {
		if l.heldSince.IsZero() {
			l.heldSince = now
		}
		n = min(n, l.ring.Room(now, backlogHoldLimit))
		n = max(n, len(l.pub)-maxHeldLanes*capa)
	}
	l.publish(n)
	if len(l.pub) > 0 {
		return true
	}
	l.allOut()
	return false
}

// allOut notes that everything drained so far is published: no backlog is
// held, and the cursors to save move on once every output has taken it.
func (l *deviceLoop) allOut() {
	l.heldSince = time.Time{}
	l.mark(true)
}

// publish puts the first n samples of l.pub into the ring and keeps the
// rest held.
func (l *deviceLoop) publish(n int) {
	if n > 0 {
		out := l.pub[:n]
		l.ring.Publish(out...)
		l.published.Add(uint64(n))
		if o := l.e.cfg.Observer; o != nil {
			o.Observe(l.identity.Load(), out)
		}
		l.newestNS.Store(out[n-1].TimeNS)
	}
	l.pub = l.pub[:copy(l.pub, l.pub[n:])]
	l.held.Store(uint64(len(l.pub)))
}

// backlogHoldLimit: an output lane that has read nothing for this long is
// not waited for by a held backlog (see flush). A pump may spend this long
// in one Write before it gives up on it: a lane is not stuck before.
const backlogHoldLimit = record.DefaultWriteTimeout

// maxHeldLanes bounds a held backlog, in lanes' worth of samples.
const maxHeldLanes = 32

// finalFlush publishes everything at the end of the run: held samples go
// out as the outputs make room (the pumps outlive the loops and flush on
// the system clock, so the wait runs on it too, from the engine clock's
// now). The wait is part of the shutdown: after half the shutdown timeout
// what is still held is published at once, and the lanes of outputs that
// did not make room drop it (counted in their Dropped), so an output that
// reads slowly, not stuck, cannot hold up the stop.
func (l *deviceLoop) finalFlush() {
	from, start := l.e.cfg.Clock.Now(), time.Now()
	for l.flush(from.Add(time.Since(start))) {
		if time.Since(start) >= l.e.cfg.ShutdownTimeout/2 {
			l.publish(len(l.pub))
			l.allOut()
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// drainDue drains every supported buffer whose time has come (all of them
// when force is set).
func (l *deviceLoop) drainDue(now time.Time, force bool) {
	idle := false
	for _, b := range l.buffers {
		if l.lost {
			return
		}
		if !b.supported && b.media && !b.noDryRead && !force && !now.Before(b.dryRead) {
			// No buffer: the engine's point read every RareInterval.
			l.dryIDs = append(l.dryIDs, b.metric)
			b.dryRead = now.Add(l.e.cfg.RareInterval)
		}
		if !b.supported || (!force && now.Before(b.next)) {
			continue
		}
		empty := l.drain(b, now)
		if empty && b.typ == catalog.BufferGPUUtil {
			idle = true
		}
		switch {
		case !b.media:
		case !empty:
			// Samples: the engine works; a point read is due only after a
			// whole RareInterval without any.
			b.dryRead = now.Add(l.e.cfg.RareInterval)
		case !b.noDryRead && !force && !now.Before(b.dryRead):
			l.dryIDs = append(l.dryIDs, b.metric)
			b.dryRead = now.Add(l.e.cfg.RareInterval)
		}
		b.next = advance(b.next, b.interval, now)
	}
	if idle && len(l.pointID) > 0 && !force {
		// An idle GPU's utilization buffers run dry: one marked point read
		// keeps dashboards at 0% instead of a gap.
		l.readInto(l.pointID, l.pointOut, now, record.FlagPointRead, &l.pointID, &l.pointOut)
		l.pointReads.Add(1)
	}
	if len(l.dryIDs) > 0 && !l.lost {
		l.readDryMedia(now)
	}
}

// isMedia reports whether t is a video, JPEG or optical-flow engine's
// utilization buffer.
func isMedia(t catalog.BufferType) bool {
	switch t {
	case catalog.BufferEncoderUtil, catalog.BufferDecoderUtil, catalog.BufferJPEGUtil, catalog.BufferOFAUtil:
		return true
	}
	return false
}

// readDryMedia point-reads the metrics of the media buffers that drained
// dry (l.dryIDs), marked record.FlagPointRead: the engines idle on most
// GPUs, and their buffers then hold nothing, so the point read (the
// engine's current utilization, usually 0) keeps a dashboard at 0% rather
// than a gap, as nvidia-smi shows it. A buffer is point-read when it drains
// dry a RareInterval after it last had samples (at once when it is dry from
// the start), then at most every RareInterval while it stays dry: one C call
// per engine per interval on NVML. A metric the device has no point read
// for is not asked again.
func (l *deviceLoop) readDryMedia(now time.Time) {
	l.dryAsk = append(l.dryAsk[:0], l.dryIDs...)
	if cap(l.dryOut) < len(l.dryAsk) {
		l.dryOut = make([]Reading, len(l.dryAsk))
	}
	ids, out := l.dryAsk, l.dryOut[:len(l.dryAsk)]
	l.readInto(ids, out, now, record.FlagPointRead, &ids, &out)
	l.pointReads.Add(1)
	if len(ids) < len(l.dryIDs) { // some said not supported
		for _, b := range l.buffers {
			if b.media && slices.Contains(l.dryIDs, b.metric) && !slices.Contains(ids, b.metric) {
				b.noDryRead = true
			}
		}
	}
	l.dryIDs = l.dryIDs[:0]
}

// drain drains one buffer and reports whether it held nothing new.
func (l *deviceLoop) drain(b *bufferState, now time.Time) bool {
	lastDrain := b.drainedAt
	b.drainedAt = now
	l.enter(&opDrain)
	raw, err := l.src.Drain(b.typ, b.cursor, l.raw[:0])
	l.exit()
	l.raw = raw[:0]
	l.drains.Add(1)
	if err == nil && b.verify && !slices.ContainsFunc(raw, func(r RawSample) bool { return r.TimeUS > b.cursor }) {
		err = ErrNothingNew
	}
	if errors.Is(err, ErrNothingNew) && b.verify {
		if fresh := l.checkRestored(b, now); len(fresh) > 0 {
			raw, err = fresh, nil
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrNothingNew):
		l.nothingNew.Add(1)
		if b.cursor == 0 {
			b.emptyAtNS = now.UnixNano()
		}
		return true
	case errors.Is(err, ErrNotSupported):
		b.supported = false
		l.fallBack(b, now)
		return false
	default:
		l.callFailed(err, now)
		return false
	}
	if !slices.IsSortedFunc(raw, cmpRaw) {
		slices.SortFunc(raw, cmpRaw)
	}
	// Defensive: keep only samples strictly newer than the cursor, once.
	start := 0
	for start < len(raw) && raw[start].TimeUS <= b.cursor {
		start++
	}
	raw = raw[start:]
	if len(raw) == 0 {
		l.nothingNew.Add(1)
		if b.cursor == 0 {
			b.emptyAtNS = now.UnixNano()
		}
		return true
	}
	if l.tb.Observe(raw[len(raw)-1].TimeUS) {
		l.clockKind.Store(uint32(l.tb.Kind))
	}
	l.reportClockStep(l.tb.Stepped, now)
	l.checkLoss(b, raw, lastDrain, l.e.cfg.Clock.Now())
	b.resumed, b.verify = false, false
	prev := uint64(0)
	for _, r := range raw {
		if r.TimeUS == prev {
			continue // duplicate timestamp within a batch
		}
		prev = r.TimeUS
		l.pub = append(l.pub, record.Sample{TimeNS: l.tb.ToNS(r.TimeUS), Value: r.Value, Device: l.index, Metric: b.metric})
	}
	b.cursor = raw[len(raw)-1].TimeUS
	return false
}

// fallBack is called once when a device answers that buffer b is not
// supported (some platforms and virtualised GPUs have no sample buffers):
// the buffer's metric is read with its point query at the field interval
// from now on (a media engine's at the rare interval, see readDryMedia),
// marked as a point read, when the device answers one.
func (l *deviceLoop) fallBack(b *bufferState, now time.Time) {
	name := l.e.cfg.Catalog.Name(b.metric)
	ids := []catalog.MetricID{b.metric}
	out := make([]Reading, 1)
	l.enter(&opRead)
	err := l.src.Read(ids, out)
	l.exit()
	switch {
	case err != nil:
		l.callFailed(err, now)
	case errors.Is(out[0].Err, ErrNotSupported):
		l.e.log.Info("sample buffer not supported, and no point read for its metric: not sampled", "device", l.index,
			"buffer", b.typ.String(), "metric", name)
		b.noDryRead = true
		return
	case out[0].Err == nil:
		t := out[0].TimeNS
		if t == 0 {
			t = now.UnixNano()
		}
		l.pub = append(l.pub, record.Sample{TimeNS: t, Value: out[0].Value, Device: l.index, Metric: b.metric, Flags: record.FlagPointRead})
		l.pointReads.Add(1)
	}
	l.pointFallbacks.Add(1)
	if b.media {
		// An idle engine on most GPUs: read like a dry media buffer
		// (readDryMedia), not every field tick.
		b.dryRead = now.Add(l.e.cfg.RareInterval)
		l.e.log.Info("sample buffer not supported; its metric comes from point reads at the rare interval", "device", l.index,
			"buffer", b.typ.String(), "metric", name, "interval", l.e.cfg.RareInterval)
		return
	}
	l.fbIDs = append(l.fbIDs, b.metric)
	l.fbOut = append(l.fbOut, Reading{})
	l.e.log.Info("sample buffer not supported; its metric comes from point reads at the field interval", "device", l.index,
		"buffer", b.typ.String(), "metric", name, "interval", l.e.cfg.FieldInterval)
}

func cmpRaw(a, b RawSample) int {
	switch {
	case a.TimeUS < b.TimeUS:
		return -1
	case a.TimeUS > b.TimeUS:
		return 1
	}
	return 0
}

// checkLoss updates the buffer's depth and period estimates and counts a
// suspected loss: a drain that came back as full as the buffer gets, with a
// gap after the cursor longer than the sample period, means the driver
// overwrote samples we had not drained.
func (l *deviceLoop) checkLoss(b *bufferState, raw []RawSample, prev, end time.Time) {
	n := len(raw)
	if n >= 2 {
		if p := (raw[n-1].TimeUS - raw[0].TimeUS) / uint64(n-1); p > 0 {
			b.periodUS = p
		}
	}
	full := n >= max(l.fullAt(b), 4)
	if n > b.depth {
		b.depth = n
	}
	if b.cursor == 0 {
		l.heldDepth = max(l.heldDepth, n)
	}
	// Since the last drain: far longer than the interval means sampling
	// stalled (a slow call, a loaded machine); an overrun then is not the
	// interval's fault.
	stalled := !prev.IsZero() && end.Sub(prev) > b.interval*3/2+MinDrainInterval
	// The span is depth × period: the reported capacity when the backend
	// knows it, else the largest drain seen (an underestimate while the
	// buffer is still filling).
	depth := b.depth
	if b.capacity > 0 {
		depth = b.capacity
	}
	if b.periodUS > 0 && depth >= 4 {
		l.schedule(b, depth)
	}
	if b.cursor == 0 {
		l.checkFirstFill(b, raw, full)
		return
	}
	if !full || b.periodUS == 0 {
		return
	}
	gap := raw[0].TimeUS - b.cursor
	if gap*2 <= b.periodUS*3 {
		return // the gap is one period: caught up exactly at the edge
	}
	lost := gap/b.periodUS - 1
	l.suspectedLosses.Add(1)
	l.lostEstimate.Add(lost)
	if b.resumed {
		// Taken while nothing drained (before a restart, or while the
		// device was lost) and no longer held: counted, but the interval
		// was not the cause.
		l.e.log.Warn("sample buffer overran while the device was not sampled; samples lost", "device", l.index,
			"buffer", b.typ.String(), "lost_estimate", lost)
		l.e.Emit(record.Event{Kind: record.EventSampleLoss, Device: int(l.index), StartNS: l.tb.ToNS(b.cursor), EndNS: l.tb.ToNS(raw[0].TimeUS),
			Message: "driver sample buffer overran while the device was not sampled", Attrs: []record.Attr{{Key: "buffer", Value: b.typ.String()}}})
		return
	}
	if stalled {
		l.e.log.Warn("sample buffer overran while sampling was stalled (a slow driver call); samples lost, drain interval kept", "device", l.index,
			"buffer", b.typ.String(), "lost_estimate", lost, "since_last_drain", end.Sub(prev), "interval", b.interval)
		l.e.Emit(record.Event{Kind: record.EventSampleLoss, Device: int(l.index), StartNS: l.tb.ToNS(b.cursor), EndNS: l.tb.ToNS(raw[0].TimeUS),
			Message: "driver sample buffer overran while sampling was stalled", Attrs: []record.Attr{{Key: "buffer", Value: b.typ.String()}}})
		return
	}
	b.limit = max(b.interval/2, MinDrainInterval)
	if b.capacity > n {
		// The buffer held less than the backend said: trust what was seen.
		b.capacity = 0
		depth = b.depth
	}
	l.schedule(b, depth)
	l.e.log.Warn("sample buffer overran between drains; drain interval shortened", "device", l.index,
		"buffer", b.typ.String(), "lost_estimate", lost, "interval", b.interval)
	l.e.Emit(record.Event{Kind: record.EventSampleLoss, Device: int(l.index), StartNS: l.tb.ToNS(b.cursor), EndNS: l.tb.ToNS(raw[0].TimeUS),
		Message: "driver sample buffer overran between drains", Attrs: []record.Attr{{Key: "buffer", Value: b.typ.String()}}})
}

// checkFirstFill counts a suspected loss when the first drain to find
// samples in a buffer that was empty before (an idle engine's buffer,
// drained at its class's freshness limit while its span was unknown) comes
// back full, its oldest sample later than the last empty drain: what the
// driver took in between may have been overwritten. The estimate is an
// upper bound (the engine may have started later than the empty drain).
func (l *deviceLoop) checkFirstFill(b *bufferState, raw []RawSample, full bool) {
	emptyAt := b.emptyAtNS
	b.emptyAtNS = 0
	if emptyAt == 0 || !full || b.periodUS == 0 {
		return
	}
	gapUS := (l.tb.ToNS(raw[0].TimeUS) - emptyAt) / 1000
	if gapUS <= 0 || uint64(gapUS)*2 <= b.periodUS*3 {
		return
	}
	lost := uint64(gapUS)/b.periodUS - 1
	l.suspectedLosses.Add(1)
	l.lostEstimate.Add(lost)
	l.e.log.Warn("sample buffer filled up while first becoming active; samples may be lost", "device", l.index,
		"buffer", b.typ.String(), "lost_estimate", lost, "interval", b.interval)
	l.e.Emit(record.Event{Kind: record.EventSampleLoss, Device: int(l.index), StartNS: emptyAt, EndNS: l.tb.ToNS(raw[0].TimeUS),
		Message: "driver sample buffer filled up between drains as its engine became active", Attrs: []record.Attr{{Key: "buffer", Value: b.typ.String()}}})
}

// fullAt is how many samples a drain of b returns when the buffer is full,
// judged before the drain's own count is taken in: the capacity the
// backend reports, but no more than a drain from the start of any of the
// device's buffers returned (a driver can report more than it holds).
// Without a reported capacity: the most this buffer returned, else the
// most a drain from the start returned, else 0 (nothing known: a drain of
// 4 or more is taken for full).
func (l *deviceLoop) fullAt(b *bufferState) int {
	switch {
	case b.capacity > 0 && l.heldDepth >= 4:
		return min(b.capacity, l.heldDepth)
	case b.capacity > 0:
		return b.capacity
	case b.depth >= 4:
		return b.depth
	}
	return l.heldDepth
}

// schedule sets buffer b's drain interval from its span (depth × period):
// half the span, so that a drain always finds the previous one's newest
// sample still in the buffer; at least MinDrainInterval; at most b.limit
// (the freshness limit, or less after a loss). Each buffer type keeps its
// own interval.
func (l *deviceLoop) schedule(b *bufferState, depth int) {
	span := time.Duration(uint64(depth)*b.periodUS) * time.Microsecond
	want := min(max(span/2, MinDrainInterval), b.limit)
	if want == b.interval && b.spanned {
		return
	}
	first := !b.spanned
	b.spanned = true
	b.interval = want
	l.noteInterval()
	log := l.e.log.Debug
	if first {
		log = l.e.log.Info
	}
	log("drain interval set from the buffer's span", "device", l.index, "buffer", b.typ.String(), "depth", depth,
		"period", time.Duration(b.periodUS)*time.Microsecond, "span", span, "interval", b.interval)
	if first && span <= MinDrainInterval {
		l.e.log.Warn("sample buffer spans no more than the minimum drain interval: samples will be lost", "device", l.index,
			"buffer", b.typ.String(), "span", span, "min_interval", MinDrainInterval)
	}
}

// noteInterval publishes the shortest drain interval in use.
func (l *deviceLoop) noteInterval() {
	shortest := l.e.cfg.DrainInterval
	for _, b := range l.buffers {
		if b.supported {
			shortest = min(shortest, b.interval)
		}
	}
	l.minDrainNS.Store(int64(shortest))
}

// readInto reads ids into out and appends the values as samples. Metrics
// that answer ErrNotSupported are dropped from *ids/*outs for good.
func (l *deviceLoop) readInto(ids []catalog.MetricID, out []Reading, now time.Time, flags record.Flags, idsp *[]catalog.MetricID, outp *[]Reading) {
	clear(out)
	l.enter(&opRead)
	err := l.src.Read(ids, out)
	l.exit()
	if err != nil {
		l.callFailed(err, now)
		return
	}
	nowNS := now.UnixNano()
	unsupported := false
	for i, r := range out {
		switch {
		case r.Err == nil:
			t := r.TimeNS
			if t == 0 {
				t = nowNS
			}
			l.pub = append(l.pub, record.Sample{TimeNS: t, Value: r.Value, Device: l.index, Metric: ids[i], Flags: flags})
		case errors.Is(r.Err, ErrNotSupported):
			unsupported = true
		case errors.Is(r.Err, ErrNothingNew):
		default:
			l.readErrors.Add(1)
		}
	}
	if unsupported {
		keep := ids[:0]
		for i, id := range ids {
			if !errors.Is(out[i].Err, ErrNotSupported) {
				keep = append(keep, id)
			}
		}
		*idsp = keep
		*outp = out[:len(keep)]
	}
}

// pollProcesses lists the device's processes and emits one record.EventProcess
// event per process. The utilization cursor advances to the newest sample
// delivered, so each utilization sample is reported once.
func (l *deviceLoop) pollProcesses(now time.Time) {
	q := ProcessQuery{Cursor: l.procCursor, Cmdline: l.e.cfg.ProcessCmdline, CmdlineMax: l.e.cfg.ProcessCmdlineMax}
	l.enter(&opProcesses)
	procs, err := l.procs.Processes(q, l.procBuf[:0])
	l.exit()
	l.procBuf = procs[:0]
	switch {
	case err == nil:
	case errors.Is(err, ErrNotSupported):
		l.procs = nil
		l.e.log.Info("per-process sampling not supported on this device", "device", l.index, "err", err)
		return
	default:
		l.callFailed(err, now)
		return
	}
	nowNS := now.UnixNano()
	byPID := l.procAttribution.Load()
	for i := range procs {
		p := &procs[i]
		if p.HasUtil && p.TimeUS > l.procCursor {
			l.procCursor = p.TimeUS
		}
		if q.Cmdline {
			p.Cmdline = TruncateCmdline(p.Cmdline, q.CmdlineMax)
		} else {
			p.Cmdline = ""
		}
		ev := processEvent(int(l.index), p, nowNS, l.procFields, l.procAttrs)
		if byPID != nil {
			if a, ok := (*byPID)[p.PID]; ok {
				ev.Attrs = append(ev.Attrs, a.Attrs()...)
			}
		}
		l.procFields, l.procAttrs = ev.Fields, ev.Attrs
		l.e.Emit(ev)
	}
	pids := make([]uint32, len(procs))
	for i := range procs {
		pids[i] = procs[i].PID
	}
	l.pids.Store(&pids)
	if po, ok := l.e.cfg.Observer.(ProcessObserver); ok {
		po.ObserveProcesses(l.identity.Load(), pids, nowNS)
	}
	l.processPolls.Add(1)
	l.processesSeen.Store(uint64(len(procs)))
}

// Names of the driver calls the watchdog reports.
var (
	opDrain     = "drain"
	opRead      = "read"
	opIdentity  = "identity"
	opReopen    = "reopen"
	opCapacity  = "buffer capacity"
	opProcesses = "processes"
)

// enter marks a driver call in flight for the watchdog.
func (l *deviceLoop) enter(op *string) {
	l.callOp.Store(op)
	l.callStart.Store(l.e.cfg.Clock.Now().UnixNano())
}

// exit marks the call done; if the watchdog had flagged it, the device
// recovers from hung.
func (l *deviceLoop) exit() {
	l.callStart.Store(0)
	if !l.hungFlag.Load() {
		return
	}
	l.hungMu.Lock()
	defer l.hungMu.Unlock()
	if !l.hungFlag.Load() {
		return
	}
	l.hungFlag.Store(false)
	if l.lost {
		l.state.Store(uint32(DeviceLost))
	} else {
		l.state.Store(uint32(DeviceOK))
	}
	id := l.identity.Load()
	now := l.e.cfg.Clock.Now().UnixNano()
	l.e.log.Warn("driver call returned after the watchdog flagged it", "device", l.index, "uuid", id.UUID)
	l.e.Emit(record.Event{Kind: record.EventDeviceRecovery, Device: int(l.index), StartNS: now, EndNS: now,
		Message: "overdue driver call returned", Attrs: []record.Attr{{Key: "uuid", Value: id.UUID}, {Key: "from", Value: "hung"}}})
}

// watch is called by the engine's watchdog: when a call has been in flight
// longer than timeout, the device is marked hung and an event says so.
// Only this device's loop is stalled; the others run on.
func (l *deviceLoop) watch(now time.Time, timeout time.Duration) {
	start := l.callStart.Load()
	if start == 0 || l.hungFlag.Load() || now.UnixNano()-start < int64(timeout) {
		return
	}
	l.hungMu.Lock()
	defer l.hungMu.Unlock()
	if l.callStart.Load() != start || l.hungFlag.Load() {
		return // returned meanwhile
	}
	l.hungFlag.Store(true)
	l.state.Store(uint32(DeviceHung))
	op := "call"
	if p := l.callOp.Load(); p != nil {
		op = *p
	}
	id := l.identity.Load()
	l.hung.Add(1)
	l.e.log.Error("driver call hung; this device's sampling is stalled, the others' is not", "device", l.index,
		"uuid", id.UUID, "op", op, "for", now.Sub(time.Unix(0, start)))
	l.e.Emit(record.Event{Kind: record.EventDeviceHung, Device: int(l.index), StartNS: start,
		Message: fmt.Sprintf("driver %s call has not returned within %v", op, timeout),
		Attrs:   []record.Attr{{Key: "uuid", Value: id.UUID}, {Key: "op", Value: op}}})
}

// callFailed handles an error for a whole call.
func (l *deviceLoop) callFailed(err error, now time.Time) {
	l.readErrors.Add(1)
	if errors.Is(err, ErrGPULost) && !l.lost {
		l.markLost(err, now, "gpu lost")
	}
}

// markLost puts the loop in the lost state: no calls but probes, the first
// one LostRetryInterval from now.
func (l *deviceLoop) markLost(err error, now time.Time, msg string) {
	l.lost = true
	l.lostAt = now
	every := l.probeInterval(now)
	l.nextProbe = now.Add(every)
	l.state.Store(uint32(DeviceLost))
	id := l.identity.Load()
	l.e.log.Error(msg, "device", l.index, "uuid", id.UUID, "err", err, "probe_every", every,
		"then_every", l.e.cfg.LostRetryInterval, "after", LostFastProbeWindow)
	l.e.Emit(record.Event{Kind: record.EventDeviceLost, Device: int(l.index), StartNS: now.UnixNano(), Message: err.Error(),
		Attrs: []record.Attr{{Key: "uuid", Value: id.UUID}}})
}

// LostFastProbeWindow is how long a lost device is probed at the fast
// pace (probeInterval); a device lost for longer is probed every
// Config.LostRetryInterval: a GPU that is gone for good costs little.
const LostFastProbeWindow = time.Minute

// MinProbeInterval is the shortest time between two probes of a lost
// device (each costs a few driver calls).
const MinProbeInterval = 250 * time.Millisecond

// probeInterval is the time to the next probe of the lost device: half its
// shortest buffer's span (depth × period, as measured; the drain interval
// while no span is known), so that a device that answers again within its
// buffers' span loses nothing, at least MinProbeInterval and at most
// Config.LostRetryInterval; once the device has been lost for
// LostFastProbeWindow, LostRetryInterval.
func (l *deviceLoop) probeInterval(now time.Time) time.Duration {
	every := l.e.cfg.LostRetryInterval
	if now.Sub(l.lostAt) >= LostFastProbeWindow {
		return every
	}
	half := time.Duration(0)
	for _, b := range l.buffers {
		depth := b.depth
		if b.capacity > 0 {
			depth = l.fullAt(b)
		}
		if !b.supported || b.periodUS == 0 || depth < 4 {
			continue
		}
		h := time.Duration(uint64(depth)*b.periodUS) * time.Microsecond / 2
		if half == 0 || h < half {
			half = h
		}
	}
	if half == 0 {
		half = l.e.cfg.DrainInterval
	}
	return min(every, max(half, MinProbeInterval))
}

// retryLost probes a lost device: re-acquire it by UUID (Reopener; by
// index when its UUID was never read), then ask its identity; when the same
// GPU answers, sampling resumes. The caller schedules the next probe.
func (l *deviceLoop) retryLost(now time.Time) {
	old := l.identity.Load()
	l.state.Store(uint32(DeviceRecovering))
	l.probes.Add(1)
	fail := func() {
		l.state.Store(uint32(DeviceLost))
	}
	if r, ok := l.src.(Reopener); ok {
		l.enter(&opReopen)
		err := r.Reopen(old.UUID)
		l.exit()
		if err != nil {
			fail()
			return
		}
	}
	l.enter(&opIdentity)
	id, err := l.src.Identity()
	l.exit()
	if err != nil {
		fail()
		return
	}
	if old.UUID != "" && id.UUID != old.UUID {
		l.e.log.Error("a different GPU answers in a lost device's place; not resuming", "device", l.index,
			"uuid", old.UUID, "found", id.UUID)
		fail()
		return
	}
	l.lost = false
	l.state.Store(uint32(DeviceOK))
	l.recoveries.Add(1)
	l.idMu.Lock()
	cur := l.identity.Load()
	id.Attribution = cur.Attribution
	id.Generation = cur.Generation + 1
	l.identity.Store(&id)
	l.idMu.Unlock()
	l.e.log.Warn("gpu recovered", "device", l.index, "uuid", id.UUID, "down_for", now.Sub(l.lostAt))
	l.e.Emit(record.Event{Kind: record.EventDeviceRecovery, Device: int(l.index), StartNS: l.lostAt.UnixNano(), EndNS: now.UnixNano(),
		Message: "device answers again", Attrs: []record.Attr{{Key: "uuid", Value: id.UUID}, {Key: "from", Value: "lost"}}})
}

// setAttribution replaces the device's attribution; a change bumps the
// identity's Generation so that every output sees it with the next batch.
func (l *deviceLoop) setAttribution(a record.Attribution) bool {
	l.idMu.Lock()
	defer l.idMu.Unlock()
	cur := l.identity.Load()
	if cur.Attribution == a {
		return false
	}
	id := *cur
	id.Attribution = a
	id.Generation++
	l.identity.Store(&id)
	return true
}

// DeviceStats are one device's self-metrics.
type DeviceStats struct {
	Index int
	UUID  string
	// Simulated is the device identity's mark: its self-metrics are marked
	// as the device's other records are.
	Simulated bool
	// Published samples into the device's ring.
	Published uint64
	// Drains is the number of buffer drain calls; NothingNew those that
	// returned nothing new (normal when idle).
	Drains, NothingNew uint64
	// SuspectedLosses counts drains that found the buffer overrun;
	// LostEstimate estimates the samples lost that way.
	SuspectedLosses, LostEstimate uint64
	// CursorsDiscarded counts drain cursors restored from the cursor
	// store that could not be right (later than now, or than the newest
	// sample the buffer held: the wall clock was stepped back since they
	// were saved) and were dropped: those buffers were drained as at a
	// fresh start. Cursors of a store saved under another boot or on
	// another machine (CursorFile.Ignored) count here too.
	CursorsDiscarded uint64
	// Held is how many samples wait in the device loop for room in the
	// outputs' lanes (a deep first backlog goes out in lane-sized steps).
	Held uint64
	// PointReads counts point reads of buffer metrics: idle utilization
	// reads, and the reads standing in for unsupported buffers.
	PointReads uint64
	// PointFallbacks is how many buffer metrics come from point reads at
	// the field interval because the device has no sample buffer for them.
	PointFallbacks uint64
	// FieldReads counts batched fast-field reads.
	FieldReads uint64
	// ReadErrors counts failed calls and values.
	ReadErrors uint64
	// NewestNS is the newest published sample's timestamp.
	NewestNS int64
	// Clock is the buffer timestamp clock as classified.
	Clock ClockKind
	// MinDrainInterval is the shortest drain interval in use.
	MinDrainInterval time.Duration
	// Calls and CallLatency are the backend's driver calls, when it counts
	// them (CallCounter).
	Calls       uint64
	CallLatency time.Duration
	// CallsByFunction splits Calls by driver function, when the backend
	// counts them so (CallBreakdown); nil otherwise.
	CallsByFunction map[string]uint64
	// SamplesPerCall is Published / Calls (0 when calls are not counted).
	SamplesPerCall float64
	// State is the device's state now.
	State DeviceState
	// Hangs counts calls the watchdog flagged; Recoveries lost-device
	// recoveries; Probes the probes of a lost device (failed or not).
	Hangs, Recoveries, Probes uint64
	// ProcessPolls counts per-process polls; Processes is how many
	// processes the latest one found.
	ProcessPolls, Processes uint64
	// Abandoned is set when Run stopped without this device's loop: it was
	// still inside a driver call LoopStopGrace after the end was asked.
	Abandoned bool
}

func (l *deviceLoop) stats() DeviceStats {
	id := l.identity.Load()
	s := DeviceStats{Index: id.Index, UUID: id.UUID, Simulated: id.Simulated, Published: l.published.Load(), Drains: l.drains.Load(),
		NothingNew: l.nothingNew.Load(), SuspectedLosses: l.suspectedLosses.Load(), LostEstimate: l.lostEstimate.Load(),
		PointReads: l.pointReads.Load(), FieldReads: l.fieldReads.Load(), ReadErrors: l.readErrors.Load(),
		NewestNS: l.newestNS.Load(), Clock: ClockKind(l.clockKind.Load()), MinDrainInterval: time.Duration(l.minDrainNS.Load()),
		State: DeviceState(l.state.Load()), Hangs: l.hung.Load(), Recoveries: l.recoveries.Load(), Probes: l.probes.Load(),
		ProcessPolls: l.processPolls.Load(), Processes: l.processesSeen.Load(), Abandoned: l.abandoned.Load(),
		PointFallbacks: l.pointFallbacks.Load(), CursorsDiscarded: l.cursorsDiscarded.Load(), Held: l.held.Load()}
	if cc, ok := l.src.(CallCounter); ok {
		cs := cc.CallStats()
		s.Calls, s.CallLatency = cs.Calls, cs.Latency
		if cb, ok := l.src.(CallBreakdown); ok {
			s.CallsByFunction = cb.CallsByFunction()
		}
		if s.Calls > 0 {
			s.SamplesPerCall = float64(s.Published) / float64(s.Calls)
		}
	}
	return s
}
