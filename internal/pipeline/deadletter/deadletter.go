// Package deadletter is an Output wrapper that keeps a copy of every batch
// its output refuses as permanent (record.KindPermanent: an InfluxDB 400, a
// field-type clash) in a file the user can inspect, instead of only
// counting it.
//
// The wrapper sits directly in front of the sink's output, inside the
// buffer and the aggregate, so it sees every refusal the sink makes. It
// returns the output's error unchanged: what the pump or the buffer counts
// (failed, malformed) stays as it was; the file is a copy for inspection,
// never replayed.
//
// The file (Options.File) is a sequence of entries, each a header line and
// a payload:
//
//	{"time":"2026-12-02T06:10:33.1Z","output":"influxdb","error":"...","records":412,"bytes":6120}\n
//	<bytes bytes: the batch as records.proto's Batch, the message the buffers queue>
//
// ReadFile reads it back; `gpusampler deadletter FILE` prints it as JSON
// Lines. The file grows to at most Options.MaxBytes: a refused batch that
// does not fit is not written and is counted (Stats.Skipped).
package deadletter

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/internal/encoding/protobuf"
	"github.com/gpusampler/gpusampler/record"
)

// DefaultMaxBytes caps a dead-letter file when Options.MaxBytes is 0.
const DefaultMaxBytes = 64 << 20

// Options configure the wrapper.
type Options struct {
	// File is the dead-letter file; its directory is created if needed.
	File string
	// MaxBytes caps the file (default DefaultMaxBytes).
	MaxBytes int64
	// Output names the output in each entry.
	Output string
	// Logger receives a warning for each batch set aside (at most once a
	// minute); nil discards.
	Logger *slog.Logger
	// Now is the wall clock (default time.Now).
	Now func() time.Time
}

// Header is an entry's header line.
type Header struct {
	Time    time.Time `json:"time"`
	Output  string    `json:"output"`
	Error   string    `json:"error"`
	Records int       `json:"records"`
	Bytes   int       `json:"bytes"`
}

// Entry is one batch set aside.
type Entry struct {
	Header
	Batch record.Batch
}

// Output keeps the batches its inner output refuses as permanent. It
// follows record.Output's rules.
type Output struct {
	inner record.Output
	opts  Options

	mu      sync.Mutex // the file, across Write and Close
	f       *os.File
	size    int64
	enc     protobuf.Encoder
	buf     []byte
	lastLog time.Time

	batches, records, skipped, errs atomic.Uint64
}

// New wraps inner. It creates File's directory and checks that File can
// be opened for appending, so that a bad path fails at startup.
func New(inner record.Output, opts Options) (*Output, error) {
	if opts.File == "" {
		return nil, errors.New("deadletter: no file")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	dir := filepath.Dir(opts.File)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o022 != 0 {
		opts.Logger.Warn("dead-letter dir is writable by other users, who could plant or change its files; chmod go-w it",
			"dir", dir, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
	// O_NOFOLLOW: a symlink planted under the file's name is refused, never
	// appended through.
	f, err := os.OpenFile(opts.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("deadletter: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("deadletter: %s is not a regular file (%v)", opts.File, st.Mode().Type())
	}
	return &Output{inner: inner, opts: opts, f: f, size: st.Size()}, nil
}

// Write passes b to the inner output; when it refuses b as permanent, b is
// appended to the file. The inner output's error is returned unchanged.
func (o *Output) Write(ctx context.Context, b *record.Batch) error {
	err := o.inner.Write(ctx, b)
	if record.Classify(err) == record.KindPermanent {
		o.keep(b, err)
	}
	return err
}

func (o *Output) keep(b *record.Batch, cause error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := b.Len()
	if o.f == nil {
		o.skipped.Add(uint64(n))
		return
	}
	o.buf = o.enc.Append(o.buf[:0], b, nil)
	payload := len(o.buf)
	h := Header{Time: o.opts.Now().UTC(), Output: o.opts.Output, Error: cause.Error(), Records: n, Bytes: payload}
	line, err := json.Marshal(h)
	if err != nil { // a Header always marshals
		o.errs.Add(1)
		o.skipped.Add(uint64(n))
		return
	}
	entry := make([]byte, 0, len(line)+1+payload)
	entry = append(append(append(entry, line...), '\n'), o.buf...)
	now := o.opts.Now()
	logIt := o.lastLog.IsZero() || now.Sub(o.lastLog) >= time.Minute
	if o.size+int64(len(entry)) > o.opts.MaxBytes {
		o.skipped.Add(uint64(n))
		if logIt {
			o.lastLog = now
			o.opts.Logger.Warn("dead-letter file full; refused batch not kept", "file", o.opts.File, "max_bytes", o.opts.MaxBytes,
				"records", n, "skipped_total", o.skipped.Load(), "err", cause)
		}
		return
	}
	// One write per entry: with O_APPEND, a replacement wrapper appending
	// to the same file during a reload never interleaves with it.
	if _, err := o.f.Write(entry); err != nil {
		o.errs.Add(1)
		o.skipped.Add(uint64(n))
		o.opts.Logger.Warn("dead-letter write failed; refused batch not kept", "file", o.opts.File, "records", n, "err", err)
		return
	}
	o.size += int64(len(entry))
	o.batches.Add(1)
	o.records.Add(uint64(n))
	if logIt {
		o.lastLog = now
		o.opts.Logger.Warn("output refused a batch as permanent; kept in the dead-letter file", "file", o.opts.File,
			"records", n, "dead_lettered_total", o.records.Load(), "err", cause)
	}
}

// Finish implements record.Finisher: the wrapper holds nothing of its
// own (the file is written within Write), so it finishes the inner output.
func (o *Output) Finish(ctx context.Context) error { return record.Finish(ctx, o.inner) }

// Close closes the inner output, then the file.
func (o *Output) Close() error {
	err := o.inner.Close()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f != nil {
		if cerr := o.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("deadletter: %w", cerr)
		}
		o.f = nil
	}
	return err
}

// Stats are the wrapper's counters.
type Stats struct {
	// Batches and Records kept in the file.
	Batches, Records uint64
	// Skipped records of refused batches not kept: the file was full, or
	// writing it failed (Errors counts those writes).
	Skipped, Errors uint64
}

// Stats returns the counters (safe from any goroutine).
func (o *Output) Stats() Stats {
	return Stats{Batches: o.batches.Load(), Records: o.records.Load(), Skipped: o.skipped.Load(), Errors: o.errs.Load()}
}

// ReportStats implements record.StatsReporter: dead_letter_batches,
// dead_letter_records, dead_letter_skipped and dead_letter_errors,
// followed by the inner output's counters.
func (o *Output) ReportStats(dst []record.Field) []record.Field {
	s := o.Stats()
	dst = append(dst, record.IntField("dead_letter_batches", s.Batches), record.IntField("dead_letter_records", s.Records),
		record.IntField("dead_letter_skipped", s.Skipped), record.IntField("dead_letter_errors", s.Errors))
	return record.ReportStats(o.inner, dst)
}

// Inner returns the wrapped output.
func (o *Output) Inner() record.Output { return o.inner }

// ReadFile reads a dead-letter file's entries in order and calls fn with
// each (the entry is reused: copy what you keep). A malformed entry stops
// it with an error naming the file and the entry's byte offset.
func ReadFile(path string, fn func(*Entry) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return Read(bufio.NewReader(f), path, fn)
}

// Read is ReadFile over r; name names it in errors.
func Read(r *bufio.Reader, name string, fn func(*Entry) error) error {
	var (
		e       Entry
		off     int64
		payload []byte
	)
	for i := 1; ; i++ {
		line, err := r.ReadBytes('\n')
		if err == io.EOF && len(line) == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: entry %d at byte %d: truncated header: %w", name, i, off, err)
		}
		e.Header = Header{}
		if err := json.Unmarshal(line, &e.Header); err != nil {
			return fmt.Errorf("%s: entry %d at byte %d: header: %w", name, i, off, err)
		}
		if e.Bytes < 0 {
			return fmt.Errorf("%s: entry %d at byte %d: header: negative bytes %d", name, i, off, e.Bytes)
		}
		if cap(payload) < e.Bytes {
			payload = make([]byte, e.Bytes)
		}
		payload = payload[:e.Bytes]
		if _, err := io.ReadFull(r, payload); err != nil {
			return fmt.Errorf("%s: entry %d at byte %d: payload of %d bytes: %w", name, i, off, e.Bytes, err)
		}
		meta, err := protobuf.Decode(payload, &e.Batch)
		if err != nil {
			return fmt.Errorf("%s: entry %d at byte %d: %w", name, i, off, err)
		}
		if meta.Host != "" {
			// A refused batch replayed under another identity keeps it.
			o := &record.Origin{Host: meta.Host}
			for _, t := range meta.Tags {
				if o.Tags == nil {
					o.Tags = map[string]string{}
				}
				o.Tags[t.Key] = t.Value
			}
			e.Batch.Origin = o
		}
		off += int64(len(line) + e.Bytes)
		if err := fn(&e); err != nil {
			return err
		}
	}
}
