package otelcol_test

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the output compresses
)

// partialServer is an OTLP server (gRPC and HTTP) that takes every request
// and answers each with a partial success rejecting one data point, as a
// backend that refuses a point it cannot store does. What it takes goes to
// a sink (the rejection is only what it says).
type partialServer struct {
	pmetricotlp.UnimplementedGRPCServer
	Sink       *sink
	GRPC, HTTP string
	answered   atomic.Int64 // requests answered with a partial success
}

const partialMessage = "test server: 1 data point rejected"

func (s *partialServer) answer(req pmetricotlp.ExportRequest) pmetricotlp.ExportResponse {
	s.Sink.consume(req.Metrics())
	resp := pmetricotlp.NewExportResponse()
	resp.PartialSuccess().SetRejectedDataPoints(1)
	resp.PartialSuccess().SetErrorMessage(partialMessage)
	s.answered.Add(1)
	return resp
}

// Export is the OTLP/gRPC metrics service.
func (s *partialServer) Export(_ context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	return s.answer(req), nil
}

// ServeHTTP is OTLP/HTTP's /v1/metrics (protobuf, gzip or not).
func (s *partialServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = z
	}
	data, err := io.ReadAll(body)
	req := pmetricotlp.NewExportRequest()
	if err == nil {
		err = req.UnmarshalProto(data)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out, err := s.answer(req).MarshalProto()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func startPartialServer(t *testing.T) *partialServer {
	t.Helper()
	s := &partialServer{Sink: &sink{}}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pmetricotlp.RegisterGRPCServer(gs, s)
	go gs.Serve(gl)
	t.Cleanup(gs.Stop)
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/metrics", s)
	hs := &http.Server{Handler: mux}
	go hs.Serve(hl)
	t.Cleanup(func() { hs.Close() })
	s.GRPC, s.HTTP = gl.Addr().String(), hl.Addr().String()
	return s
}

// An OTLP server answering every export with a partial success (one point
// rejected): the output counts each (partial_success) and the points the
// server rejected (rejected_points), and does not send the batch again (a
// partial success is not a failure: the server took the rest), so the
// server holds every sample the twin printed exactly once.
func TestPartialSuccessIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpusampler")
	}
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			s := startPartialServer(t)
			n := startNode(t, twinBlock+otelBlock(&collector{GRPC: s.GRPC, HTTP: s.HTTP}, protocol, ""))
			runUntilSamples(t, n)
			tw := n.readTwin()
			checkRaw(t, tw, flatten(s.Sink.all()))
			answered := float64(s.answered.Load())
			if got := n.finalStat("otel", "partial_success"); got != answered {
				t.Errorf("the output counted %v partial successes, the server answered %v", got, answered)
			}
			if got := n.finalStat("otel", "rejected_points"); got != answered {
				t.Errorf("the output counted %v rejected points, the server rejected %v", got, answered)
			}
			if !strings.Contains(n.log(), partialMessage) {
				t.Errorf("the server's message %q is not in gpusampler's log:\n%s", partialMessage, n.log())
			}
		})
	}
}
