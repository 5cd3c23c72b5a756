package opentelemetry

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/gpusampler/gpusampler/record"
)

// exportMethod is OTLP/gRPC's metrics export: the request is an
// ExportMetricsServiceRequest, which is wire-identical to the MetricsData
// the encoder builds (both are `repeated ResourceMetrics resource_metrics =
// 1`), so the bytes go as they are and the collector package (and the
// HTTP gateway it links) stays out of the binary.
const exportMethod = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"

// grpcExporter exports to one OTLP/gRPC endpoint over one client
// connection (connected lazily, reconnected by gRPC).
type grpcExporter struct {
	addr string
	conn *grpc.ClientConn
	md   metadata.MD
	opts []grpc.CallOption
}

func newGRPCExporter(ep endpoint, opts *Options, o *Output) (*grpcExporter, error) {
	creds := insecure.NewCredentials()
	if ep.secure {
		tc := opts.TLS
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(tc)
	}
	// A collector back after an outage is found within ~5 s: gRPC's
	// default reconnect backoff grows to 2 minutes.
	bo := backoff.DefaultConfig
	bo.MaxDelay = 5 * time.Second
	conn, err := grpc.NewClient(ep.target, grpc.WithTransportCredentials(creds), grpc.WithUserAgent("gpusampler"),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}),
		grpc.WithStatsHandler(wireCounter{o}))
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", ep.target, err)
	}
	g := &grpcExporter{addr: ep.target, conn: conn, opts: []grpc.CallOption{grpc.ForceCodecV2(rawCodec{})}}
	if opts.Gzip {
		g.opts = append(g.opts, grpc.UseCompressor(gzip.Name))
	}
	if len(opts.Headers) > 0 {
		g.md = metadata.MD{}
		for k, v := range opts.Headers {
			g.md.Append(strings.ToLower(k), v)
		}
	}
	return g, nil
}

func (g *grpcExporter) target() string { return g.addr }
func (g *grpcExporter) close()         { g.conn.Close() }

func (g *grpcExporter) export(ctx context.Context, body []byte) (int64, string, error) {
	if g.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, g.md)
	}
	var resp rawMessage
	if err := g.conn.Invoke(ctx, exportMethod, &rawMessage{data: body}, &resp, g.opts...); err != nil {
		return 0, "", grpcError(err)
	}
	rejected, msg := decodeExportResponse(resp.data)
	return rejected, msg, nil
}

// grpcError classifies an export's gRPC status as OTLP/gRPC says: the
// retryable codes are CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE,
// UNAVAILABLE and DATA_LOSS, and RESOURCE_EXHAUSTED when the status
// carries a RetryInfo (the collector's memory limiter); the delay in a
// RetryInfo is the hint the retrier waits. UNAVAILABLE and a throttling
// RESOURCE_EXHAUSTED are record.Unavailable (the collector is down or
// overloaded: the batch waits for it), like UNAUTHENTICATED and
// PERMISSION_DENIED (the batch is fine; credentials are not yet valid).
// Any other code is permanent: sending the same request cannot succeed.
func grpcError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	var delay time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			delay = max(ri.GetRetryDelay().AsDuration(), time.Millisecond)
		}
	}
	e := &StatusError{Code: st.Code(), Message: st.Message(), RetryDelay: delay}
	switch st.Code() {
	case codes.Unavailable, codes.Unauthenticated, codes.PermissionDenied:
		return record.Unavailable(record.RetryAfter(e, delay))
	case codes.ResourceExhausted:
		if delay > 0 {
			return record.Unavailable(record.RetryAfter(e, delay))
		}
		return record.Permanent(e)
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.DataLoss:
		return record.RetryAfter(e, delay)
	}
	return record.Permanent(e)
}

// StatusError is an export the collector (or the gRPC transport) answered
// with a non-OK gRPC status.
type StatusError struct {
	Code    codes.Code
	Message string
	// RetryDelay is the status's RetryInfo delay (0: none).
	RetryDelay time.Duration
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("rpc error: %s: %s", e.Code, e.Message)
	if e.RetryDelay > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.RetryDelay)
	}
	return s
}

// rawMessage is a serialized protobuf message, sent and received as is.
type rawMessage struct{ data []byte }

// rawCodec passes rawMessage bytes through. Its name is "proto", so the
// content type stays application/grpc+proto.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.data)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	m.data = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// wireCounter counts the bytes of the export messages as they go on the
// wire (compressed, with gRPC's framing) into Stats.WireBytes.
type wireCounter struct{ o *Output }

func (w wireCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (w wireCounter) HandleRPC(_ context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.OutPayload); ok {
		w.o.st.wire.Add(uint64(p.WireLength))
	}
}
func (w wireCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (w wireCounter) HandleConn(context.Context, stats.ConnStats)                       {}
