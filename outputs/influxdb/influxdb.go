package influxdb

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"github.com/gpusampler/gpusampler/outputs/encoding/lineproto"
	"github.com/gpusampler/gpusampler/sampler"
)

// SampleConfig is this output's fragment of the example configuration.
//
//go:embed sample.conf
var SampleConfig string

// Options configure an Output: the writer's settings plus what goes into
// every line.
type Options struct {
	WriterOptions
	// Host is the host tag's value.
	Host string
	// GlobalTags are added to every line.
	GlobalTags map[string]string
	// Catalog defaults to sampler.DefaultCatalog.
	Catalog *sampler.Catalog
}

// Stats are an Output's counters.
type Stats struct {
	WriterStats
	// Batches and Lines count what Write was handed and encoded.
	Batches, Lines uint64
	// EncodeRefused counts batches refused because a record in them cannot
	// be written as line protocol (an invalid tag value): not sent, and
	// returned as sampler.Permanent, so the pump or buffer counts every
	// record in them as dropped.
	EncodeRefused uint64
}

// Output encodes batches as line protocol (Telegraf nvidia_smi names and
// types, see outputs/encoding/lineproto) and posts them with a Writer.
//
// Concurrency: Write and Close follow sampler.Output (one goroutine, never
// concurrently); Stats may be called from any goroutine. The batch is
// encoded before Write returns and not retained.
type Output struct {
	w   *Writer
	enc *lineproto.Encoder

	closed bool

	batches, lines, encodeRefused atomic.Uint64
}

// New returns an output. It does no network I/O: an unreachable server
// shows up as Write errors.
func New(opts Options) (*Output, error) {
	w, err := NewWriter(opts.WriterOptions)
	if err != nil {
		return nil, err
	}
	var tags []lineproto.Tag
	for _, k := range slices.Sorted(maps.Keys(opts.GlobalTags)) {
		tags = append(tags, lineproto.Tag{Key: k, Value: opts.GlobalTags[k]})
	}
	enc := lineproto.New(lineproto.Options{Host: opts.Host, GlobalTags: tags, Catalog: opts.Catalog})
	return &Output{w: w, enc: enc}, nil
}

// Writer returns the output's writer.
func (o *Output) Writer() *Writer { return o.w }

// Write encodes b and posts it (see Writer.Write for retries and which
// errors are sampler.Permanent).
func (o *Output) Write(ctx context.Context, b *sampler.Batch) error {
	if o.closed {
		return sampler.ErrClosed
	}
	o.enc.Reset()
	o.enc.Encode(b)
	o.batches.Add(1)
	if err := o.enc.Err(); err != nil {
		// The encoder skipped a line: sending the rest would count the
		// skipped records as delivered. Refuse the whole batch instead,
		// so every record in it is counted as dropped.
		o.encodeRefused.Add(1)
		return sampler.Permanent(o.w.errorf("batch of %d records not sent: a line cannot be encoded: %w", b.Len(), err))
	}
	body := o.enc.Bytes()
	if len(body) == 0 {
		return nil
	}
	o.lines.Add(uint64(countLines(body)))
	return o.w.Write(ctx, body)
}

// Close releases idle connections; a second Close does nothing.
func (o *Output) Close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	o.w.CloseIdle()
	return nil
}

// Stats returns the counters (any goroutine).
func (o *Output) Stats() Stats {
	return Stats{WriterStats: o.w.Stats(), Batches: o.batches.Load(), Lines: o.lines.Load(),
		EncodeRefused: o.encodeRefused.Load()}
}

// ReportStats implements sampler.StatsReporter: requests, retries, bytes
// sent (after compression), partial writes and rejected points, batches
// and lines encoded, batches refused by the encoder.
func (o *Output) ReportStats(dst []sampler.Field) []sampler.Field {
	s := o.Stats()
	return append(dst, sampler.IntField("http_requests", s.Requests), sampler.IntField("http_retries", s.Retries),
		sampler.IntField("bytes_sent", s.BytesSent), sampler.IntField("partial_writes", s.PartialWrites),
		sampler.IntField("rejected_points", s.RejectedPoints), sampler.IntField("batches", s.Batches),
		sampler.IntField("lines", s.Lines), sampler.IntField("encode_refused_batches", s.EncodeRefused))
}

// countLines counts the body's lines (bytes.Count is vectorised: a byte
// loop here cost 15% of the output's CPU in BenchmarkEndToEnd).
func countLines(b []byte) int { return bytes.Count(b, []byte{'\n'}) }

func basicAuth(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// String names the output and its endpoint.
func (o *Output) String() string {
	return fmt.Sprintf("%s %q → %s", o.w.opts.Kind, o.w.opts.Name, o.w.endpoint)
}
