// Package aggregate is an Output wrapper that turns raw samples into
// per-window summaries: for every (device, metric) and every window aligned
// to the interval, the mean, min, max, last value and count of all samples
// whose own timestamp falls in the window. Raw 10 Hz data from a fleet is
// millions of points per second; summaries keep the spikes (min/max) at a
// fraction of the volume.
//
// Windows close per (device, metric) when a sample of that series arrives
// at or after the window's end (each series arrives in timestamp order), or
// when the wall clock passes the window's end by MaxDelay (a series that
// went quiet), or at shutdown: Finish (after the pump's final flush, so
// that the final statistics count them) or Close. A sample for a window already emitted is late:
// it is counted (Stats) and not emitted, never merged into another window.
//
// Device identities and events pass through unchanged, in the same Write.
//
// With Options.Histograms, each window of the metrics it selects also
// carries the distribution of its samples (record.Summary.Hist): an
// exponential histogram (accum.ExpHistogram) of every sample's value times
// the scale Histograms gives, binned as the samples arrive. It is built in
// the output's unit because a scale that is not a power of two (0.01 for a
// percent as a ratio) cannot be applied to the buckets afterwards. The
// journal keeps the buckets with the window, so a window taken up after a
// crash goes on with them (one left by a journal from before they were
// kept carries none). A NaN or infinite sample cannot be binned: it is
// counted in the summary (Count, and Mean, Min, Max as accum has them) and
// in the histogram's NonFinite, not in a bucket, and counted in Stats
// (Unbinned, aggregate_unbinned).
//
// The inner output's errors keep their kind (record.Classify). While the
// refusal is unavailable, or retryable fewer than record.RetryableOffers
// times in all, the refused batch is kept (the samples behind its
// summaries will not come again) and the error goes to the pump, which
// offers its batch again (same Seq: its samples are not added twice). The
// wrapper then offers the kept batch again exactly as it was: the same
// Seq, summaries, devices and events, so that an output that took part of
// it before failing (JetStream messages, whose Nats-Msg-Id holds the Seq;
// OpenTelemetry requests, resumed by Seq) does not hand that part on
// twice. Windows that close meanwhile wait for the next batch, written
// with the pump's next batch once the kept one went through. A permanent
// refusal, or the last retryable one, drops the summaries and the events
// of the refused batch, counted here (Stats.Dropped and EventsDropped:
// aggregate_dropped, aggregate_events_dropped), and Write returns nil: the
// pump's samples were taken (into those summaries), so the pump does not
// count them as failed as well. A pump that stops while it holds a refused
// batch counts that batch's events as dropped and hands the wrapper the
// samples it had not offered yet (Absorb): their windows are emitted at
// Finish or Close with the rest, or counted as dropped; a kept batch that
// carries such events is then not offered again as it is (its events are
// the pump's, counted): its summaries go on in a new batch.
//
// In front of an output that keeps what it took across restarts (a disk
// buffer), Options.Journal keeps the open windows across a process crash
// too: their samples were taken from the pump and will not come again. A
// wrapper built after the crash on the same journal takes the windows up
// and hands on the summaries the crash interrupted, unless the output
// already took them (Options.LastAppended), so that a kill -9 loses and
// doubles no summary.
package aggregate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/record"
)

// Options configure the wrapper.
type Options struct {
	// Interval is the window length (> 0). Windows start at multiples of
	// it (Unix time).
	Interval time.Duration
	// MaxDelay is how long past its end a window of a quiet series waits
	// for late samples (default: Interval + 2s, above the default drain
	// interval).
	MaxDelay time.Duration
	// Now is the wall clock (default time.Now); tests inject one.
	Now func() time.Time
	// Logger receives a warning when summaries are dropped (the first
	// time, then at most once a minute); nil discards.
	Logger *slog.Logger
	// Journal, when set, is a file that keeps the open windows and the
	// summaries being handed on across a process crash (kill -9, an OOM
	// kill): it is rewritten before every write to the wrapped output, and
	// a wrapper built later on the same file takes up what it holds (see
	// journal.go for the format). Use it in front of an output that keeps
	// what it took across restarts (a disk buffer); the file must be this
	// wrapper's alone.
	Journal string
	// LastAppended, with Journal, returns the Seq of the newest batch the
	// wrapped output took from an earlier process (buffer.Buffer's
	// LastAppended): whether the summaries being handed on at a crash
	// reached it. Without it they are handed on again after the crash.
	LastAppended func() (seq uint64, ok bool)
	// Catalog names the journal's metric IDs (default
	// catalog.Default()).
	Catalog *catalog.Catalog
	// Histograms, when set, selects the metrics whose windows carry an
	// exponential histogram of their samples (Summary.Hist), and the scale
	// their values are multiplied by before binning (the output's unit).
	// It is asked once per metric.
	Histograms func(m catalog.Metric) (scale float64, ok bool)
}

// histScale is a metric's histogram choice (Options.Histograms).
type histScale struct {
	scale float64
	ok    bool
}

type seriesKey struct {
	dev    uint16
	metric catalog.MetricID
}

type window struct {
	start int64
	acc   accum.Window
	// hist holds the samples' distribution when the series has one, and
	// nonFinite counts its NaN and infinite samples (in no bucket); noHist
	// marks a window restored from a journal that kept no buckets.
	hist      accum.ExpHistogram
	nonFinite uint64
	noHist    bool
}

// histogram is the window's distribution for its summary (nil when it
// has none).
func (w *window) histogram() *record.ExpHistogram {
	if w.noHist || w.hist.Count() == 0 && w.nonFinite == 0 {
		return nil
	}
	h := &w.hist
	return &record.ExpHistogram{Scale: h.Scale, ZeroCount: h.ZeroCount,
		PositiveOffset: h.Positive.Offset, Positive: h.Positive.Counts,
		NegativeOffset: h.Negative.Offset, Negative: h.Negative.Counts, NonFinite: w.nonFinite}
}

type series struct {
	open []*window // sorted by start
	// emittedEnd: windows starting before it were emitted; a sample there
	// is late.
	emittedEnd int64
}

// Output summarizes samples and hands the summaries to the wrapped output.
// It follows record.Output's rules: one goroutine calls Write and Close;
// the batch is not retained.
type Output struct {
	inner    record.Output
	opts     Options
	interval int64
	series   map[seriesKey]*series
	closed   []record.Summary
	out      record.Batch
	free     []*window
	// hists caches Options.Histograms by metric ID.
	hists   map[catalog.MetricID]histScale
	done    bool
	lastSeq uint64 // Seq of the last batch whose samples were added
	seq     uint64 // Seq of the last batch written to inner
	// kept: out holds the batch the inner output refused last, to be
	// offered again unchanged (Seq seq) before any other; keptFrom is the
	// Seq of the pump's batch whose devices and events it carries (0:
	// none the pump still holds). tries counts the retryable refusals of
	// that batch.
	kept     bool
	keptFrom uint64
	tries    int
	// lastDropLog rate-limits the drop warning.
	lastDropLog time.Time
	// Journal: jDirty when the windows changed since it was last written,
	// jPending when that one held pending summaries; jBuf its encoding.
	jDirty, jPending bool
	jBuf             []byte
	jNames           []string // the journal's metric_names, reused
	lastJournalLog   time.Time

	late, summarized, emitted, dropped, evDropped atomic.Uint64
	recovered, journalErrors, unbinned            atomic.Uint64
}

// New wraps inner.
func New(inner record.Output, opts Options) (*Output, error) {
	if opts.Interval <= 0 {
		return nil, fmt.Errorf("aggregate: interval %v: must be positive", opts.Interval)
	}
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = opts.Interval + 2*time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Catalog == nil {
		opts.Catalog = catalog.Default()
	}
	o := &Output{inner: inner, opts: opts, interval: int64(opts.Interval), series: make(map[seriesKey]*series)}
	if opts.Journal != "" {
		if err := o.loadJournal(); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Stats are the wrapper's counters.
type Stats struct {
	// Summarized samples went into a window; Late samples arrived for a
	// window already emitted and were dropped.
	Summarized, Late uint64
	// Emitted summaries.
	Emitted uint64
	// Dropped summaries: the inner output refused them as permanent, or
	// as retryable record.RetryableOffers times in a row.
	Dropped uint64
	// EventsDropped passed through in a Write so refused.
	EventsDropped uint64
	// Recovered are the windows and summaries taken up from the journal
	// of a process that crashed; JournalErrors the journal writes that
	// failed.
	Recovered, JournalErrors uint64
	// Unbinned counts the NaN and infinite samples summarized in windows
	// with a histogram (Options.Histograms): in the summaries' counts, in
	// no bucket (record.ExpHistogram.NonFinite).
	Unbinned uint64
}

// Stats returns the counters (safe from any goroutine).
func (o *Output) Stats() Stats {
	return Stats{Summarized: o.summarized.Load(), Late: o.late.Load(), Emitted: o.emitted.Load(),
		Dropped: o.dropped.Load(), EventsDropped: o.evDropped.Load(), Recovered: o.recovered.Load(),
		JournalErrors: o.journalErrors.Load(), Unbinned: o.unbinned.Load()}
}

// ReportStats implements record.StatsReporter: the wrapper's counters
// (aggregate_summarized, aggregate_late, aggregate_emitted,
// aggregate_dropped, aggregate_events_dropped, with a journal
// aggregate_recovered and aggregate_journal_errors, and with histograms
// aggregate_unbinned) followed by the wrapped output's own.
func (o *Output) ReportStats(dst []record.Field) []record.Field {
	s := o.Stats()
	dst = append(dst, record.IntField("aggregate_summarized", s.Summarized),
		record.IntField("aggregate_late", s.Late), record.IntField("aggregate_emitted", s.Emitted),
		record.IntField("aggregate_dropped", s.Dropped), record.IntField("aggregate_events_dropped", s.EventsDropped))
	if o.opts.Journal != "" {
		dst = append(dst, record.IntField("aggregate_recovered", s.Recovered),
			record.IntField("aggregate_journal_errors", s.JournalErrors))
	}
	if o.opts.Histograms != nil {
		dst = append(dst, record.IntField("aggregate_unbinned", s.Unbinned))
	}
	return record.ReportStats(o.inner, dst)
}

// Inner returns the wrapped output.
func (o *Output) Inner() record.Output { return o.inner }

// windowStart returns the start of the window holding t (floor division, so
// negative times work too).
func (o *Output) windowStart(t int64) int64 {
	w := t / o.interval * o.interval
	if t < 0 && w != t {
		w -= o.interval
	}
	return w
}

// closeTimeout bounds the final write at Close, so a blocked sink cannot
// hold up shutdown.
const closeTimeout = 10 * time.Second

// Write adds b's samples to their windows, then writes the closed windows'
// summaries with b's devices and events to the inner output.
func (o *Output) Write(ctx context.Context, b *record.Batch) error {
	if o.done {
		return record.ErrClosed
	}
	// A pump offers a batch the output refused with ErrUnavailable again,
	// Seq unchanged: its samples are already in their windows.
	again := b.Seq != 0 && b.Seq == o.lastSeq
	if !again {
		for _, s := range b.Samples {
			o.add(s)
		}
		o.lastSeq = b.Seq
	}
	o.closeQuiet(o.opts.Now().UnixNano())
	if o.kept {
		if again && b.Seq == o.keptFrom {
			// The kept batch carries this batch's devices and events. The
			// windows closed meanwhile go on with the pump's next batch,
			// so that the pump's retryable offers of this one are the
			// kept batch's.
			return o.offerKept(ctx)
		}
		o.pumpMovedOn()
		if o.kept {
			if err := o.offerKept(ctx); o.kept {
				return err
			}
		}
	}
	return o.emit(ctx, b.Devices, b.Events, b.Seq)
}

// pumpMovedOn runs when the pump no longer holds the batch whose devices
// and events the kept batch carries (it gave that batch up at stop and
// counted its events as dropped): a kept batch with events is not offered
// again as it is, its summaries go on in the next batch.
func (o *Output) pumpMovedOn() {
	o.keptFrom = 0
	if !o.kept || len(o.out.Events) == 0 {
		return
	}
	o.closed = append(o.closed, o.out.Summaries...)
	o.jDirty = true
	o.release()
}

// release forgets the batch in out.
func (o *Output) release() {
	o.out.Reset()
	o.kept, o.keptFrom, o.tries = false, 0, 0
}

// Absorb implements record.Absorber: it adds samples a stopping pump never
// offered (they waited behind a batch the inner output refused) to their
// windows, so that Close hands their summaries on, or counts them as
// dropped, with the rest. After Close it takes nothing (the pump has
// counted the samples as failed).
func (o *Output) Absorb(samples []record.Sample) {
	if o.done {
		return
	}
	for _, s := range samples {
		o.add(s)
	}
}

func (o *Output) add(s record.Sample) {
	k := seriesKey{s.Device, s.Metric}
	sr := o.series[k]
	if sr == nil {
		sr = &series{emittedEnd: -1 << 63}
		o.series[k] = sr
	}
	start := o.windowStart(s.TimeNS)
	if start < sr.emittedEnd {
		o.late.Add(1)
		return
	}
	// A sample at or past a window's end closes it: the series has moved on.
	n := 0
	for n < len(sr.open) && sr.open[n].start+o.interval <= s.TimeNS {
		n++
	}
	if n > 0 {
		o.closeWindows(k, sr, n)
	}
	i, found := slices.BinarySearchFunc(sr.open, start, func(w *window, t int64) int { return cmp.Compare(w.start, t) })
	if !found {
		w := o.newWindow(start)
		sr.open = slices.Insert(sr.open, i, w)
	}
	w := sr.open[i]
	w.acc.Add(s.TimeNS, s.Value)
	if h := o.histOf(s.Metric); h.ok {
		if !w.hist.Add(s.Value * h.scale) {
			// A NaN or infinite value cannot be binned (an OpenTelemetry
			// histogram's count is its buckets'): counted apart.
			w.nonFinite++
			o.unbinned.Add(1)
		}
	}
	o.summarized.Add(1)
	o.jDirty = true
}

// histOf returns the metric's histogram choice (Options.Histograms).
func (o *Output) histOf(id catalog.MetricID) histScale {
	if o.opts.Histograms == nil {
		return histScale{}
	}
	h, ok := o.hists[id]
	if !ok {
		if m, known := o.opts.Catalog.Get(id); known {
			h.scale, h.ok = o.opts.Histograms(m)
		}
		if o.hists == nil {
			o.hists = make(map[catalog.MetricID]histScale)
		}
		o.hists[id] = h
	}
	return h
}

func (o *Output) newWindow(start int64) *window {
	var w *window
	if n := len(o.free); n > 0 {
		w, o.free = o.free[n-1], o.free[:n-1]
		*w = window{}
	} else {
		w = new(window)
	}
	w.start = start
	return w
}

// closeWindows moves the series' first n windows to the closed list.
func (o *Output) closeWindows(k seriesKey, sr *series, n int) {
	for _, w := range sr.open[:n] {
		sum := summaryOf(&w.acc, w.start, o.interval, k)
		sum.Hist = w.histogram()
		o.closed = append(o.closed, sum)
		sr.emittedEnd = w.start + o.interval
		o.free = append(o.free, w)
	}
	sr.open = slices.Delete(sr.open, 0, n)
	o.jDirty = true
}

// summaryOf is the summary of the window at start, interval long, of
// series k.
func summaryOf(a *accum.Window, start, interval int64, k seriesKey) record.Summary {
	return record.Summary{StartNS: start, IntervalNS: interval, Mean: a.Mean(), Min: a.Min, Max: a.Max,
		Last: a.Last, Count: uint32(a.Count), Device: k.dev, Metric: k.metric}
}

// closeQuiet closes every window whose end lies MaxDelay or more before now.
func (o *Output) closeQuiet(now int64) {
	limit := now - int64(o.opts.MaxDelay)
	for k, sr := range o.series {
		n := 0
		for n < len(sr.open) && sr.open[n].start+o.interval <= limit {
			n++
		}
		if n > 0 {
			o.closeWindows(k, sr, n)
		}
	}
}

// emit writes the closed windows' summaries with devs and evs (of the
// pump's batch from, 0 for none) as a new batch. Nothing may be kept.
func (o *Output) emit(ctx context.Context, devs []record.Device, evs []record.Event, from uint64) error {
	ob := &o.out
	ob.Reset()
	ob.Devices = append(ob.Devices, devs...)
	ob.Events = append(ob.Events, evs...)
	slices.SortFunc(o.closed, func(a, b record.Summary) int {
		return cmp.Or(cmp.Compare(a.StartNS, b.StartNS), cmp.Compare(a.Device, b.Device), cmp.Compare(a.Metric, b.Metric))
	})
	ob.Summaries = append(ob.Summaries, o.closed...)
	o.closed = o.closed[:0]
	if ob.Len() == 0 {
		o.saveJournal(o.seq, nil)
		return nil
	}
	o.seq++
	ob.Seq = o.seq
	o.keptFrom, o.tries = from, 0
	return o.write(ctx)
}

// offerKept offers the kept batch again, unchanged.
func (o *Output) offerKept(ctx context.Context) error {
	return o.write(ctx)
}

// write journals the batch in out, hands it to the inner output and
// settles it: counted as emitted, kept for another offer, or counted as
// dropped.
func (o *Output) write(ctx context.Context) error {
	ob := &o.out
	o.saveJournal(ob.Seq, ob.Summaries)
	err := o.inner.Write(ctx, ob)
	kind := record.Classify(err)
	if kind == record.KindRetryable {
		o.tries++
	}
	switch {
	case kind == record.KindNone:
		o.emitted.Add(uint64(len(ob.Summaries)))
	case kind == record.KindUnavailable || (kind == record.KindRetryable && o.tries < record.RetryableOffers):
		// Keep the batch for the next attempt: the samples behind its
		// summaries will not come again. Its events become the
		// wrapper's (the pump reuses their slices).
		if !o.kept {
			o.kept = true
			for i := range ob.Events {
				ob.Events[i] = ob.Events[i].Clone()
			}
		}
		return err
	default:
		o.dropped.Add(uint64(len(ob.Summaries)))
		o.evDropped.Add(uint64(len(ob.Events)))
		if now := o.opts.Now(); o.lastDropLog.IsZero() || now.Sub(o.lastDropLog) >= time.Minute {
			o.lastDropLog = now
			o.opts.Logger.Warn("output refused summaries; dropped", "summaries", len(ob.Summaries), "events", len(ob.Events),
				"kind", kind, "dropped_total", o.dropped.Load(), "err", err)
		}
		if !o.done {
			err = nil // counted here, not again by the pump
		}
		// Counted: a crash must not hand them on again.
		o.saveJournal(o.seq, nil)
	}
	o.release()
	return err
}

// Finish implements record.Finisher: at shutdown, after the pump's final
// flush, it emits every open window (no sample for them comes any more),
// so that the final statistics count their summaries, then finishes the
// inner output. Summaries the inner output refuses as unavailable are
// kept for Close to offer once more. Samples written after Finish open
// windows of their own, emitted at Close.
func (o *Output) Finish(ctx context.Context) error {
	if o.done {
		return record.ErrClosed
	}
	for k, sr := range o.series {
		o.closeWindows(k, sr, len(sr.open))
	}
	var err error
	if werr := o.emitAll(ctx); werr != nil {
		err = fmt.Errorf("aggregate: final windows: %w", werr)
	}
	return errors.Join(err, record.Finish(ctx, o.inner))
}

// emitAll offers the kept batch (if any) again, then, once it went
// through or was dropped, the closed windows as a new batch.
func (o *Output) emitAll(ctx context.Context) error {
	o.pumpMovedOn()
	if o.kept {
		if err := o.offerKept(ctx); o.kept {
			return err
		}
	}
	return o.emit(ctx, nil, nil, 0)
}

// Close emits every open window, then closes the inner output. A second
// Close returns nil.
func (o *Output) Close() error {
	if o.done {
		return nil
	}
	o.done = true
	for k, sr := range o.series {
		o.closeWindows(k, sr, len(sr.open))
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	werr := o.emitAll(ctx)
	cancel()
	if o.opts.Journal != "" && len(o.closed) == 0 && !o.kept {
		// Every window was handed on (or counted dropped).
		if err := os.Remove(o.opts.Journal); err != nil && !errors.Is(err, os.ErrNotExist) {
			o.opts.Logger.Warn("aggregate journal not removed", "file", o.opts.Journal, "err", err)
		}
	}
	if o.opts.Journal == "" && (len(o.closed) > 0 || o.kept) {
		// Kept for a retry that will not come (without a journal nothing
		// takes them up): counted.
		n := len(o.closed)
		if o.kept {
			n += len(o.out.Summaries)
			o.evDropped.Add(uint64(len(o.out.Events)))
			o.release()
		}
		o.dropped.Add(uint64(n))
		o.closed = o.closed[:0]
		o.opts.Logger.Warn("output refused the final summaries; dropped", "summaries", n, "dropped_total", o.dropped.Load())
	}
	cerr := o.inner.Close()
	if werr != nil {
		return fmt.Errorf("aggregate: final write: %w", werr)
	}
	return cerr
}
