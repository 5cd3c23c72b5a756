package buffer

import (
	"errors"
	"fmt"
	"time"
)

// Buffer kinds, the values of Config.Kind.
const (
	// KindNone: no buffer; Wrap returns the output unchanged. The ring is
	// then the only buffer, and a failed Write costs its batch (counted by
	// the pump as failed).
	KindNone = "none"
	// KindMemory: a bounded in-memory queue; lost on restart.
	KindMemory = "memory"
	// KindDisk: a bounded on-disk queue that survives restarts.
	KindDisk = "disk"
)

// MinDiskBytes is the smallest max_bytes a configured disk buffer takes:
// its files are counted in whole 4 KiB blocks against max_bytes, three of
// them for the cursor and the directory, and it needs room for segments.
const MinDiskBytes = 64 << 10

// Defaults applied by Wrap to zero durations.
const (
	DefaultFsyncInterval = time.Second
	DefaultRetryInitial  = 100 * time.Millisecond
	DefaultRetryMax      = 30 * time.Second
	DefaultCloseTimeout  = 5 * time.Second
)

// Config configures one output's buffer. It is plain data: Validate checks
// it without touching the disk, Wrap builds the buffer. Field names in
// errors are the TOML keys (buffer.max_bytes, ...).
type Config struct {
	// Kind is "none" (or empty), "memory" or "disk".
	Kind string
	// MaxBytes bounds the queued bytes (encoded batches; for disk also the
	// 24-byte record headers). Required for memory and disk.
	MaxBytes int64
	// MaxRecords bounds the queued records (devices + samples + events).
	// Required for memory; optional for disk (0: bytes only).
	MaxRecords int
	// Dir is the disk queue's directory, one per output. Required for disk.
	Dir string
	// FsyncInterval: how often the disk queue fsyncs appended data and
	// commits its read cursor (also on Close). Default 1s.
	FsyncInterval time.Duration
	// RetryInitial and RetryMax bound the exponential backoff between
	// retries of a retryable error (jittered, doubling, capped at
	// RetryMax). Defaults 100ms and 30s.
	RetryInitial, RetryMax time.Duration
	// CloseTimeout bounds how long Close keeps delivering what is queued.
	// Default 5s.
	CloseTimeout time.Duration
}

// Validate checks c and returns every problem found, each naming its field.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("buffer.%s: "+format, append([]any{field}, args...)...))
	}
	switch c.Kind {
	case "", KindNone:
		return nil
	case KindMemory, KindDisk:
	default:
		bad("kind", "unknown kind %q (want %q, %q or %q)", c.Kind, KindNone, KindMemory, KindDisk)
		return errors.Join(errs...)
	}
	if c.MaxBytes <= 0 {
		bad("max_bytes", "must be positive")
	}
	switch {
	case c.MaxRecords < 0:
		bad("max_records", "must not be negative")
	case c.Kind == KindMemory && c.MaxRecords == 0:
		bad("max_records", "must be positive for kind %q", KindMemory)
	}
	if c.Kind == KindDisk && c.Dir == "" {
		bad("dir", "required for kind %q", KindDisk)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"fsync_interval", c.FsyncInterval}, {"retry_initial", c.RetryInitial}, {"retry_max", c.RetryMax},
		{"close_timeout", c.CloseTimeout}} {
		if d.v < 0 {
			bad(d.name, "must not be negative")
		}
	}
	if c.RetryInitial > 0 && c.RetryMax > 0 && c.RetryMax < c.RetryInitial {
		bad("retry_max", "must be at least retry_initial (%s)", c.RetryInitial)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero durations replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Kind == "" {
		c.Kind = KindNone
	}
	if c.FsyncInterval == 0 {
		c.FsyncInterval = DefaultFsyncInterval
	}
	if c.RetryInitial == 0 {
		c.RetryInitial = DefaultRetryInitial
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(DefaultRetryMax, c.RetryInitial)
	}
	if c.CloseTimeout == 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	return c
}
