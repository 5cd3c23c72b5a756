package opentelemetry

import (
	"context"
	"crypto/tls"
	_ "embed"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// SampleConfig is this output's fragment of the example configuration.
//
//go:embed sample.conf
var SampleConfig string

// Options configure an Output.
type Options struct {
	// Name identifies the output in errors and logs (the block's name).
	Name string
	// Endpoints are the collectors, tried in turn with failover (see
	// Config.Endpoints for their form).
	Endpoints []string
	// Protocol is ProtocolGRPC (default) or ProtocolHTTP.
	Protocol string
	// Headers go with every export. They are never logged or put in an
	// error.
	Headers map[string]string
	// Gzip compresses requests.
	Gzip bool
	// Timeout bounds one export (default DefaultTimeout); the Write's
	// context bounds it too, whichever ends first.
	Timeout time.Duration
	// TLS is the client TLS configuration (nil: Go's defaults for https://
	// endpoints, plain text for http:// ones).
	TLS *tls.Config
	// Host is the host.name resource attribute; GlobalTags and
	// ResourceAttributes are added to every resource.
	Host                           string
	GlobalTags, ResourceAttributes map[string]string
	// MaxRequestBytes bounds an export request's size before compression
	// (default DefaultMaxRequestBytes): a larger batch goes in several.
	MaxRequestBytes int
	// Aggregate is the block's aggregation window (0: raw samples).
	Aggregate time.Duration
	// Catalog defaults to catalog.Default().
	Catalog *catalog.Catalog
	// Version is the scope's version and the service.version resource
	// attribute ("" leaves them out).
	Version string
	// Logger gets rare notes (partial success, failover); nil discards.
	Logger *slog.Logger
	// Now is the clock of the counters' start time (default time.Now).
	Now func() time.Time
	// HTTPTransport replaces the HTTP transport (tests).
	HTTPTransport http.RoundTripper
}

// Stats are an Output's counters.
type Stats struct {
	// Batches counts Writes that had data points to send; Points the data
	// points encoded (every attempt).
	Batches, Points uint64
	// Requests counts export requests made; Failed those that failed.
	Requests, Failed uint64
	// Bytes counts request bodies (protobuf, before compression);
	// WireBytes what went on the wire for them (compressed; gRPC counts
	// its message framing too).
	Bytes, WireBytes uint64
	// PartialSuccess counts exports the collector took in part, and
	// batches split in several requests of which it refused some for
	// good; RejectedPoints sums the data points it said it rejected in
	// them, and those of the refused requests (dropped: not sent again).
	PartialSuccess, RejectedPoints uint64
	// RetryHints counts failures that carried the server's retry delay
	// (RetryInfo, Retry-After).
	RetryHints uint64
	// Failovers counts switches to another endpoint.
	Failovers uint64
}

// exporter makes one export request to one endpoint.
type exporter interface {
	// export sends body (a serialized ExportMetricsServiceRequest) once.
	// A nil error may come with a partial success: rejected points and
	// the collector's message.
	export(ctx context.Context, body []byte) (rejected int64, msg string, err error)
	// target names the endpoint (no credentials).
	target() string
	close()
}

// Output encodes batches as OTLP metrics and exports them to an
// OpenTelemetry collector (or any OTLP receiver).
//
// Concurrency: Write and Close follow record.Output (one goroutine, never
// concurrently); Stats may be called from any goroutine. The batch is
// encoded before Write returns and not retained.
type Output struct {
	name    string
	enc     *encoder
	ex      []exporter
	fo      outputs.Failover
	timeout time.Duration
	log     *slog.Logger
	buf     []byte
	closed  bool
	lastLog time.Time
	// maxRequest bounds a request's size (maxRequestBytes).
	maxRequest int
	// sent: the parts of a batch sent before one failed.
	sent partsSent

	st struct {
		batches, points, requests, failed, bytes, wire, partial, rejected, hints, failovers atomic.Uint64
	}
}

// New returns an output. It does no network I/O: an unreachable collector
// shows up as Write errors.
func New(opts Options) (*Output, error) {
	if opts.Name == "" {
		opts.Name = "opentelemetry"
	}
	if opts.Protocol == "" {
		opts.Protocol = ProtocolGRPC
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(opts.Endpoints) == 0 {
		opts.Endpoints = []string{DefaultGRPCEndpoint}
		if opts.Protocol == ProtocolHTTP {
			opts.Endpoints = []string{DefaultHTTPEndpoint}
		}
	}
	if opts.MaxRequestBytes <= 0 {
		opts.MaxRequestBytes = DefaultMaxRequestBytes
	}
	o := &Output{name: opts.Name, timeout: opts.Timeout, log: opts.Logger, maxRequest: opts.MaxRequestBytes,
		enc: newEncoder(&opts, opts.Now().UnixNano())}
	for _, e := range opts.Endpoints {
		ep, err := parseEndpoint(opts.Protocol, e, opts.TLS != nil)
		if err != nil {
			o.closeExporters()
			return nil, o.errorf("endpoint %w", err)
		}
		var ex exporter
		switch opts.Protocol {
		case ProtocolGRPC:
			ex, err = newGRPCExporter(ep, &opts, o)
		case ProtocolHTTP:
			ex = newHTTPExporter(ep, &opts, o)
		default:
			err = fmt.Errorf("protocol %q: want one of %s", opts.Protocol, strings.Join(Protocols, ", "))
		}
		if err != nil {
			o.closeExporters()
			return nil, o.errorf("%w", err)
		}
		o.ex = append(o.ex, ex)
	}
	o.fo = outputs.Failover{N: len(o.ex)}
	return o, nil
}

func (o *Output) errorf(format string, args ...any) error {
	return fmt.Errorf("opentelemetry %q: "+format, append([]any{o.name}, args...)...)
}

// Write encodes b as one export request and makes one attempt to send it
// (to the endpoint in use, then with failover to the next ones within the
// same deadline). The error is classified for the pump or buffer, which
// own retries (record.Classify): unavailable when no collector answered
// or it said UNAVAILABLE, RESOURCE_EXHAUSTED with a retry delay, HTTP
// 429, 502, 503 or 504 (with the server's delay, record.RetryAfterOf);
// retryable for a timeout and other transient gRPC codes or 5xx;
// permanent for a request the collector refused as such (INVALID_ARGUMENT,
// HTTP 400 and other 4xx). A partial success is a success: the points the
// collector rejected are counted (Stats.RejectedPoints) and not sent again.
// So is a batch sent in several requests of which the collector refused
// some for good but not all: the other requests are sent, and the refused
// ones' points counted as rejected; when it refuses every one, Write
// returns the first refusal.
func (o *Output) Write(ctx context.Context, b *record.Batch) error {
	if o.closed {
		return record.ErrClosed
	}
	parts, points, err := o.encodeParts(b)
	if err != nil {
		o.enc.commit()
		return record.Permanent(o.errorf("encode %d records: %w", b.Len(), err))
	}
	if points == 0 {
		o.enc.commit()
		return nil
	}
	o.st.batches.Add(1)
	o.st.points.Add(uint64(points))
	// A batch offered again (same Seq) after some of its parts were taken
	// sends only the rest: it encodes to the same parts (the counter state
	// of a failed Write is discarded), so nothing is sent twice.
	sent := partsSent{}
	if b.Seq != 0 && b.Seq == o.sent.seq {
		sent = o.sent
		sent.parts = min(sent.parts, len(parts))
	}
	for i := sent.parts; i < len(parts); i++ {
		from, to, err := o.fo.Do(ctx, func(ctx context.Context, k int) error { return o.exportTo(ctx, k, parts[i].body) })
		if err == nil && from != to {
			o.st.failovers.Add(1)
			o.log.Warn("opentelemetry: failed over", "from", o.ex[from].target(), "to", o.ex[to].target())
		}
		switch {
		case err == nil:
			sent.took = true
		case record.IsPermanent(err):
			// The collector refused this part for good; the other parts
			// hold other records and are sent all the same.
			sent.refused += parts[i].points
			if sent.err == nil {
				sent.err = err
			}
		default:
			o.enc.discard()
			sent.seq, sent.parts = b.Seq, i
			o.sent = sent
			return err
		}
	}
	o.enc.commit()
	o.sent = partsSent{}
	if !sent.took {
		return sent.err // nil, or every part was refused: the batch failed
	}
	if sent.refused > 0 {
		// Some parts taken, some refused: the batch was taken in part, as
		// with an OTLP partial success.
		o.st.partial.Add(1)
		o.st.rejected.Add(uint64(sent.refused))
		if now := time.Now(); now.Sub(o.lastLog) >= time.Minute {
			o.lastLog = now
			o.log.Warn("collector refused part of a split batch; its points are dropped",
				"rejected_points", sent.refused, "err", sent.err, "rejected_total", o.st.rejected.Load())
		}
	}
	return nil
}

// part is one export request of a batch.
type part struct {
	body   []byte
	points int
}

// partsSent is what became of the parts of batch seq before one of them
// failed (not for good): parts were sent, took is whether any was taken,
// refused counts the points of those refused for good, err is the first
// such refusal.
type partsSent struct {
	seq     uint64
	parts   int
	took    bool
	refused int
	err     error
}

// run is a run of a batch's records, encoded as one part.
type run struct {
	samples   []record.Sample
	summaries []record.Summary
	events    []record.Event
}

func (r run) len() int { return len(r.samples) + len(r.summaries) + len(r.events) }

// halves splits r in two runs of about as many records, in order (samples,
// then summaries, then events). r has at least two records.
func (r run) halves() (run, run) {
	k := r.len() / 2
	a, b := r, run{}
	ns := min(k, len(r.samples))
	a.samples, b.samples = r.samples[:ns], r.samples[ns:]
	k -= ns
	nm := min(k, len(r.summaries))
	a.summaries, b.summaries = r.summaries[:nm], r.summaries[nm:]
	k -= nm
	a.events, b.events = r.events[:k], r.events[k:]
	return a, b
}

// encodeParts encodes b as one request, or as several when one would be
// over maxRequestBytes (the collector's default gRPC message limit is
// 4 MiB): the batch's records are split in equal runs, in order, and a run
// whose request is still over (records of uneven size, such as events with
// long command lines) in halves, until every request is under the limit or
// holds a single record.
func (o *Output) encodeParts(b *record.Batch) (parts []part, points int, err error) {
	o.enc.setDevices(b.Devices)
	o.enc.useOrigin(b.Origin)
	req, points := o.enc.encode(b.Samples, b.Summaries, b.Events)
	if points == 0 {
		return nil, 0, nil
	}
	body, err := proto.MarshalOptions{}.MarshalAppend(o.buf[:0], req)
	if err != nil {
		return nil, points, err
	}
	o.buf = body
	if len(body) <= o.maxRequest {
		return []part{{body, points}}, points, nil
	}
	// Split into n runs of records, n from the size with a margin.
	n := 2*len(body)/o.maxRequest + 1
	o.enc.discard()
	var samples, summaries, events int
	todo := make([]run, 0, n)
	for i := range n {
		ns := len(b.Samples)*(i+1)/n - samples
		nm := len(b.Summaries)*(i+1)/n - summaries
		ne := len(b.Events)*(i+1)/n - events
		todo = append(todo, run{b.Samples[samples : samples+ns], b.Summaries[summaries : summaries+nm], b.Events[events : events+ne]})
		samples, summaries, events = samples+ns, summaries+nm, events+ne
	}
	slices.Reverse(todo) // a stack: the next run last
	points = 0
	for len(todo) > 0 {
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		pending := maps.Clone(o.enc.pending)
		req, p := o.enc.encode(r.samples, r.summaries, r.events)
		if p == 0 {
			continue
		}
		body, err := proto.Marshal(req)
		if err != nil {
			return nil, points, err
		}
		if len(body) > o.maxRequest && r.len() > 1 {
			// Encode the halves instead, from the counter state before.
			o.enc.pending = pending
			a, b := r.halves()
			todo = append(todo, b, a)
			continue
		}
		parts = append(parts, part{body, p})
		points += p
	}
	return parts, points, nil
}

// exportTo makes one request to endpoint k, bounded by the timeout.
func (o *Output) exportTo(ctx context.Context, k int, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	o.st.requests.Add(1)
	o.st.bytes.Add(uint64(len(body)))
	rejected, msg, err := o.ex[k].export(ctx, body)
	if err != nil {
		// gRPC's writer or the HTTP transport may still be reading body
		// after a failed call returned: the next encode gets a new buffer
		// instead of rewriting this one under them.
		o.buf = nil
		o.st.failed.Add(1)
		if _, ok := record.RetryAfterOf(err); ok {
			o.st.hints.Add(1)
		}
		return o.errorf("export to %s: %w", o.ex[k].target(), err)
	}
	if rejected > 0 || msg != "" {
		o.st.partial.Add(1)
		o.st.rejected.Add(uint64(max(rejected, 0)))
		if now := time.Now(); now.Sub(o.lastLog) >= time.Minute {
			o.lastLog = now
			o.log.Warn("collector took the export in part; the rejected points are dropped",
				"endpoint", o.ex[k].target(), "rejected_points", rejected, "message", msg,
				"rejected_total", o.st.rejected.Load())
		}
	}
	return nil
}

// Close releases the connections; a second Close does nothing.
func (o *Output) Close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	o.closeExporters()
	return nil
}

func (o *Output) closeExporters() {
	for _, e := range o.ex {
		e.close()
	}
}

// Stats returns the counters (any goroutine).
func (o *Output) Stats() Stats {
	return Stats{Batches: o.st.batches.Load(), Points: o.st.points.Load(), Requests: o.st.requests.Load(),
		Failed: o.st.failed.Load(), Bytes: o.st.bytes.Load(), WireBytes: o.st.wire.Load(),
		PartialSuccess: o.st.partial.Load(), RejectedPoints: o.st.rejected.Load(), RetryHints: o.st.hints.Load(),
		Failovers: o.st.failovers.Load()}
}

// ReportStats implements record.StatsReporter (--stats, self-metrics
// scope=output_detail).
func (o *Output) ReportStats(dst []record.Field) []record.Field {
	s := o.Stats()
	return append(dst, record.IntField("batches", s.Batches), record.IntField("points", s.Points),
		record.IntField("requests", s.Requests), record.IntField("requests_failed", s.Failed),
		record.IntField("bytes", s.Bytes), record.IntField("wire_bytes", s.WireBytes),
		record.IntField("partial_success", s.PartialSuccess), record.IntField("rejected_points", s.RejectedPoints),
		record.IntField("retry_hints", s.RetryHints), record.IntField("failovers", s.Failovers))
}

// String names the output and its endpoints.
func (o *Output) String() string {
	eps := make([]string, len(o.ex))
	for i, e := range o.ex {
		eps[i] = e.target()
	}
	return fmt.Sprintf("opentelemetry %q → %s", o.name, strings.Join(eps, ", "))
}
