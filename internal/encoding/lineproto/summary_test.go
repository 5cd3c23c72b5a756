package lineproto_test

import (
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/record"
)

func TestEncodeSummaries(t *testing.T) {
	e := lineproto.New(lineproto.Options{Host: "n1"})
	e.Encode(&record.Batch{
		Devices: []record.Device{{Index: 0, UUID: "GPU-a", Name: "H200"}},
		Summaries: []record.Summary{
			{StartNS: 10e9, IntervalNS: 1e9, Mean: 50.5, Min: 10, Max: 99, Last: 42, Count: 10, Metric: catalog.MetricUtilGPU},
			{StartNS: 10e9, IntervalNS: 1e9, Mean: 0, Min: 0, Max: 0x40, Last: 0x20, Count: 1, Metric: catalog.MetricClocksEventReasons},
			{StartNS: 10e9, IntervalNS: 1e9, Last: 0, Count: 1, Metric: catalog.MetricPState},
			{StartNS: 10e9, IntervalNS: 1e9, Mean: 1e6, Min: 1e6, Max: 2e6, Last: 2e6, Count: 2, Metric: catalog.MetricThrottleSWThermal},
		},
	})
	want := "nvidia_smi,host=n1,index=0,name=H200,pstate=P0,uuid=GPU-a " +
		"utilization_gpu_mean=50.5,utilization_gpu_min=10,utilization_gpu_max=99,utilization_gpu_last=42,utilization_gpu_count=10i," +
		"clocks_event_reasons_last=32,clocks_event_reasons_count=1i," +
		"clocks_event_reasons_counters_sw_therm_slowdown_mean=1000,clocks_event_reasons_counters_sw_therm_slowdown_min=1000," +
		"clocks_event_reasons_counters_sw_therm_slowdown_max=2000,clocks_event_reasons_counters_sw_therm_slowdown_last=2000," +
		"clocks_event_reasons_counters_sw_therm_slowdown_count=2i 10000000000\n"
	if got := string(e.Bytes()); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}
