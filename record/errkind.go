package record

import (
	"errors"
	"fmt"
	"time"
)

// ErrorKind is what an Output's Write error asks of whoever offered the
// batch. It is the one error contract of every hop a batch takes — pump,
// aggregation, buffer, plugin client and protocol, writers — and Classify
// is its one classifier: a wrapper that passes an inner output's error on
// keeps the inner output's kind (wrap with %w).
type ErrorKind uint8

// The error kinds, from Classify.
const (
	// KindNone is the kind of a nil error: the batch was accepted.
	KindNone ErrorKind = iota
	// KindRetryable: this attempt failed (a timeout, a broken connection,
	// a 5xx), and offering the same batch again may succeed. It is the
	// kind of every error not marked otherwise. A buffer retries it with
	// backoff for as long as it runs; a pump offers the batch again on
	// its next flushes, a few times (RetryableOffers), then counts it as
	// failed.
	KindRetryable
	// KindUnavailable: the output cannot take any batch now (a plugin
	// restarting, a sink down) and the same batch should be offered again
	// later. A pump holds the batch (same Seq) and reads nothing more
	// until it goes through; a buffer retries it with backoff.
	KindUnavailable
	// KindPermanent: the sink rejected the batch itself (malformed, too
	// large, a type clash) and sending it again cannot succeed. Nobody
	// retries it: the batch is counted as failed or dropped and the next
	// one goes on.
	KindPermanent
)

// String returns the kind's name as the plugin protocol carries it:
// "NONE", "RETRYABLE", "UNAVAILABLE" or "PERMANENT".
func (k ErrorKind) String() string {
	switch k {
	case KindNone:
		return "NONE"
	case KindRetryable:
		return "RETRYABLE"
	case KindUnavailable:
		return "UNAVAILABLE"
	case KindPermanent:
		return "PERMANENT"
	}
	return fmt.Sprintf("ErrorKind(%d)", uint8(k))
}

// ParseErrorKind is the inverse of ErrorKind.String; ok is false for any
// other string.
func ParseErrorKind(s string) (k ErrorKind, ok bool) {
	switch s {
	case "NONE":
		return KindNone, true
	case "RETRYABLE":
		return KindRetryable, true
	case "UNAVAILABLE":
		return KindUnavailable, true
	case "PERMANENT":
		return KindPermanent, true
	}
	return 0, false
}

// Classify returns err's kind: KindNone for nil; KindPermanent when err,
// or an error it wraps, was marked with Permanent; KindUnavailable when it
// wraps ErrUnavailable (Unavailable marks one); KindRetryable otherwise.
// Permanent wins over unavailable: a batch that cannot succeed is never
// held.
func Classify(err error) ErrorKind {
	switch {
	case err == nil:
		return KindNone
	case IsPermanent(err):
		return KindPermanent
	case errors.Is(err, ErrUnavailable):
		return KindUnavailable
	}
	return KindRetryable
}

// WithKind marks err with kind k: Permanent(err) for KindPermanent,
// Unavailable(err) for KindUnavailable, err unchanged for KindRetryable (the
// default kind) and nil for KindNone. Classify(WithKind(err, k)) == k for
// every non-nil err, as long as err itself carries no other mark.
func WithKind(err error, k ErrorKind) error {
	switch k {
	case KindNone:
		return nil
	case KindPermanent:
		return Permanent(err)
	case KindUnavailable:
		return Unavailable(err)
	}
	return err
}

// Permanent marks err as permanent (KindPermanent): the sink rejected the
// batch itself (malformed, too large, a type clash) and sending the same
// batch again cannot succeed. An Output returns Permanent(err) from Write
// for such a rejection.
//
// Permanent(nil) is nil. The result wraps err: errors.Is and errors.As see
// through it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Unavailable marks err as unavailable (KindUnavailable): the output cannot
// take batches now and the same batch should be offered again later. The
// result's message is err's; it wraps both err and ErrUnavailable.
// Unavailable(nil) is nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{err: err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{e.err, ErrUnavailable} }

// RetryAfter marks err with the sink's hint of how long to wait before the
// batch is offered again (an HTTP Retry-After, an OTLP RetryInfo). It does
// not change err's kind: mark the kind as usual (Unavailable(RetryAfter(err,
// d)) or the reverse). Whoever retries — a buffer's backoff, a pump holding
// a refused batch — waits at least the hint (at most MaxRetryAfter), and
// the plugin protocol carries it across the process boundary. RetryAfter(nil, d) is nil; d <= 0
// leaves err unmarked.
func RetryAfter(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &retryAfterError{err: err, after: d}
}

// MaxRetryAfter caps the hint a retrier honours: a sink asking for longer
// is asked again after this long.
const MaxRetryAfter = 5 * time.Minute

// RetryAfterOf returns the hint an error in err's chain was marked with by
// RetryAfter (the outermost), and whether there is one.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }
