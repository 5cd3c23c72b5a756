package opentelemetry

import (
	"strings"
	"testing"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/gpusampler/gpusampler/record"
)

// A job record's running totals are cumulative sums from the account's
// start (gauges for exactness, peak memory and the energy difference),
// the owner's attribution on the resource; a job_end is an event point.
func TestJobRecords(t *testing.T) {
	e := newEncoder(&Options{}, 0)
	owner := record.Attribution{Pod: "train-7", Namespace: "ml", Container: "main"}
	attrs := append([]record.Attr{{Key: record.AttrOwner, Value: "ml/train-7/main"}}, owner.Attrs()...)
	attrs = append(attrs, record.Attr{Key: record.AttrJobStarted, Value: "2026-12-01T12:00:00Z"})
	fields := []record.Field{{Key: record.JobFieldEnergy, Value: 600}, {Key: record.JobFieldBusy, Value: 2},
		{Key: record.JobFieldExactness, Value: 0.5}, {Key: record.JobFieldMemoryPeak, Value: 1000, Int: true}}
	const at = 1_796_000_000_000_000_000
	req, _ := e.encode(nil, nil, []record.Event{
		{Kind: record.EventJob, Device: 0, StartNS: at, EndNS: at, Attrs: attrs, Fields: fields},
		{Kind: record.EventJobEnd, Device: 0, StartNS: at, EndNS: at, Attrs: attrs, Fields: fields}})
	got := map[string]string{}
	var resources []string
	for _, rm := range req.ResourceMetrics {
		for _, kv := range rm.Resource.GetAttributes() {
			resources = append(resources, kv.Key+"="+kv.Value.GetStringValue())
		}
		for _, m := range rm.ScopeMetrics[0].Metrics {
			switch d := m.Data.(type) {
			case *metricspb.Metric_Sum:
				p := d.Sum.DataPoints[0]
				if !d.Sum.IsMonotonic || d.Sum.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
					t.Errorf("%s: not a cumulative monotonic sum", m.Name)
				}
				if p.StartTimeUnixNano != uint64(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano()) || p.TimeUnixNano != at {
					t.Errorf("%s starts at %d, want the account's start", m.Name, p.StartTimeUnixNano)
				}
				got[m.Name] = "sum " + m.Unit
				if m.Name == "gpusampler.job.energy" && p.GetAsDouble() != 600 {
					t.Errorf("energy %v", p.GetAsDouble())
				}
			case *metricspb.Metric_Gauge:
				got[m.Name] = "gauge " + m.Unit
			}
		}
	}
	for name, want := range map[string]string{"gpusampler.job.energy": "sum J", "gpusampler.job.busy_time": "sum s",
		"gpusampler.job.exactness": "gauge 1", "gpusampler.job.memory.peak": "gauge MiBy", EventMetric: "gauge {event}"} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q (all: %v)", name, got[name], want, got)
		}
	}
	if !strings.Contains(strings.Join(resources, " "), "train-7") {
		t.Errorf("resource attributes %v lack the owner's pod", resources)
	}
}
