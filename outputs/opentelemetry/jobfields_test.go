package opentelemetry

import (
	"maps"
	"strconv"
	"testing"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/gpusampler/gpusampler/record"
)

// Every per-job field's metric: name, shape, unit and value, pinned.
func TestJobMetricsPinned(t *testing.T) {
	e := newEncoder(&Options{}, 0)
	var fields []record.Field
	for i, k := range record.JobFieldKeys() {
		fields = append(fields, record.Field{Key: k, Value: float64(i + 1)})
	}
	attrs := []record.Attr{{Key: record.AttrOwner, Value: "ml/p/c"}, {Key: record.AttrJobStarted, Value: "2026-12-01T12:00:00Z"}}
	req, _ := e.encode(nil, nil, []record.Event{{Kind: record.EventJob, StartNS: 1e18, EndNS: 1e18, Attrs: attrs, Fields: fields}})
	got := map[string]string{}
	for _, rm := range req.ResourceMetrics {
		for _, m := range rm.ScopeMetrics[0].Metrics {
			switch d := m.Data.(type) {
			case *metricspb.Metric_Sum:
				got[m.Name] = "sum " + m.Unit + " " + strconv.FormatFloat(d.Sum.DataPoints[0].GetAsDouble(), 'g', -1, 64)
			case *metricspb.Metric_Gauge:
				got[m.Name] = "gauge " + m.Unit + " " + strconv.FormatFloat(d.Gauge.DataPoints[0].GetAsDouble(), 'g', -1, 64)
			}
		}
	}
	want := map[string]string{
		"gpusampler.job.energy":              "sum J 1",
		"gpusampler.job.energy_counter":      "sum J 2",
		"gpusampler.job.energy_diff":         "gauge J 3",
		"gpusampler.job.busy_time":           "sum s 4",
		"gpusampler.job.idle_allocated_time": "sum s 5",
		"gpusampler.job.allocated_time":      "sum s 6",
		"gpusampler.job.point_read_time":     "sum s 7",
		"gpusampler.job.lost_time":           "sum s 8",
		"gpusampler.job.exactness":           "gauge 1 9",
		"gpusampler.job.memory.peak":         "gauge MiBy 10",
		"gpusampler.job.power_samples":       "sum {sample} 11",
	}
	if !maps.Equal(got, want) {
		t.Errorf("metrics:\n%v\nwant:\n%v", got, want)
	}
}
