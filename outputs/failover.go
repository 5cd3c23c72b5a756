package outputs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// Failover writes to one of several equivalent sinks (an output's urls or
// endpoints): each Write goes to the sink that took the last one; on a
// retryable or unavailable failure the next sink gets it, each try an
// equal share of what is left of the Write's deadline, and the first sink
// that takes it is kept. A permanent refusal is returned at once: another
// sink would refuse the same records. One attempt per sink per Write: the
// caller's pump or buffer owns retries.
//
// Failover is used from the output's Write goroutine only; Failovers may
// be read from any goroutine through the counter the caller passes.
type Failover struct {
	// N is the number of sinks (≥ 1).
	N   int
	cur int
}

// Current returns the index of the sink in use.
func (f *Failover) Current() int { return f.cur }

// Do calls try for the sink in use and, while it fails retryably, for the
// next ones in turn. It returns the sink that took the write (from, to
// differ when it failed over) and nil, or the permanent error, or every
// sink's error joined.
func (f *Failover) Do(ctx context.Context, try func(ctx context.Context, sink int) error) (from, to int, err error) {
	from = f.cur
	if f.N <= 1 {
		return from, from, try(ctx, 0)
	}
	var errs []error
	for i := range f.N {
		k := (f.cur + i) % f.N
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok && i < f.N-1 {
			tctx, cancel = context.WithTimeout(ctx, time.Until(dl)/time.Duration(f.N-i))
		}
		err := try(tctx, k)
		cancel()
		if err == nil {
			f.cur = k
			return from, k, nil
		}
		if record.IsPermanent(err) || ctx.Err() != nil {
			return from, from, err
		}
		errs = append(errs, err)
	}
	return from, from, fmt.Errorf("every server failed: %w", errors.Join(errs...))
}
