package otelcol_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

// liveness bounds a wait on state that only a hung or broken program
// misses: far above any load's delay. Nothing is asserted on how long a
// wait took.
const liveness = 3 * time.Minute

// waitFor polls cond until it holds, failing the test after liveness.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", liveness, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sink keeps every pmetric.Metrics the capture exporter is handed, across
// collector restarts (one sink per test, shared by the collectors it
// starts).
type sink struct {
	mu      sync.Mutex
	batches []pmetric.Metrics
	points  int
	// refuse, while > 0, is how many more batches to refuse with
	// refusal; calls are the time of every batch handed in and whether it
	// was refused.
	refuse  int
	refusal error
	calls   []call
	// discard keeps no batch, only counts its points (benchmarks).
	discard bool
}

// call is one batch handed to the capture exporter.
type call struct {
	at      time.Time
	refused bool
}

func (s *sink) consume(md pmetric.Metrics) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse > 0 {
		s.refuse--
		s.calls = append(s.calls, call{time.Now(), true})
		return s.refusal
	}
	if s.discard {
		s.points += md.DataPointCount()
		return nil
	}
	s.calls = append(s.calls, call{time.Now(), false})
	c := pmetric.NewMetrics()
	md.CopyTo(c) // the pipeline may reuse md after ConsumeMetrics returns
	s.batches = append(s.batches, c)
	s.points += c.DataPointCount()
	return nil
}

// RefuseNext makes the exporter answer the next n batches with err (the
// OTLP receiver answers the client with its gRPC status, or the HTTP
// status and Retry-After OTLP maps it to).
func (s *sink) RefuseNext(n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse, s.refusal = n, err
}

// Calls returns every batch handed in so far, in order.
func (s *sink) Calls() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// Points returns how many data points the sink holds.
func (s *sink) Points() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.points
}

// all returns the batches received so far (the caller must not change
// them).
func (s *sink) all() []pmetric.Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pmetric.Metrics(nil), s.batches...)
}

// captureType is the capture exporter's type in a collector config.
var captureType = component.MustNewType("capture")

// captureFactory is an exporter factory whose exporters hand every metric
// batch to s: the collector's own pipeline (receiver, fan-out, exporter
// wrapper) runs unchanged; only the last hop, where a real collector would
// send on to a backend, keeps what it gets.
func captureFactory(s *sink) exporter.Factory {
	return exporter.NewFactory(captureType, func() component.Config { return &struct{}{} },
		exporter.WithMetrics(func(context.Context, exporter.Settings, component.Config) (exporter.Metrics, error) {
			return captureExporter{s}, nil
		}, component.StabilityLevelStable))
}

type captureExporter struct{ s *sink }

func (captureExporter) Start(context.Context, component.Host) error { return nil }
func (captureExporter) Shutdown(context.Context) error              { return nil }
func (captureExporter) Capabilities() consumer.Capabilities         { return consumer.Capabilities{} }
func (e captureExporter) ConsumeMetrics(_ context.Context, md pmetric.Metrics) error {
	return e.s.consume(md)
}

// factories are the components a test collector knows: the real OTLP
// receiver, the capture exporter on s, and the real telemetry factory;
// extra adds exporters (a README config's backend).
func factories(s *sink, extra ...exporter.Factory) func() (otelcol.Factories, error) {
	return func() (otelcol.Factories, error) {
		recv, err := otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
		if err != nil {
			return otelcol.Factories{}, err
		}
		exps, err := otelcol.MakeFactoryMap(append([]exporter.Factory{captureFactory(s)}, extra...)...)
		if err != nil {
			return otelcol.Factories{}, err
		}
		return otelcol.Factories{Receivers: recv, Exporters: exps, Telemetry: otelconftelemetry.NewFactory()}, nil
	}
}

// settings are a collector's settings for the YAML config in file, with
// the file and env config providers a distribution has.
func settings(file string, f func() (otelcol.Factories, error)) otelcol.CollectorSettings {
	return otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol-test", Description: "gpusampler's test collector", Version: "test"},
		Factories: f,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: confmap.ResolverSettings{
			URIs:              []string{"file:" + file},
			ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory(), envprovider.NewFactory()},
		}},
		// The test stops the collector itself; signals are the test
		// binary's.
		DisableGracefulShutdown: true,
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// collector is a real OpenTelemetry Collector (otelcol with the OTLP
// receiver on gRPC and HTTP) running in the test process, exporting to a
// sink. Stop and Start run it again on the same addresses, with the same
// sink.
type collector struct {
	t          testing.TB
	GRPC, HTTP string // host:port of the OTLP receiver's protocols
	Sink       *sink
	config     string // the config file
	col        *otelcol.Collector
	done       chan error
}

// collectorConfig is the test collector's config: the OTLP receiver on both
// protocols, the capture exporter, the collector's own telemetry quiet (no
// metrics endpoint, whose default port a parallel run would share).
const collectorConfig = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  capture:
service:
  telemetry:
    logs:
      level: warn
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [capture]
`

// startCollector starts a collector on free loopback ports and stops it
// when the test ends.
func startCollector(t testing.TB) *collector {
	t.Helper()
	c := &collector{t: t, GRPC: freeAddr(t), HTTP: freeAddr(t), Sink: &sink{}}
	c.config = filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(c.config, []byte(fmt.Sprintf(collectorConfig, c.GRPC, c.HTTP)), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Stop)
	return c
}

// Start runs the collector (again) and waits until it runs.
func (c *collector) Start() {
	c.t.Helper()
	col, err := otelcol.NewCollector(settings(c.config, factories(c.Sink)))
	if err != nil {
		c.t.Fatal(err)
	}
	c.col, c.done = col, make(chan error, 1)
	go func() { c.done <- col.Run(context.Background()) }()
	waitFor(c.t, "the collector to run", func() bool {
		select {
		case err := <-c.done:
			c.t.Fatalf("the collector stopped: %v", err)
		default:
		}
		return col.GetState() == otelcol.StateRunning
	})
}

// Stop shuts the collector down (its receiver stops listening) and waits
// until it has stopped. Stopping a stopped collector does nothing.
func (c *collector) Stop() {
	if c.col == nil {
		return
	}
	c.col.Shutdown()
	if err := <-c.done; err != nil {
		c.t.Errorf("collector: %v", err)
	}
	c.col = nil
}
