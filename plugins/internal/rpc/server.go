package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
)

// Env is what a plugin's output is built with: the host's view of the
// output and the records' identity.
type Env struct {
	// Name is the output's name in the host's config.
	Name string
	// Kind is the config kind ("plugin", or a built-in kind).
	Kind string
	// Host is the host name for records.
	Host string
	// GlobalTags are added to every record.
	GlobalTags map[string]string
	// Logger writes to the plugin's stderr; the host logs each line under
	// the output's name.
	Logger *slog.Logger
	// Catalog is the metric catalog (the plugin's own copy).
	Catalog *catalog.Catalog
}

// Factory builds the plugin's output from its config block. It reports
// problems with keys through t.Errorf and calls t.Finish once it has taken
// every key it knows; a returned error fails the whole block.
type Factory func(t *config.Table, env Env) (record.Output, error)

// HealthChecker is implemented by outputs that can tell whether they can
// deliver (e.g. their sink answers). Health must return quickly.
type HealthChecker interface {
	Health(ctx context.Context) error
}

// Server serves one output over the protocol (the plugin side). Write calls
// are serialized, as record.Output requires.
type Server struct {
	proto.UnimplementedOutputServer
	factory Factory
	logger  *slog.Logger

	mu  sync.Mutex // serializes Configure, Write, Close
	out record.Output
	// live is out once configured, for Health, which must not wait for
	// a Write in progress (that holds mu).
	live   atomic.Pointer[record.Output]
	batch  record.Batch
	closed bool
	done   chan struct{}
}

// NewServer returns a server that builds its output with f on Configure.
func NewServer(f Factory, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{factory: f, logger: logger, done: make(chan struct{})}
}

// Done is closed after Close.
func (s *Server) Done() <-chan struct{} { return s.done }

// Configure implements proto.OutputServer.
func (s *Server) Configure(ctx context.Context, req *proto.ConfigureRequest) (resp *proto.ConfigureResponse, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v := req.GetProtocolVersion(); v != proto.ProtocolVersion_PROTOCOL_VERSION_1 {
		return nil, status.Errorf(codes.FailedPrecondition, "protocol_version: %d not supported (want 1)", v)
	}
	if s.out != nil || s.closed {
		return nil, status.Error(codes.FailedPrecondition, "configure: already configured")
	}
	env := Env{Name: req.GetName(), Kind: req.GetKind(), Host: req.GetHost(), GlobalTags: req.GetGlobalTags(),
		Logger: s.logger.With("output", req.GetName()), Catalog: catalog.Default()}
	t := config.NewBlockTable(DecodeTable(req.GetConfig()))
	defer func() {
		if r := recover(); r != nil {
			s.logger.Error("configure panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "configure panicked: %v", r)
		}
	}()
	out, ferr := s.factory(t, env) // the factory calls t.Finish
	if terr := t.Err(); terr != nil {
		if out != nil {
			out.Close()
		}
		return &proto.ConfigureResponse{Errors: ConfigErrors(terr)}, nil
	}
	if ferr != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", ferr)
	}
	if out == nil {
		return nil, status.Error(codes.Internal, "configure: plugin returned no output")
	}
	s.out = out
	s.live.Store(&out)
	return &proto.ConfigureResponse{}, nil
}

// Write implements proto.OutputServer. A panic in the output's Write is
// recovered and returned as a retryable error (the stack is logged): in a
// process shared by several outputs it must not end the others.
func (s *Server) Write(ctx context.Context, req *proto.WriteRequest) (resp *proto.WriteResponse, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			s.batch.Reset()
			s.logger.Error("write panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, WriteStatus(fmt.Errorf("write panicked: %v", r)).Err()
		}
	}()
	if s.closed {
		return nil, status.Error(codes.FailedPrecondition, "write: output closed")
	}
	if s.out == nil {
		return nil, status.Error(codes.FailedPrecondition, "write: not configured")
	}
	if err := decodeBatch(req, &s.batch); err != nil {
		// The same bytes will not decode next time either.
		return nil, WriteStatus(record.Permanent(fmt.Errorf("write: %w", err))).Err()
	}
	// The output's deadline ends before the host's call does (the deadline
	// budget): a slow sink's error reaches the host in time, as an error,
	// not as a call that ran past its timeout.
	octx, cancel := record.HopContext(ctx)
	werr := s.out.Write(octx, &s.batch)
	cancel()
	s.batch.Reset()
	if werr != nil {
		return nil, WriteStatus(werr).Err()
	}
	return &proto.WriteResponse{}, nil
}

// ErrorDomain is the Domain of the errdetails.ErrorInfo that a plugin's
// Write error carries; its Reason is the error's record.ErrorKind
// ("RETRYABLE", "UNAVAILABLE" or "PERMANENT").
const ErrorDomain = "gpusampler.plugin"

// WriteStatus maps an output's Write error (non-nil) to the protocol's
// status: a code by kind — PERMANENT is InvalidArgument, UNAVAILABLE is
// Unavailable, RETRYABLE is DeadlineExceeded for a deadline, Unknown
// otherwise — plus an errdetails.ErrorInfo that names the kind, so the
// host restores the kind exactly (see the client's statusError), and an
// errdetails.RetryInfo with the error's retry hint (record.RetryAfterOf)
// when it has one. The message is err's.
func WriteStatus(err error) *status.Status {
	kind := record.Classify(err)
	code := codes.Unknown
	switch {
	case kind == record.KindPermanent:
		code = codes.InvalidArgument
	case kind == record.KindUnavailable:
		code = codes.Unavailable
	case errors.Is(err, record.ErrClosed):
		code = codes.FailedPrecondition
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	st := status.New(code, err.Error())
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: kind.String(), Domain: ErrorDomain}}
	if hint, ok := record.RetryAfterOf(err); ok {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(hint)})
	}
	if d, derr := st.WithDetails(details...); derr == nil {
		st = d
	}
	return st
}

// Health implements proto.OutputServer. It does not wait for a Write in
// progress. The reply carries the output's own counters when it is a
// record.StatsReporter — after Close too: the host reads the final ones
// then.
func (s *Server) Health(ctx context.Context, _ *proto.HealthRequest) (*proto.HealthResponse, error) {
	p := s.live.Load()
	if p == nil {
		return &proto.HealthResponse{Ok: true}, nil
	}
	out := *p
	resp := &proto.HealthResponse{Ok: true, Stats: recordpb.FromFields(record.ReportStats(out, nil))}
	if hc, ok := out.(HealthChecker); ok {
		if err := hc.Health(ctx); err != nil {
			resp.Ok, resp.Message = false, err.Error()
		}
	}
	return resp, nil
}

// Close implements proto.OutputServer.
func (s *Server) Close(ctx context.Context, _ *proto.CloseRequest) (*proto.CloseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &proto.CloseResponse{}, nil
	}
	s.closed = true
	defer close(s.done)
	if s.out != nil {
		if err := s.out.Close(); err != nil {
			return nil, status.Errorf(codes.Unknown, "close: %v", err)
		}
	}
	return &proto.CloseResponse{}, nil
}
