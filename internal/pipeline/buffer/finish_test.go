package buffer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// finishSink is a fakeSink that is a record.Finisher: it notes how many
// batches it had accepted at each Finish.
type finishSink struct {
	fakeSink
	mu       sync.Mutex
	finishes []int // accepted batches at each Finish
}

func (s *finishSink) Finish(context.Context) error {
	s.fakeSink.mu.Lock()
	n := len(s.fakeSink.got)
	s.fakeSink.mu.Unlock()
	s.mu.Lock()
	s.finishes = append(s.finishes, n)
	s.mu.Unlock()
	return nil
}

func (s *finishSink) Finishes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.finishes)
}

// finishAsync runs b.Finish in a goroutine; its result arrives on the
// channel.
func finishAsync(b *Buffer) <-chan error {
	done := make(chan error, 1)
	go func() { done <- b.Finish(context.Background()) }()
	return done
}

// awaitFinish returns Finish's result, failing the test if it never comes
// (a liveness guard, not a timing check).
func awaitFinish(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("Finish did not return")
		return nil
	}
}

// Finish returns once what was queued before it has been delivered, and
// only then finishes the wrapped output (so that its counters count the
// delivery): the final statistics read after it count what the sink took.
func TestFinishWaitsForDelivery(t *testing.T) {
	for _, env := range kinds {
		t.Run(env.kind, func(t *testing.T) {
			sink := &finishSink{fakeSink: fakeSink{gate: make(chan struct{}), entered: make(chan uint64, 4)}}
			b := env.newBuffer(t, sink, Config{})
			for seq := uint64(1); seq <= 2; seq++ {
				if err := b.Write(context.Background(), testBatch(seq, 3)); err != nil {
					t.Fatal(err)
				}
			}
			<-sink.entered // batch 1 is being written, held by the gate
			done := finishAsync(b)
			select {
			case err := <-done:
				t.Fatalf("Finish returned (%v) while batch 1 was still being written", err)
			default:
			}
			close(sink.gate)
			if err := awaitFinish(t, done); err != nil {
				t.Fatalf("Finish = %v, want nil (the sink took everything)", err)
			}
			if got := sink.Accepted(t); !slices.Equal(got, []uint64{1, 2}) {
				t.Errorf("accepted %v when Finish returned, want [1 2]", got)
			}
			if got := sink.Finishes(); !slices.Equal(got, []int{2}) {
				t.Errorf("the wrapped output finished with %v batches accepted, want once with 2", got)
			}
			if st := b.Stats(); st.Delivered != 2 || st.BufferedBatches != 0 {
				t.Errorf("stats after Finish: delivered %d, buffered %d; want 2, 0", st.Delivered, st.BufferedBatches)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A sink that refuses the final delivery does not hold Finish for the
// backoff: Finish returns an error once the refused batch waits for its
// retry (it stays queued: Close offers it again), without finishing the
// wrapped output, which is still to be written to.
func TestFinishReturnsWhenRefused(t *testing.T) {
	for _, env := range kinds {
		t.Run(env.kind, func(t *testing.T) {
			sink := &finishSink{fakeSink: fakeSink{script: func(call int, _ *record.Batch) error {
				if call == 1 {
					return record.Unavailable(errUnavailable)
				}
				return nil
			}}}
			// The backoff lasts until the test ends it.
			endBackoff := make(chan struct{})
			backoff := func(ctx context.Context, _ time.Duration) error {
				select {
				case <-endBackoff:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			// CloseTimeout far beyond the liveness guard: Finish must
			// return because of the backoff, not its time limit.
			b := env.newBuffer(t, sink, Config{CloseTimeout: time.Hour}, withSleep(backoff))
			if err := b.Write(context.Background(), testBatch(1, 3)); err != nil {
				t.Fatal(err)
			}
			if err := awaitFinish(t, finishAsync(b)); err == nil {
				t.Fatal("Finish = nil with the batch refused, want an error")
			}
			if got := sink.Finishes(); len(got) != 0 {
				t.Errorf("the wrapped output was finished (%v) with a batch still to deliver", got)
			}
			close(endBackoff)
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if got := sink.Accepted(t); !slices.Equal(got, []uint64{1}) {
				t.Errorf("accepted %v, want the refused batch delivered at Close", got)
			}
		})
	}
}
