package jsonl_test

import (
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/record"
)

func TestEncodeSummary(t *testing.T) {
	e := jsonl.New(jsonl.Options{Host: "n1"})
	e.Encode(&record.Batch{Summaries: []record.Summary{
		{StartNS: 10e9, IntervalNS: 1e9, Mean: 612.25, Min: 100, Max: 698.5, Last: 600, Count: 20, Device: 1, Metric: catalog.MetricPowerDraw},
	}})
	want := `{"type":"summary","time":10000000000,"interval_ns":1000000000,"host":"n1","gpu":1,"metric":"power_draw",` +
		`"mean":612.25,"min":100,"max":698.5,"last":600,"count":20,"unit":"W"}` + "\n"
	if got := string(e.Bytes()); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
