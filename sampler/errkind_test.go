package sampler_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// refusing refuses every batch with an error of one kind and records how
// often each batch (by its first sample's number) was offered.
type refusing struct {
	err    error
	mu     sync.Mutex
	offers map[float64]int
}

func (r *refusing) Write(ctx context.Context, b *record.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(b.Samples) > 0 {
		r.offers[b.Samples[0].Value]++
	}
	return r.err
}

func (r *refusing) Close() error { return nil }

// The pump honours each kind: a permanent refusal fails the batch at its
// first offer, a retryable one after RetryableOffers offers; either way
// the next batch goes on and the accounting stays exact.
func TestPumpHonoursErrorKind(t *testing.T) {
	for _, tc := range []struct {
		kind       record.ErrorKind
		wantOffers int
	}{
		{record.KindPermanent, 1},
		{record.KindRetryable, record.RetryableOffers},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			dev := newFakeDevice(0)
			e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
				DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16})
			if err != nil {
				t.Fatal(err)
			}
			out := &refusing{err: record.WithKind(errors.New("refused"), tc.kind), offers: map[float64]int{}}
			if err := e.AddOutput("r", out, sampler.PumpOptions{FlushInterval: 5 * time.Millisecond, MaxBatch: 16,
				WriteTimeout: 50 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			runUntil(t, e, func() bool { return e.Stats().Outputs[0].WriteErrors >= 5 })
			st := e.Stats().Outputs[0]
			if st.Delivered != 0 || st.Pending != 0 || st.Failed != st.Read || st.Published != st.Failed+st.Dropped {
				t.Fatalf("stats %+v: want every read sample failed, published = failed + dropped", st)
			}
			out.mu.Lock()
			defer out.mu.Unlock()
			firsts := slices.Sorted(maps.Keys(out.offers))
			if len(firsts) < 5 {
				t.Fatalf("only %d distinct batches offered", len(firsts))
			}
			// The last batch may have been given up at stop before its
			// last offer; every other was offered exactly wantOffers times.
			for _, v := range firsts[:len(firsts)-1] {
				if n := out.offers[v]; n != tc.wantOffers {
					t.Fatalf("batch starting at sample %v offered %d times, want %d (all: %v)", v, n, tc.wantOffers, out.offers)
				}
			}
			if n := out.offers[firsts[len(firsts)-1]]; n > tc.wantOffers {
				t.Fatalf("last batch offered %d times, want at most %d", n, tc.wantOffers)
			}
		})
	}
}
