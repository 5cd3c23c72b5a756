package otelcol_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The harness itself: a point sent over OTLP/gRPC and one over OTLP/HTTP
// (protobuf) reach the sink through the real receiver and pipeline, and
// the collector takes points again after a stop and a start.
func TestCollectorHarness(t *testing.T) {
	c := startCollector(t)
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("harness")
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(1)
	req := pmetricotlp.NewExportRequestFromMetrics(md)

	sendGRPC := func() {
		conn, err := grpc.NewClient(c.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := pmetricotlp.NewGRPCClient(conn).Export(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	sendGRPC()
	body, err := req.MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+c.HTTP+"/v1/metrics", "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/metrics: %s", resp.Status)
	}
	waitFor(t, "two points", func() bool { return c.Sink.Points() == 2 })
	c.Stop()
	c.Start()
	sendGRPC()
	waitFor(t, "a third point after the restart", func() bool { return c.Sink.Points() == 3 })
}
