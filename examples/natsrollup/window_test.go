package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// Each roll-up carries, per GPU, the count, mean, min and max of the power
// samples received since the previous one, and starts a new window.
func TestRollupWindows(t *testing.T) {
	now := time.Unix(1_790_000_000, 0)
	p := newProcessor(Options{Interval: time.Second, MaxAge: time.Hour, Now: func() time.Time { return now }})
	recs := func(host string, watts ...float64) *stream.Records {
		r := &stream.Records{Host: host, UUIDs: map[int]string{0: host + "-gpu0"}}
		for i, w := range watts {
			r.Batch.Samples = append(r.Batch.Samples,
				record.Sample{TimeNS: now.UnixNano() + int64(i), Value: w, Metric: catalog.MetricPowerDraw},
				record.Sample{TimeNS: now.UnixNano() + int64(i), Value: 99, Metric: catalog.MetricUtilGPU})
		}
		return r
	}
	p.fold(recs("node1", 100, 300))
	p.fold(recs("node1", 200)) // older than the 300 W sample: in the window, not the newest
	p.fold(recs("node2", 50))
	got := p.Rollup()
	want := Rollup{Time: now.UnixNano(), Hosts: map[string]float64{"node1": 300, "node2": 50}, Clusters: map[string]float64{"": 350}, GPUs: 2,
		Windows: map[string]Window{"node1/node1-gpu0": {Count: 3, Mean: 200, Min: 100, Max: 300}, "node2/node2-gpu0": {Count: 1, Mean: 50, Min: 50, Max: 50}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("roll-up\n got %+v\nwant %+v", got, want)
	}
	// The next window holds only what came after.
	p.fold(recs("node2", 70, 90))
	got = p.Rollup()
	want = Rollup{Time: now.UnixNano(), Hosts: map[string]float64{"node1": 300, "node2": 90}, Clusters: map[string]float64{"": 390}, GPUs: 2,
		Windows: map[string]Window{"node2/node2-gpu0": {Count: 2, Mean: 80, Min: 70, Max: 90}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("second roll-up\n got %+v\nwant %+v", got, want)
	}
}
