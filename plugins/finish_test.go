package plugins_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
)

// Finish (at shutdown, before the final self-metrics) reads the plugin
// output's counters with a health probe of its own: ReportStats then
// counts every Write, the last one included, with no periodic probe in
// between.
func TestClientFinishReadsCounters(t *testing.T) {
	opts := fastOptions(t, "finish", nil)
	opts.HealthInterval = time.Hour // no periodic probe: only Finish reads the counters
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	writes := func() float64 {
		for _, f := range c.ReportStats(nil) {
			if f.Key == "test_writes" {
				return f.Value
			}
		}
		return 0
	}
	for i := range 3 {
		if err := c.Write(context.Background(), &record.Batch{Seq: uint64(i + 1), Samples: outputtest.Samples(2)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := writes(); got != 0 {
		t.Fatalf("test_writes before Finish = %v, want 0 (not probed yet)", got)
	}
	var _ record.Finisher = c
	if err := c.Finish(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := writes(); got != 3 {
		t.Fatalf("test_writes after Finish = %v, want 3", got)
	}
}
