package otelcol_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/record"
)

// benchSamples is the samples of one benchmark Write: a pump's full batch.
const benchSamples = 4096

// benchBatch is benchSamples samples over 8 GPUs and four metrics (the
// shape of outputs/nats's benchmark), with the GPUs' identities.
func benchBatch() *record.Batch {
	b := &record.Batch{}
	for g := range 8 {
		b.Devices = append(b.Devices, record.Device{Index: g, UUID: "GPU-0000000" + string(rune('0'+g)),
			Name: "NVIDIA H200", PCIBusID: "00000000:1" + string(rune('0'+g)) + ":00.0", DriverVersion: "570.86.15"})
	}
	metrics := []catalog.MetricID{catalog.MetricPowerDraw, catalog.MetricUtilGPU, catalog.MetricClockSM, catalog.MetricPowerInstant}
	for i := range benchSamples {
		b.Samples = append(b.Samples, record.Sample{TimeNS: 1.79e18 + int64(i/32)*1e6, Value: float64(100 + i%500),
			Device: uint16(i % 8), Metric: metrics[(i/8)%len(metrics)]})
	}
	return b
}

// BenchmarkWire: samples/s through the opentelemetry output into a real
// collector (OTLP/gRPC and OTLP/HTTP, gzip and not; the collector's
// receiver decodes every request) and through the NATS output (protobuf
// encoding, core NATS, a real nats-server) in the same run, and the bytes
// per sample each puts on the wire: B/sample is the OpenTelemetry
// output's wire_bytes (the request bodies as sent: compressed, with gRPC's
// message framing; HTTP headers not counted) and the NATS output's payload
// bytes (subjects and headers not counted); body-B/sample is the
// OpenTelemetry request bodies before compression. The first Write sends
// the GPUs' identities, as a pump's first batch does; the later ones
// samples only.
func BenchmarkWire(b *testing.B) {
	c := startCollector(b)
	c.Sink.discard = true
	batch := benchBatch()
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		for _, gzip := range []bool{true, false} {
			name := "otel/" + strings.ReplaceAll(protocol, "/", "-") + "/gzip"
			addr := c.GRPC
			if protocol == "http/protobuf" {
				addr = c.HTTP
			}
			if !gzip {
				name = strings.TrimSuffix(name, "gzip") + "none"
			}
			b.Run(name, func(b *testing.B) {
				out, err := opentelemetry.New(opentelemetry.Options{Name: "bench", Endpoints: []string{"http://" + addr},
					Protocol: protocol, Gzip: gzip, Host: "node1"})
				if err != nil {
					b.Fatal(err)
				}
				defer out.Close()
				var before opentelemetry.Stats
				n := writeSamples(b, out, batch, func() { before = out.Stats() })
				st := out.Stats()
				b.ReportMetric(float64(st.WireBytes-before.WireBytes)/n, "B/sample")
				b.ReportMetric(float64(st.Bytes-before.Bytes)/n, "body-B/sample")
			})
		}
	}
	b.Run("nats/core/protobuf", func(b *testing.B) {
		s := natstest.Start(b)
		cfg := natsout.DefaultConfig()
		cfg.Encoding = natsout.EncodingProtobuf
		cfg.Servers = []string{s.ClientURL()}
		out, err := natsout.New(cfg, natsout.WithHost("node1"))
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		var before natsout.Stats
		n := writeSamples(b, out, batch, func() { before = out.Stats() })
		out.Conn().Flush()
		b.ReportMetric(float64(out.Stats().Bytes-before.Bytes)/n, "B/sample")
	})
}

// writeSamples writes batch once whole (the GPUs' identities with it, as
// a pump's first batch), calls started, then writes its samples alone
// b.N times, reporting samples/s; it returns how many samples the timed
// Writes held.
func writeSamples(b *testing.B, out record.Output, batch *record.Batch, started func()) float64 {
	ctx := context.Background()
	first := *batch
	if err := out.Write(ctx, &first); err != nil {
		b.Fatal(err)
	}
	samplesOnly := *batch
	samplesOnly.Devices = nil
	started()
	b.ReportAllocs()
	for b.Loop() {
		samplesOnly.Seq++
		if err := out.Write(ctx, &samplesOnly); err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N) * benchSamples
	b.ReportMetric(n/b.Elapsed().Seconds(), "samples/s")
	return n
}
