package record_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

func TestClassify(t *testing.T) {
	base := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want record.ErrorKind
	}{
		{"nil", nil, record.KindNone},
		{"plain", base, record.KindRetryable},
		{"deadline", context.DeadlineExceeded, record.KindRetryable},
		{"closed", record.ErrClosed, record.KindRetryable},
		{"ErrUnavailable", record.ErrUnavailable, record.KindUnavailable},
		{"wrapped ErrUnavailable", fmt.Errorf("restarting: %w", record.ErrUnavailable), record.KindUnavailable},
		{"Unavailable", record.Unavailable(base), record.KindUnavailable},
		{"wrapped Unavailable", fmt.Errorf("plugin x: %w", record.Unavailable(base)), record.KindUnavailable},
		{"Permanent", record.Permanent(base), record.KindPermanent},
		{"wrapped Permanent", fmt.Errorf("plugin x: %w", record.Permanent(base)), record.KindPermanent},
		// a batch that cannot succeed is never held, whatever else it says
		{"Permanent over unavailable", record.Permanent(fmt.Errorf("x: %w", record.ErrUnavailable)), record.KindPermanent},
		{"Unavailable over Permanent", record.Unavailable(record.Permanent(base)), record.KindPermanent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := record.Classify(tc.err); got != tc.want {
				t.Fatalf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// Every kind survives String/ParseErrorKind and WithKind/Classify, and the
// marks keep the message and the wrapped error.
func TestErrorKindRoundTrip(t *testing.T) {
	base := io.ErrUnexpectedEOF
	for _, k := range []record.ErrorKind{record.KindNone, record.KindRetryable, record.KindUnavailable, record.KindPermanent} {
		got, ok := record.ParseErrorKind(k.String())
		if !ok || got != k {
			t.Fatalf("ParseErrorKind(%q) = %v, %v; want %v", k.String(), got, ok, k)
		}
		err := record.WithKind(base, k)
		if k == record.KindNone {
			if err != nil {
				t.Fatalf("WithKind(err, NONE) = %v, want nil", err)
			}
			continue
		}
		if c := record.Classify(err); c != k {
			t.Fatalf("Classify(WithKind(err, %v)) = %v", k, c)
		}
		if !errors.Is(err, base) || err.Error() != base.Error() {
			t.Fatalf("WithKind(err, %v) = %q; lost the wrapped error", k, err)
		}
	}
	if _, ok := record.ParseErrorKind("permanent"); ok {
		t.Fatal("ParseErrorKind accepted a lower-case name")
	}
	if record.Permanent(nil) != nil || record.Unavailable(nil) != nil {
		t.Fatal("marking nil must give nil")
	}
}

// The sentinels name the package that owns them (errors "record: ..."), and
// callers still find them through wrapping.
func TestSentinelsArePackagePrefixed(t *testing.T) {
	for _, err := range []error{record.ErrClosed, record.ErrUnavailable} {
		if got := err.Error(); len(got) < len("record: ") || got[:len("record: ")] != "record: " {
			t.Errorf("sentinel %q lacks the package prefix %q", got, "record: ")
		}
		if !errors.Is(fmt.Errorf("write batch 7: %w", err), err) {
			t.Errorf("errors.Is does not find %q through wrapping", err)
		}
	}
}

// record.RetryAfter marks an error with a hint without changing its kind, through
// any wrapping; nil and non-positive hints mark nothing.
func TestRetryAfter(t *testing.T) {
	base := errors.New("sink: 429")
	for _, tc := range []struct {
		err  error
		kind record.ErrorKind
		hint time.Duration
	}{
		{record.RetryAfter(base, time.Second), record.KindRetryable, time.Second},
		{record.Unavailable(record.RetryAfter(base, 2*time.Second)), record.KindUnavailable, 2 * time.Second},
		{record.RetryAfter(record.Unavailable(base), 3*time.Second), record.KindUnavailable, 3 * time.Second},
		{fmt.Errorf("write: %w", record.Permanent(record.RetryAfter(base, 4*time.Second))), record.KindPermanent, 4 * time.Second},
		{record.RetryAfter(base, 0), record.KindRetryable, 0},
		{base, record.KindRetryable, 0},
	} {
		hint, ok := record.RetryAfterOf(tc.err)
		if record.Classify(tc.err) != tc.kind || hint != tc.hint || ok != (tc.hint > 0) || tc.err.Error() != "write: sink: 429" && tc.err.Error() != base.Error() {
			t.Errorf("%v: %v, hint %v %v; want %v, %v", tc.err, record.Classify(tc.err), hint, ok, tc.kind, tc.hint)
		}
	}
	if record.RetryAfter(nil, time.Second) != nil {
		t.Error("record.RetryAfter(nil) != nil")
	}
}
