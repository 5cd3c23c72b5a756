// Package stdout is the in-process output that writes records to the
// process's standard output (or any io.Writer): InfluxDB line protocol
// shaped like Telegraf's nvidia_smi input, JSON Lines, a live table like
// `nvidia-smi dmon` (one row per GPU per interval, mean and max), or the
// live table of the per-job accounts ("jobs"). It runs in process
// because a plugin's stdout carries the go-plugin handshake.
package stdout

import (
	"bufio"
	"context"
	_ "embed"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// SampleConfig is this output's fragment of the example configuration.
//
//go:embed sample.conf
var SampleConfig string

// Formats lists the supported formats.
var Formats = []string{"influx", "json", "table", "jobs"}

// DefaultTableInterval is the table format's row interval when the block
// sets no aggregate interval.
const DefaultTableInterval = time.Second

// Options configure the output.
type Options struct {
	// Format is one of Formats ("influx" by default).
	Format string
	// Host names the host in every record.
	Host string
	// GlobalTags are added to every record.
	GlobalTags map[string]string
	// Color highlights hot cells in the table format (only set it for a
	// terminal).
	Color bool
	// Location renders the table's times (default time.Local).
	Location *time.Location
	// Catalog is the metric catalog the batches' metric IDs refer to
	// (catalog.Default() when nil).
	Catalog *catalog.Catalog
}

type encoder interface {
	Encode(*record.Batch)
	Bytes() []byte
	Reset()
}

// Output writes encoded batches to a writer. Write and Close follow
// record.Output's rules (one goroutine; the batch is not retained).
type Output struct {
	w      *bufio.Writer
	enc    encoder
	closed bool
}

// New returns an output writing to w.
func New(w io.Writer, opts Options) (*Output, error) {
	var enc encoder
	switch opts.Format {
	case "", "influx":
		var tags []lineproto.Tag
		for _, k := range slices.Sorted(maps.Keys(opts.GlobalTags)) {
			tags = append(tags, lineproto.Tag{Key: k, Value: opts.GlobalTags[k]})
		}
		enc = lineproto.New(lineproto.Options{Host: opts.Host, GlobalTags: tags, Catalog: opts.Catalog})
	case "json":
		enc = jsonl.New(jsonl.Options{Host: opts.Host, GlobalTags: opts.GlobalTags, Catalog: opts.Catalog})
	case "table":
		enc = newTableEncoder(opts.Location, opts.Color, opts.Catalog)
	case "jobs":
		enc = newJobsEncoder()
	default:
		return nil, fmt.Errorf("stdout: unknown format %q (want one of: %s)", opts.Format, strings.Join(Formats, ", "))
	}
	return &Output{w: bufio.NewWriterSize(w, 64<<10), enc: enc}, nil
}

// Write encodes b and writes it out, flushed, before returning.
func (o *Output) Write(_ context.Context, b *record.Batch) error {
	if o.closed {
		return record.ErrClosed
	}
	o.enc.Reset()
	o.enc.Encode(b)
	if e, ok := o.enc.(interface{ Err() error }); ok && e.Err() != nil {
		// A line was skipped: writing the rest would count the skipped
		// records as delivered. Refuse the batch, so all are counted.
		return record.Permanent(fmt.Errorf("stdout: batch of %d records not written: a line cannot be encoded: %w", b.Len(), e.Err()))
	}
	if _, err := o.w.Write(o.enc.Bytes()); err != nil {
		return outputs.StdoutError("stdout", err)
	}
	if err := o.w.Flush(); err != nil {
		return outputs.StdoutError("stdout", err)
	}
	return nil
}

// Close flushes; a second Close does nothing. A reader that is gone (a
// closed pipe) is no error at Close.
func (o *Output) Close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	if f, ok := o.enc.(interface{ Flush() }); ok {
		o.enc.Reset()
		f.Flush()
		if _, err := o.w.Write(o.enc.Bytes()); err != nil {
			return closeError(err)
		}
	}
	if err := o.w.Flush(); err != nil {
		return closeError(err)
	}
	return nil
}

// closeError is Close's error for a failed write: none when the reader is
// gone for good (the Write that found it so returned the error and its
// batch was counted failed; a closed pipe is how `| head` ends a run).
func closeError(err error) error {
	if err = outputs.StdoutError("stdout", err); record.IsPermanent(err) {
		return nil
	}
	return err
}
