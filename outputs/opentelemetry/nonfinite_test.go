package opentelemetry_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

// A window with NaN or infinite samples is an exponential histogram
// point like the others: its count is its buckets' (the finite samples),
// and it has no sum, min or max (the summary's include the NaN); a window
// of NaN samples only is a point of count 0 without buckets. The same
// metric never changes point type.
func TestSummaryNonFinite(t *testing.T) {
	c := &collector{}
	out, err := newOutput(opentelemetry.Options{Protocol: opentelemetry.ProtocolHTTP, Endpoints: []string{serve(t, opentelemetry.ProtocolHTTP, c)},
		Now: func() time.Time { return time.Unix(0, t0) }})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	nan := math.NaN()
	sums := []record.Summary{
		{StartNS: t0, IntervalNS: 1e9, Mean: 2, Min: 1, Max: 4, Last: 4, Count: 3, Metric: catalog.MetricPowerDraw,
			Hist: &record.ExpHistogram{Scale: 0, PositiveOffset: -1, Positive: []uint64{1, 1, 1}}},
		{StartNS: t0 + 1e9, IntervalNS: 1e9, Mean: nan, Min: nan, Max: nan, Last: 2, Count: 3, Metric: catalog.MetricPowerDraw,
			Hist: &record.ExpHistogram{Scale: 0, ZeroCount: 1, PositiveOffset: 0, Positive: []uint64{1}, NonFinite: 1}},
		{StartNS: t0 + 2e9, IntervalNS: 1e9, Mean: nan, Min: nan, Max: nan, Last: nan, Count: 2, Metric: catalog.MetricPowerDraw,
			Hist: &record.ExpHistogram{NonFinite: 2}},
	}
	if err := out.Write(context.Background(), &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Summaries: sums}); err != nil {
		t.Fatal(err)
	}
	var pts []*metricspb.ExponentialHistogramDataPoint
	for _, req := range c.requests() {
		for _, rm := range req.ResourceMetrics {
			for _, m := range rm.ScopeMetrics[0].Metrics {
				eh, ok := m.Data.(*metricspb.Metric_ExponentialHistogram)
				if !ok {
					t.Fatalf("%s: %T points, want exponential histograms only", m.Name, m.Data)
				}
				pts = append(pts, eh.ExponentialHistogram.DataPoints...)
			}
		}
	}
	if len(pts) != 3 {
		t.Fatalf("%d exponential histogram points, want 3", len(pts))
	}
	if p := pts[0]; p.Count != 3 || p.Sum == nil || *p.Sum != 6 || p.GetMin() != 1 || p.GetMax() != 4 {
		t.Errorf("finite window: %v", p)
	}
	if p := pts[1]; p.Count != 2 || p.ZeroCount != 1 || p.Sum != nil || p.Min != nil || p.Max != nil ||
		!slices.Equal(p.GetPositive().GetBucketCounts(), []uint64{1}) {
		t.Errorf("window with a NaN: %v, want count 2 (zero and one bucket), no sum, min or max", p)
	}
	if p := pts[2]; p.Count != 0 || p.Sum != nil || len(p.GetPositive().GetBucketCounts()) != 0 || len(p.GetNegative().GetBucketCounts()) != 0 {
		t.Errorf("window of NaN only: %v, want count 0, no buckets, no sum", p)
	}
}
