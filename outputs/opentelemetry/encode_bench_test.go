package opentelemetry

import (
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// benchSamples is the samples of one benchmark batch: a pump's full batch.
const benchSamples = 4096

// benchBatch is benchSamples samples over 8 GPUs and four metrics (the
// shape of test/otelcol's BenchmarkWire and outputs/nats's benchmark),
// with the GPUs' identities; every fourth sample of a counter (energy)
// when counters is set.
func benchBatch(counters bool) *record.Batch {
	b := &record.Batch{}
	for g := range 8 {
		b.Devices = append(b.Devices, record.Device{Index: g, UUID: "GPU-0000000" + string(rune('0'+g)),
			Name: "NVIDIA H200", PCIBusID: "00000000:1" + string(rune('0'+g)) + ":00.0", DriverVersion: "570.86.15"})
	}
	metrics := []catalog.MetricID{catalog.MetricPowerDraw, catalog.MetricUtilGPU, catalog.MetricClockSM, catalog.MetricPowerInstant}
	if counters {
		metrics[3] = catalog.MetricEnergy
	}
	for i := range benchSamples {
		b.Samples = append(b.Samples, record.Sample{TimeNS: 1.79e18 + int64(i/32)*1e6, Value: float64(100 + i%500),
			Device: uint16(i % 8), Metric: metrics[(i/8)%len(metrics)]})
	}
	return b
}

// benchSummaries is a batch of 1 s window summaries (an aggregating
// output's): 8 GPUs × 4 gauges × 128 windows, each with a few buckets.
func benchSummaries() *record.Batch {
	b := benchBatch(false)
	metrics := []catalog.MetricID{catalog.MetricPowerDraw, catalog.MetricUtilGPU, catalog.MetricClockSM, catalog.MetricPowerInstant}
	for i := range benchSamples {
		b.Summaries = append(b.Summaries, record.Summary{StartNS: 1.79e18 + int64(i/32)*1e9, IntervalNS: 1e9,
			Mean: 200, Min: 100, Max: 300, Last: 250, Count: 10, Device: uint16(i % 8), Metric: metrics[(i/8)%len(metrics)],
			Hist: &record.ExpHistogram{Scale: 3, ZeroCount: 1, PositiveOffset: 50, Positive: []uint64{1, 0, 2, 3, 1, 0, 1, 1}}})
	}
	b.Samples = nil
	return b
}

// BenchmarkEncode: what one Write spends turning a batch into the request
// body (encode and marshal, no network): ns, bytes allocated and
// allocations per record. The first batch carries the GPUs' identities
// (taken once, as a pump's first batch); each iteration encodes the
// records again, as the next batch would.
func BenchmarkEncode(b *testing.B) {
	for _, bc := range []struct {
		name  string
		batch *record.Batch
	}{{"gauges", benchBatch(false)}, {"counters", benchBatch(true)}, {"summaries", benchSummaries()}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEncoder(&Options{Host: "node1", Version: "1.0.0"}, 1.79e18)
			e.setDevices(bc.batch.Devices)
			var buf []byte
			records := len(bc.batch.Samples) + len(bc.batch.Summaries)
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for range b.N {
				req, points := e.encode(bc.batch.Samples, bc.batch.Summaries, nil)
				if points != records {
					b.Fatalf("%d points, want %d", points, records)
				}
				var err error
				if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], req); err != nil {
					b.Fatal(err)
				}
				e.commit()
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			// per record as well as per op
			n := float64(b.N * records)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/sample")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/sample")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/sample")
			b.ReportMetric(float64(len(buf))/float64(records), "body-B/sample")
		})
	}
}
