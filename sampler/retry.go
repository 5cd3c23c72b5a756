package sampler

import "errors"

// Permanent marks err as permanent: the sink rejected the batch itself
// (malformed, too large, a type clash) and sending the same batch again
// cannot succeed. An Output returns Permanent(err) from Write for such a
// rejection; every other error is retryable (a timeout, a refused
// connection, a sink that is restarting). Buffers retry retryable errors
// with backoff and drop, count and log a batch rejected as permanent.
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
