package rpc

import (
	"context"
	"reflect"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// summaryOut keeps the summaries it is given.
type summaryOut struct{ got []record.Summary }

func (o *summaryOut) Write(_ context.Context, b *record.Batch) error {
	o.got = append(o.got, b.Summaries...)
	return nil
}
func (o *summaryOut) Close() error { return nil }

// A window's exponential histogram (the aggregate wrapper's, for the
// opentelemetry output) crosses the plugin protocol to the plugin's output
// whole, beside a summary that carries none.
func TestWriteCarriesSummaryHistogram(t *testing.T) {
	out := &summaryOut{}
	c := serve(t, out)
	sent := []record.Summary{
		{StartNS: 1e9, IntervalNS: 1e9, Mean: 0.5, Min: 0, Max: 1, Last: 1, Count: 4, Device: 2, Metric: catalog.MetricUtilGPU,
			Hist: &record.ExpHistogram{Scale: 4, ZeroCount: 1, PositiveOffset: -16, Positive: []uint64{1, 0, 2}}},
		{StartNS: 1e9, IntervalNS: 1e9, Mean: 300, Min: 300, Max: 300, Last: 300, Count: 1, Metric: catalog.MetricPowerDraw},
	}
	if err := c.Write(context.Background(), &record.Batch{Seq: 1, Summaries: sent}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out.got, sent) {
		t.Fatalf("plugin got %+v\nwant %+v", out.got, sent)
	}
}
