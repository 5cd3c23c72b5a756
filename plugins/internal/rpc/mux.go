package rpc

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/gpusampler/gpusampler/plugins/proto"
)

// InstanceHeader is the gRPC metadata key that names the output instance
// a call is for, when one plugin process serves several outputs
// (MuxServer). Each instance is configured, written, probed and closed on
// its own, exactly as a single-output plugin is.
const InstanceHeader = "gpusampler-output-instance"

// MuxServer serves several outputs in one plugin process: one Server per
// instance, named by the InstanceHeader of each call and created by its
// Configure. Instances share nothing but the process: each has its own
// lock, so a Write blocked in one output does not hold up another's calls.
//
// Concurrency: all methods may be called concurrently (gRPC does).
type MuxServer struct {
	proto.UnimplementedOutputServer
	factory Factory
	logger  *slog.Logger

	mu   sync.Mutex
	outs map[string]*Server // by instance; removed on Close or a failed Configure
	// closed holds instances closed since, until one Health call has read
	// their final counters (the host's last look after the final flush),
	// at most maxClosed of them: closedOrder is their order of closing,
	// the oldest forgotten first (a host that never looks again, such as
	// one that gave a wedged instance up, leaves nothing behind for good).
	closed      map[string]*Server
	closedOrder []string
}

// maxClosed bounds the closed instances a MuxServer keeps for their final
// Health: more than the outputs one host closes at once.
const maxClosed = 64

// NewMuxServer returns a server that builds each instance's output with f
// on its Configure.
func NewMuxServer(f Factory, logger *slog.Logger) *MuxServer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &MuxServer{factory: f, logger: logger, outs: map[string]*Server{}, closed: map[string]*Server{}}
}

func instanceOf(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(InstanceHeader); len(v) == 1 && v[0] != "" {
		return v[0], nil
	}
	return "", status.Errorf(codes.InvalidArgument, "this plugin process serves several outputs: want one %s header", InstanceHeader)
}

// server returns the instance's Server, or an error when the call names
// none or an instance that is not configured.
func (m *MuxServer) server(ctx context.Context) (string, *Server, error) {
	id, err := instanceOf(ctx)
	if err != nil {
		return "", nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.outs[id]
	if s == nil {
		return id, nil, status.Errorf(codes.FailedPrecondition, "output instance %q: not configured", id)
	}
	return id, s, nil
}

// Configure implements proto.OutputServer: it creates the instance.
func (m *MuxServer) Configure(ctx context.Context, req *proto.ConfigureRequest) (*proto.ConfigureResponse, error) {
	id, err := instanceOf(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.outs[id] != nil {
		m.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "output instance %q: already configured", id)
	}
	s := NewServer(m.factory, m.logger)
	m.outs[id] = s
	m.mu.Unlock()
	resp, err := s.Configure(ctx, req)
	if err != nil || len(resp.GetErrors()) > 0 {
		m.mu.Lock()
		delete(m.outs, id)
		m.mu.Unlock()
	}
	return resp, err
}

// Write implements proto.OutputServer.
func (m *MuxServer) Write(ctx context.Context, req *proto.WriteRequest) (*proto.WriteResponse, error) {
	_, s, err := m.server(ctx)
	if err != nil {
		return nil, err
	}
	return s.Write(ctx, req)
}

// Health implements proto.OutputServer. An instance closed since is
// answered once more, with its output's final counters, then forgotten.
func (m *MuxServer) Health(ctx context.Context, req *proto.HealthRequest) (*proto.HealthResponse, error) {
	id, s, err := m.server(ctx)
	if err != nil {
		m.mu.Lock()
		c := m.closed[id]
		delete(m.closed, id)
		m.mu.Unlock()
		if c == nil {
			return nil, err
		}
		s = c
	}
	return s.Health(ctx, req)
}

// Close implements proto.OutputServer: it forgets the instance, then
// closes its output. The process goes on serving the others. An instance
// whose Write is wedged is forgotten at once (the host gives it up); its
// Close waits for that Write, up to the call's deadline, and the Write's
// goroutine ends whenever the output returns.
func (m *MuxServer) Close(ctx context.Context, req *proto.CloseRequest) (*proto.CloseResponse, error) {
	id, s, err := m.server(ctx)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.outs[id] == s {
		delete(m.outs, id)
		m.keepClosed(id, s)
	}
	m.mu.Unlock()
	type result struct {
		resp *proto.CloseResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := s.Close(context.WithoutCancel(ctx), req)
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// keepClosed keeps closed instance s for one more Health, forgetting the
// oldest closed instances beyond maxClosed. The caller holds m.mu.
func (m *MuxServer) keepClosed(id string, s *Server) {
	m.closedOrder = slices.DeleteFunc(m.closedOrder, func(k string) bool { return m.closed[k] == nil || k == id })
	m.closed[id] = s
	m.closedOrder = append(m.closedOrder, id)
	if n := len(m.closedOrder) - maxClosed; n > 0 {
		for _, k := range m.closedOrder[:n] {
			delete(m.closed, k)
		}
		m.closedOrder = slices.Delete(m.closedOrder, 0, n)
	}
}

// Instance returns an OutputClient whose every call names instance id
// (InstanceHeader), for a process served by a MuxServer.
func Instance(c proto.OutputClient, id string) proto.OutputClient {
	return instanceClient{c: c, id: id}
}

type instanceClient struct {
	c  proto.OutputClient
	id string
}

func (i instanceClient) ctx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, InstanceHeader, i.id)
}

func (i instanceClient) Configure(ctx context.Context, in *proto.ConfigureRequest, opts ...grpc.CallOption) (*proto.ConfigureResponse, error) {
	return i.c.Configure(i.ctx(ctx), in, opts...)
}

func (i instanceClient) Write(ctx context.Context, in *proto.WriteRequest, opts ...grpc.CallOption) (*proto.WriteResponse, error) {
	return i.c.Write(i.ctx(ctx), in, opts...)
}

func (i instanceClient) Health(ctx context.Context, in *proto.HealthRequest, opts ...grpc.CallOption) (*proto.HealthResponse, error) {
	return i.c.Health(i.ctx(ctx), in, opts...)
}

func (i instanceClient) Close(ctx context.Context, in *proto.CloseRequest, opts ...grpc.CallOption) (*proto.CloseResponse, error) {
	return i.c.Close(i.ctx(ctx), in, opts...)
}
