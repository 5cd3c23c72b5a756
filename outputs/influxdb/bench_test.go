package influxdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/record"
)

// BenchmarkEncode: line-protocol encode rate on one core (points = lines
// of 4 fields).
func BenchmarkEncode(b *testing.B) {
	samples := mixedSamples(4000, time.Now().UnixNano())
	batch := &record.Batch{Devices: []record.Device{testDevice}, Samples: samples}
	enc := lineproto.New(lineproto.Options{Host: "node1"})
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		enc.Reset()
		enc.Encode(batch)
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "points/s")
	b.ReportMetric(float64(b.N)*4000/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkEndToEnd writes into a real influxd: "output" encodes and posts
// batches through the Output; "ceiling" posts the same batches pre-encoded
// with the same Writer, in the same run. The ratio is output/ceiling.
func BenchmarkEndToEnd(b *testing.B) {
	srv := influxtest.Start(b, influxtest.Options{})
	srv.CreateDatabase("gpu")
	for _, batchSamples := range []int{1000, 4000} {
		samples := mixedSamples(batchSamples, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		batch := &record.Batch{Devices: []record.Device{testDevice}, Samples: samples}
		enc := lineproto.New(lineproto.Options{Host: "node1", GlobalTags: []lineproto.Tag{{Key: "cluster", Value: "c1"}}})
		enc.Encode(batch)
		pre := append([]byte(nil), enc.Bytes()...)
		points := float64(batchSamples / 4)
		ctx := context.Background()
		b.Run("ceiling/batch="+itoa(batchSamples), func(b *testing.B) {
			out := newOutput(b, srv.URL, "gpu")
			for b.Loop() {
				if err := out.Writer().Write(ctx, pre); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*points/b.Elapsed().Seconds(), "points/s")
		})
		b.Run("output/batch="+itoa(batchSamples), func(b *testing.B) {
			out := newOutput(b, srv.URL, "gpu")
			b.ReportAllocs()
			for b.Loop() {
				if err := out.Write(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*points/b.Elapsed().Seconds(), "points/s")
		})
	}
}

func itoa(n int) string {
	return map[int]string{1000: "1000", 4000: "4000"}[n]
}
