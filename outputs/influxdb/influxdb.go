package influxdb

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// SampleConfig is this output's fragment of the example configuration.
//
//go:embed sample.conf
var SampleConfig string

// Options configure an Output: the writer's settings plus what goes into
// every line.
type Options struct {
	WriterOptions
	// URLs, when it lists more than one server, are written to in turn
	// with failover (WriterOptions.URL is ignored then): each batch goes to
	// the server that took the last one; on a retryable failure the next
	// server gets the batch, within the same write deadline.
	URLs []string
	// Host is the host tag's value.
	Host string
	// GlobalTags are added to every line.
	GlobalTags map[string]string
	// Catalog defaults to catalog.Default().
	Catalog *catalog.Catalog
}

// Stats are an Output's counters.
type Stats struct {
	WriterStats
	// Batches and Lines count what Write was handed and encoded.
	Batches, Lines uint64
	// EncodeRefused counts batches refused because a record in them cannot
	// be written as line protocol (an invalid tag value): not sent, and
	// returned as record.Permanent, so the pump or buffer counts every
	// record in them as dropped.
	EncodeRefused uint64
	// Failovers counts switches to another of the block's urls.
	Failovers uint64
}

// Output encodes batches as line protocol (Telegraf nvidia_smi names and
// types, see internal/encoding/lineproto) and posts them with a Writer.
//
// Concurrency: Write and Close follow record.Output (one goroutine, never
// concurrently); Stats may be called from any goroutine. The batch is
// encoded before Write returns and not retained.
type Output struct {
	w   *Writer   // the writer of the server in use (ws[cur])
	ws  []*Writer // one per URL
	fo  outputs.Failover
	enc *lineproto.Encoder

	closed bool

	batches, lines, encodeRefused, failovers atomic.Uint64
}

// New returns an output. It does no network I/O: an unreachable server
// shows up as Write errors.
func New(opts Options) (*Output, error) {
	urls := opts.URLs
	if len(urls) == 0 {
		urls = []string{opts.URL}
	}
	var ws []*Writer
	for _, u := range urls {
		wo := opts.WriterOptions
		wo.URL = u
		w, err := NewWriter(wo)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	w := ws[0]
	var tags []lineproto.Tag
	for _, k := range slices.Sorted(maps.Keys(opts.GlobalTags)) {
		tags = append(tags, lineproto.Tag{Key: k, Value: opts.GlobalTags[k]})
	}
	enc := lineproto.New(lineproto.Options{Host: opts.Host, GlobalTags: tags, Catalog: opts.Catalog})
	return &Output{w: w, ws: ws, fo: outputs.Failover{N: len(ws)}, enc: enc}, nil
}

// Writer returns the output's writer.
func (o *Output) Writer() *Writer { return o.w }

// Write encodes b and posts it (see Writer.Write for retries and which
// errors are record.Permanent).
func (o *Output) Write(ctx context.Context, b *record.Batch) error {
	if o.closed {
		return record.ErrClosed
	}
	o.enc.Reset()
	o.enc.Encode(b)
	o.batches.Add(1)
	if err := o.enc.Err(); err != nil {
		// The encoder skipped a line: sending the rest would count the
		// skipped records as delivered. Refuse the whole batch instead,
		// so every record in it is counted as dropped.
		o.encodeRefused.Add(1)
		return record.Permanent(o.w.errorf("batch of %d records not sent: a line cannot be encoded: %w", b.Len(), err))
	}
	body := o.enc.Bytes()
	if len(body) == 0 {
		return nil
	}
	o.lines.Add(uint64(countLines(body)))
	err := o.post(ctx, body)
	if err != nil {
		o.enc.Release() // a failed request's transport may still read body
	}
	return err
}

// post writes body to the server in use; on a retryable failure it fails
// over to the next server, each getting an equal share of what is left of
// ctx's deadline, and stays with the first that takes the batch. A
// permanent refusal is returned at once: another server would refuse the
// same lines.
func (o *Output) post(ctx context.Context, body []byte) error {
	from, to, err := o.fo.Do(ctx, func(ctx context.Context, k int) error { return o.ws[k].Write(ctx, body) })
	if err == nil && from != to {
		o.failovers.Add(1)
		o.w.log.Warn("influxdb: failed over", "from", o.ws[from].Endpoint(), "to", o.ws[to].Endpoint())
		o.w = o.ws[to]
	}
	return err
}

// Close releases idle connections; a second Close does nothing.
func (o *Output) Close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	for _, w := range o.ws {
		w.CloseIdle()
	}
	return nil
}

// Stats returns the counters (any goroutine).
func (o *Output) Stats() Stats {
	var ws WriterStats // summed over the urls (ws is fixed at New)
	for _, w := range o.ws {
		s := w.Stats()
		ws.Requests += s.Requests
		ws.Retries += s.Retries
		ws.BytesSent += s.BytesSent
		ws.PartialWrites += s.PartialWrites
		ws.RejectedPoints += s.RejectedPoints
	}
	return Stats{WriterStats: ws, Batches: o.batches.Load(), Lines: o.lines.Load(),
		EncodeRefused: o.encodeRefused.Load(), Failovers: o.failovers.Load()}
}

// ReportStats implements record.StatsReporter: requests, retries, bytes
// sent (after compression), partial writes and rejected points, batches
// and lines encoded, batches refused by the encoder.
func (o *Output) ReportStats(dst []record.Field) []record.Field {
	s := o.Stats()
	return append(dst, record.IntField("http_requests", s.Requests), record.IntField("http_retries", s.Retries),
		record.IntField("bytes_sent", s.BytesSent), record.IntField("partial_writes", s.PartialWrites),
		record.IntField("rejected_points", s.RejectedPoints), record.IntField("batches", s.Batches),
		record.IntField("lines", s.Lines), record.IntField("encode_refused_batches", s.EncodeRefused),
		record.IntField("failovers", s.Failovers))
}

// countLines counts the body's lines (bytes.Count is vectorised: a byte
// loop here cost 15% of the output's CPU in BenchmarkEndToEnd).
func countLines(b []byte) int { return bytes.Count(b, []byte{'\n'}) }

func basicAuth(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// String names the output and its endpoint.
func (o *Output) String() string {
	eps := make([]string, len(o.ws))
	for i, w := range o.ws {
		eps[i] = w.endpoint
	}
	return fmt.Sprintf("%s %q → %s", o.ws[0].opts.Kind, o.ws[0].opts.Name, strings.Join(eps, ", "))
}
