package jsonl_test

import (
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/record"
)

// The device's attribution is a field of its device, sample, summary and
// event records.
func TestEncodeAttribution(t *testing.T) {
	e := jsonl.New(jsonl.Options{Host: "n1"})
	e.Encode(&record.Batch{
		Devices: []record.Device{{Index: 1, UUID: "GPU-1", Generation: 2,
			Attribution: record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer", HPCJob: "4711"}}},
		Samples:   []record.Sample{{TimeNS: 5, Value: 97, Device: 1, Metric: catalog.MetricUtilGPU}},
		Summaries: []record.Summary{{StartNS: 10e9, IntervalNS: 1e9, Mean: 1, Min: 1, Max: 1, Last: 1, Count: 1, Device: 1, Metric: catalog.MetricPowerDraw}},
		Events:    []record.Event{{Kind: record.EventXID, Device: 1, StartNS: 7, EndNS: 7, Message: "xid 79"}},
	})
	attr := `"pod":"train-7","namespace":"ml","container":"trainer","hpc_job":"4711"`
	want := `{"type":"device","host":"n1","index":1,"uuid":"GPU-1","name":"","pci_bus_id":"","memory_total_mib":0,"driver_version":"","backend":"",` + attr + `,"generation":2}` + "\n" +
		`{"type":"sample","time":5,"host":"n1","gpu":1,"uuid":"GPU-1",` + attr + `,"metric":"utilization_gpu","value":97,"unit":"%"}` + "\n" +
		`{"type":"summary","time":10000000000,"interval_ns":1000000000,"host":"n1","gpu":1,"uuid":"GPU-1",` + attr + `,"metric":"power_draw",` +
		`"mean":1,"min":1,"max":1,"last":1,"count":1,"unit":"W"}` + "\n" +
		`{"type":"event","host":"n1","kind":"xid","gpu":1,"uuid":"GPU-1","start_ns":7,"end_ns":7,"message":"xid 79",` + attr + `}` + "\n"
	if got := string(e.Bytes()); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
