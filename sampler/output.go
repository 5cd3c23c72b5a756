package sampler

import (
	"context"
	"errors"
)

// ErrClosed is returned by an Output's Write after Close.
var ErrClosed = errors.New("sampler: output closed")

// Output receives batches of records from its pump. Built-in in-process
// outputs (stdout), network outputs and the plugin client all implement it;
// the fan-out cannot tell them apart.
//
// Concurrency and ownership: one pump calls Write and Close from a single
// goroutine, never concurrently. The Batch and every slice in it belong to
// the pump and are reused after Write returns: an output must not retain any
// of it (copy what it needs). Write should honour ctx's deadline. After Close,
// Write returns ErrClosed; a second Close returns nil.
type Output interface {
	Write(ctx context.Context, b *Batch) error
	Close() error
}
