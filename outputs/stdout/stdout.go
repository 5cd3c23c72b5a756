// Package stdout is the in-process output that writes records to the
// process's standard output (or any io.Writer): InfluxDB line protocol
// shaped like Telegraf's nvidia_smi input, or JSON Lines. It runs in process
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

	"github.com/gpusampler/gpusampler/outputs/encoding/jsonl"
	"github.com/gpusampler/gpusampler/outputs/encoding/lineproto"
	"github.com/gpusampler/gpusampler/sampler"
)

// SampleConfig is this output's fragment of the example configuration.
//
//go:embed sample.conf
var SampleConfig string

// Formats lists the supported formats.
var Formats = []string{"influx", "json"}

// Options configure the output.
type Options struct {
	// Format is "influx" (default) or "json".
	Format string
	// Host names the host in every record.
	Host string
	// GlobalTags are added to every record.
	GlobalTags map[string]string
}

type encoder interface {
	Encode(*sampler.Batch)
	Bytes() []byte
	Reset()
}

// Output writes encoded batches to a writer. Write and Close follow
// sampler.Output's rules (one goroutine; the batch is not retained).
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
		enc = lineproto.New(lineproto.Options{Host: opts.Host, GlobalTags: tags})
	case "json":
		enc = jsonl.New(jsonl.Options{Host: opts.Host, GlobalTags: opts.GlobalTags})
	default:
		return nil, fmt.Errorf("stdout: unknown format %q (want one of: %s)", opts.Format, strings.Join(Formats, ", "))
	}
	return &Output{w: bufio.NewWriterSize(w, 64<<10), enc: enc}, nil
}

// Write encodes b and writes it out, flushed, before returning.
func (o *Output) Write(_ context.Context, b *sampler.Batch) error {
	if o.closed {
		return sampler.ErrClosed
	}
	o.enc.Reset()
	o.enc.Encode(b)
	if _, err := o.w.Write(o.enc.Bytes()); err != nil {
		return fmt.Errorf("stdout: %w", err)
	}
	if err := o.w.Flush(); err != nil {
		return fmt.Errorf("stdout: %w", err)
	}
	return nil
}

// Close flushes; a second Close does nothing.
func (o *Output) Close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	if err := o.w.Flush(); err != nil {
		return fmt.Errorf("stdout: %w", err)
	}
	return nil
}
