package record

import (
	"context"
	"errors"
	"time"
)

// DefaultWriteTimeout bounds one Write when the caller sets no bound of its
// own: a pump passes Write a context with this deadline, and wrappers that
// write on their own (the buffer's drain) use it too.
const DefaultWriteTimeout = 10 * time.Second

// The deadline budget. Each hop between the pump and a sink answers its
// caller before the caller gives up on it: the pump gives a Write its
// write_timeout; a plugin client (the host's side of an out-of-process
// output) bounds its call by a shorter call timeout; the plugin's side hands
// the output what is left of the call's deadline less HopMargin; and the
// output makes one attempt at its sink bounded by a request timeout no
// longer than that. A slow sink so returns an error (retryable or
// unavailable) before any caller's deadline and is retried by the pump or
// its buffer, never taken for a wedged process.

// maxHopMargin caps HopMargin.
const maxHopMargin = time.Second

// HopMargin is what a hop keeps back of a budget d for answering its caller
// in time: a fifth of d, at most 1 s. With the default write_timeout of
// 10 s the plugin call timeout is 9 s and the output's own deadline 8 s.
func HopMargin(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return min(d/5, maxHopMargin)
}

// WithinBudget returns d less its HopMargin: the budget of the next hop
// down.
func WithinBudget(d time.Duration) time.Duration { return d - HopMargin(d) }

// HopContext returns ctx with its deadline moved earlier by the HopMargin
// of what is left of it, for handing on to the next hop down (a context
// without a deadline is returned as it is, with a no-op cancel).
func HopContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	left := time.Until(dl)
	return context.WithDeadline(ctx, dl.Add(-HopMargin(left)))
}

// RetryableOffers is how many times in all a pump offers a batch whose
// Writes fail with a retryable error (KindRetryable) before it counts the
// batch as failed. A batch refused as unavailable is offered until it goes
// through; one refused as permanent is never offered again. Wrappers that
// hold batches themselves (aggregation) follow the same rule.
const RetryableOffers = 3

// ErrClosed is returned by an Output's Write after Close.
var ErrClosed = errors.New("record: output closed")

// ErrUnavailable is wrapped by an Output's Write error when the output is
// temporarily unable to take batches (a plugin restarting, a sink down) and
// the same batch should be offered again (KindUnavailable; Unavailable marks
// an error with it). The pump then keeps the batch — same Seq — and retries
// it on its next flush, reading nothing more from the rings until it goes
// through; meanwhile each ring lane that fills up refuses the newest samples
// (the ones published after it filled), counted as dropped. Permanent
// errors fail the batch at once, other errors after RetryableOffers
// attempts (counted as failed); see ErrorKind.
var ErrUnavailable = errors.New("record: output unavailable")

// Output receives batches of records from its pump. Built-in in-process
// outputs (stdout), network outputs and the plugin client all implement it;
// the fan-out cannot tell them apart.
//
// Concurrency and ownership: one pump calls Write and Close from a single
// goroutine, never concurrently. The Batch and every slice in it belong to
// the pump and are reused after Write returns: an output must not retain any
// of it (copy what it needs). Write should honour ctx's deadline. After Close,
// Write returns ErrClosed; a second Close returns nil. A Write error says by
// its kind (Classify) what the pump does with the batch: offer it again
// later (unavailable, retryable) or give it up (permanent).
type Output interface {
	Write(ctx context.Context, b *Batch) error
	Close() error
}

// Absorber is implemented by an output that takes a batch's samples even
// when it refuses the batch: an aggregating wrapper adds them to its
// windows and keeps what it made of them for its next Write, or counts it
// as dropped at Close. A pump that stops with a refused batch held hands
// the output, through Absorb, the samples it never offered (those still
// waiting behind the held batch), so that the output's own accounting
// covers them as it covers the held batch's. The pump still counts them as
// failed, as it does the held batch. Absorb is called from the pump's
// goroutine, before Close, never concurrently with Write; it must not
// block or retain the slice.
type Absorber interface {
	Absorb(samples []Sample)
}

// Finisher is implemented by an output that, once Write has returned,
// still holds what it was handed (a buffer's queue, an aggregate's open
// windows) or whose own counters lag behind its sink (a plugin's, which
// reach the host with its health answers). At shutdown, after the pump's
// final Write of samples and before the final statistics are read, the
// pump calls Finish: the output hands on what it holds, as far as its sink
// takes it now (one delivery attempt, no waiting out a backoff), and brings
// its counters (StatsReporter) up to date, so that the final statistics
// count what the sink took. Finish returns when that is done or ctx ends,
// whichever comes first; an error only says it did not complete. Writes
// (the final events, unless the output refused its last batch at stop)
// and Close follow it. Finish is called from the pump's
// goroutine, never concurrently with Write or Close. Wrappers finish
// their own part, then the output they wrap (Finish below).
type Finisher interface {
	Finish(ctx context.Context) error
}

// Finish calls out's Finish when it is a Finisher; otherwise it returns
// nil (nothing to finish: what Write took has gone on).
func Finish(ctx context.Context, out Output) error {
	if f, ok := out.(Finisher); ok {
		return f.Finish(ctx)
	}
	return nil
}

// StatsReporter is implemented by outputs that keep counters of their own
// beyond the pump's accounting (sampler.OutputStats): HTTP requests, retries and
// rejected points of an InfluxDB writer, NATS messages and acks, a plugin's
// restarts, crashes and wedges. Every stats interval the agent sends them
// as a self-metrics event (EventSelf, attrs scope=output_detail and
// output=NAME) and `gpusampler run --stats` prints them on one line.
//
// ReportStats appends the output's counters to dst and returns the result.
// Keys are snake_case and stable; counters since the output was built are
// Int fields. It may be called from any goroutine, concurrently with Write
// and after Close, and must return quickly (no I/O). Wrappers (aggregation,
// buffering, the plugin client) report their own counters, if any, and
// pass on the inner output's.
type StatsReporter interface {
	ReportStats(dst []Field) []Field
}

// ReportStats returns out's own counters when it is a StatsReporter, else
// dst unchanged.
func ReportStats(out Output, dst []Field) []Field {
	if r, ok := out.(StatsReporter); ok {
		return r.ReportStats(dst)
	}
	return dst
}

// IntField returns an integer Field (a counter or a count).
func IntField(key string, v uint64) Field { return Field{Key: key, Value: float64(v), Int: true} }

// GaugeField returns an integer gauge Field (a level now, see Field).
func GaugeField(key string, v uint64) Field {
	return Field{Key: key, Value: float64(v), Int: true, Gauge: true}
}
