package sampler

import (
	"context"
	"errors"
)

// ErrClosed is returned by an Output's Write after Close.
var ErrClosed = errors.New("sampler: output closed")

// ErrUnavailable is wrapped by an Output's Write error when the output is
// temporarily unable to take batches (a plugin restarting, a sink down) and
// the same batch should be offered again. The pump then keeps the batch —
// same Seq — and retries it on its next flush, reading nothing more from
// the rings until it goes through; what the rings overwrite meanwhile is
// counted as dropped. Any other error fails the batch (counted as failed).
var ErrUnavailable = errors.New("sampler: output unavailable")

// Output receives batches of records from its pump. Built-in in-process
// outputs (stdout), network outputs and the plugin client all implement it;
// the fan-out cannot tell them apart.
//
// Concurrency and ownership: one pump calls Write and Close from a single
// goroutine, never concurrently. The Batch and every slice in it belong to
// the pump and are reused after Write returns: an output must not retain any
// of it (copy what it needs). Write should honour ctx's deadline. After Close,
// Write returns ErrClosed; a second Close returns nil. A Write error that
// wraps ErrUnavailable asks the pump to offer the same batch again later.
type Output interface {
	Write(ctx context.Context, b *Batch) error
	Close() error
}
