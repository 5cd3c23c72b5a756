package sampler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/sampler"
)

func TestClassify(t *testing.T) {
	base := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want sampler.ErrorKind
	}{
		{"nil", nil, sampler.KindNone},
		{"plain", base, sampler.KindRetryable},
		{"deadline", context.DeadlineExceeded, sampler.KindRetryable},
		{"closed", sampler.ErrClosed, sampler.KindRetryable},
		{"ErrUnavailable", sampler.ErrUnavailable, sampler.KindUnavailable},
		{"wrapped ErrUnavailable", fmt.Errorf("restarting: %w", sampler.ErrUnavailable), sampler.KindUnavailable},
		{"Unavailable", sampler.Unavailable(base), sampler.KindUnavailable},
		{"wrapped Unavailable", fmt.Errorf("plugin x: %w", sampler.Unavailable(base)), sampler.KindUnavailable},
		{"Permanent", sampler.Permanent(base), sampler.KindPermanent},
		{"wrapped Permanent", fmt.Errorf("plugin x: %w", sampler.Permanent(base)), sampler.KindPermanent},
		// a batch that cannot succeed is never held, whatever else it says
		{"Permanent over unavailable", sampler.Permanent(fmt.Errorf("x: %w", sampler.ErrUnavailable)), sampler.KindPermanent},
		{"Unavailable over Permanent", sampler.Unavailable(sampler.Permanent(base)), sampler.KindPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sampler.Classify(tc.err); got != tc.want {
				t.Fatalf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// Every kind survives String/ParseErrorKind and WithKind/Classify, and the
// marks keep the message and the wrapped error.
func TestErrorKindRoundTrip(t *testing.T) {
	base := io.ErrUnexpectedEOF
	for _, k := range []sampler.ErrorKind{sampler.KindNone, sampler.KindRetryable, sampler.KindUnavailable, sampler.KindPermanent} {
		got, ok := sampler.ParseErrorKind(k.String())
		if !ok || got != k {
			t.Fatalf("ParseErrorKind(%q) = %v, %v; want %v", k.String(), got, ok, k)
		}
		err := sampler.WithKind(base, k)
		if k == sampler.KindNone {
			if err != nil {
				t.Fatalf("WithKind(err, NONE) = %v, want nil", err)
			}
			continue
		}
		if c := sampler.Classify(err); c != k {
			t.Fatalf("Classify(WithKind(err, %v)) = %v", k, c)
		}
		if !errors.Is(err, base) || err.Error() != base.Error() {
			t.Fatalf("WithKind(err, %v) = %q; lost the wrapped error", k, err)
		}
	}
	if _, ok := sampler.ParseErrorKind("permanent"); ok {
		t.Fatal("ParseErrorKind accepted a lower-case name")
	}
	if sampler.Permanent(nil) != nil || sampler.Unavailable(nil) != nil {
		t.Fatal("marking nil must give nil")
	}
}

// refusing refuses every batch with an error of one kind and records how
// often each batch (by its first sample's number) was offered.
type refusing struct {
	err    error
	mu     sync.Mutex
	offers map[float64]int
}

func (r *refusing) Write(ctx context.Context, b *sampler.Batch) error {
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
		kind       sampler.ErrorKind
		wantOffers int
	}{
		{sampler.KindPermanent, 1},
		{sampler.KindRetryable, sampler.RetryableOffers},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			dev := newFakeDevice(0)
			e, err := sampler.New(&fakeSource{devs: []*fakeDevice{dev}}, sampler.Config{
				DrainInterval: 20 * time.Millisecond, Select: onlyPowerBuffer, RingSize: 1 << 16})
			if err != nil {
				t.Fatal(err)
			}
			out := &refusing{err: sampler.WithKind(errors.New("refused"), tc.kind), offers: map[float64]int{}}
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
