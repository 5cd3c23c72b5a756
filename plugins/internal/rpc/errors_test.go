package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record"
)

// scripted returns whatever error the test put in err.
type scripted struct{ err error }

func (s *scripted) Write(context.Context, *record.Batch) error { return s.err }
func (s *scripted) Close() error                               { return nil }

// serve runs a Server for out over an in-memory gRPC connection and
// returns a configured host-side Client.
func serve(t *testing.T, out record.Output) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(ServerOptions()...)
	proto.RegisterOutputServer(srv, NewServer(func(tb *config.Table, _ Env) (record.Output, error) {
		tb.Finish()
		return out, nil
	}, nil))
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", append(DialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := NewClient(proto.NewOutputClient(conn), nil)
	if err := c.Configure(context.Background(), ConfigureInput{Name: "t", Kind: "plugin", Catalog: catalog.Default()}); err != nil {
		t.Fatal(err)
	}
	return c
}

// Every kind of Write error crosses the protocol unchanged: the host sees
// the kind and the message the plugin's output returned.
func TestWriteErrorKindRoundTrip(t *testing.T) {
	out := &scripted{}
	c := serve(t, out)
	base := errors.New("influxdb: 400: field type conflict")
	for _, tc := range []struct {
		name     string
		err      error
		want     record.ErrorKind
		wantCode codes.Code
	}{
		{"none", nil, record.KindNone, codes.OK},
		{"retryable", base, record.KindRetryable, codes.Unknown},
		{"retryable deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), record.KindRetryable, codes.DeadlineExceeded},
		{"retryable closed", record.ErrClosed, record.KindRetryable, codes.FailedPrecondition},
		{"unavailable", record.Unavailable(base), record.KindUnavailable, codes.Unavailable},
		{"unavailable sentinel", fmt.Errorf("sink down: %w", record.ErrUnavailable), record.KindUnavailable, codes.Unavailable},
		{"permanent", record.Permanent(base), record.KindPermanent, codes.InvalidArgument},
		{"permanent wrapped", fmt.Errorf("write: %w", record.Permanent(base)), record.KindPermanent, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out.err = tc.err
			err := c.Write(context.Background(), &record.Batch{Seq: 1, Samples: []record.Sample{{TimeNS: 1, Value: 2}}})
			if got := record.Classify(err); got != tc.want {
				t.Fatalf("host sees %v (%v), want %v", got, err, tc.want)
			}
			if err == nil {
				return
			}
			if want := "write: " + tc.err.Error(); err.Error() != want {
				t.Fatalf("host's message %q, want %q", err, want)
			}
			if IsTransport(err) {
				t.Fatal("an answer from the plugin's output counted as a transport failure")
			}
			if st := WriteStatus(tc.err); st.Code() != tc.wantCode {
				t.Fatalf("status code %v, want %v", st.Code(), tc.wantCode)
			}
		})
	}
}

// An error's retry hint crosses the protocol with its kind.
func TestWriteErrorRetryAfterRoundTrip(t *testing.T) {
	out := &scripted{}
	c := serve(t, out)
	base := errors.New("otlp: 429 Too Many Requests")
	for _, tc := range []struct {
		err  error
		kind record.ErrorKind
		hint time.Duration
	}{
		{record.Unavailable(record.RetryAfter(base, 7*time.Second)), record.KindUnavailable, 7 * time.Second},
		{record.RetryAfter(base, 1500*time.Millisecond), record.KindRetryable, 1500 * time.Millisecond},
		{record.Unavailable(base), record.KindUnavailable, 0},
	} {
		out.err = tc.err
		err := c.Write(context.Background(), &record.Batch{Seq: 1, Samples: []record.Sample{{TimeNS: 1, Value: 2}}})
		hint, ok := record.RetryAfterOf(err)
		if record.Classify(err) != tc.kind || hint != tc.hint || ok != (tc.hint > 0) {
			t.Errorf("%v: host sees %v (%v) with hint %v, want %v with %v", tc.err, err, record.Classify(err), hint, tc.kind, tc.hint)
		}
	}
}

// A status without the kind detail (the transport, an older plugin) is
// classified by its code.
func TestStatusWithoutDetail(t *testing.T) {
	for _, tc := range []struct {
		code      codes.Code
		want      record.ErrorKind
		transport bool
	}{
		{codes.Unavailable, record.KindUnavailable, true},
		{codes.DeadlineExceeded, record.KindUnavailable, true},
		{codes.Canceled, record.KindUnavailable, true},
		{codes.ResourceExhausted, record.KindUnavailable, false},
		{codes.InvalidArgument, record.KindPermanent, false},
		{codes.Unknown, record.KindRetryable, false},
		{codes.Internal, record.KindRetryable, false},
	} {
		err := statusError(status.Error(tc.code, "x"))
		if got := record.Classify(err); got != tc.want || IsTransport(err) != tc.transport {
			t.Errorf("code %v: kind %v transport %v, want %v %v", tc.code, got, IsTransport(err), tc.want, tc.transport)
		}
	}
	if err := errors.New("not a status"); statusError(err) != err {
		t.Error("a non-status error was changed")
	}
}
