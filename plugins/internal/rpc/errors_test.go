package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/sampler"
)

// scripted returns whatever error the test put in err.
type scripted struct{ err error }

func (s *scripted) Write(context.Context, *sampler.Batch) error { return s.err }
func (s *scripted) Close() error                                { return nil }

// serve runs a Server for out over an in-memory gRPC connection and
// returns a configured host-side Client.
func serve(t *testing.T, out sampler.Output) *Client {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(ServerOptions()...)
	proto.RegisterOutputServer(srv, NewServer(func(tb *config.Table, _ Env) (sampler.Output, error) {
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
	if err := c.Configure(context.Background(), ConfigureInput{Name: "t", Kind: "plugin", Catalog: sampler.DefaultCatalog}); err != nil {
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
		want     sampler.ErrorKind
		wantCode codes.Code
	}{
		{"none", nil, sampler.KindNone, codes.OK},
		{"retryable", base, sampler.KindRetryable, codes.Unknown},
		{"retryable deadline", fmt.Errorf("post: %w", context.DeadlineExceeded), sampler.KindRetryable, codes.DeadlineExceeded},
		{"retryable closed", sampler.ErrClosed, sampler.KindRetryable, codes.FailedPrecondition},
		{"unavailable", sampler.Unavailable(base), sampler.KindUnavailable, codes.Unavailable},
		{"unavailable sentinel", fmt.Errorf("sink down: %w", sampler.ErrUnavailable), sampler.KindUnavailable, codes.Unavailable},
		{"permanent", sampler.Permanent(base), sampler.KindPermanent, codes.InvalidArgument},
		{"permanent wrapped", fmt.Errorf("write: %w", sampler.Permanent(base)), sampler.KindPermanent, codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out.err = tc.err
			err := c.Write(context.Background(), &sampler.Batch{Seq: 1, Samples: []sampler.Sample{{TimeNS: 1, Value: 2}}})
			if got := sampler.Classify(err); got != tc.want {
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

// A status without the kind detail (the transport, an older plugin) is
// classified by its code.
func TestStatusWithoutDetail(t *testing.T) {
	for _, tc := range []struct {
		code      codes.Code
		want      sampler.ErrorKind
		transport bool
	}{
		{codes.Unavailable, sampler.KindUnavailable, true},
		{codes.DeadlineExceeded, sampler.KindUnavailable, true},
		{codes.Canceled, sampler.KindUnavailable, true},
		{codes.ResourceExhausted, sampler.KindUnavailable, false},
		{codes.InvalidArgument, sampler.KindPermanent, false},
		{codes.Unknown, sampler.KindRetryable, false},
		{codes.Internal, sampler.KindRetryable, false},
	} {
		err := statusError(status.Error(tc.code, "x"))
		if got := sampler.Classify(err); got != tc.want || IsTransport(err) != tc.transport {
			t.Errorf("code %v: kind %v transport %v, want %v %v", tc.code, got, IsTransport(err), tc.want, tc.transport)
		}
	}
	if err := errors.New("not a status"); statusError(err) != err {
		t.Error("a non-status error was changed")
	}
}
