package agent_test

import (
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/agent"
	"github.com/gpusampler/gpusampler/sampler"
)

func TestSelfEvents(t *testing.T) {
	now := time.Unix(100, 0)
	st := sampler.Stats{
		Outputs: []sampler.OutputStats{{Name: "stdout", Published: 10, Read: 8, Dropped: 2, Delivered: 8, Lag: 3}},
		Devices: []sampler.DeviceStats{{Index: 0, UUID: "GPU-a", Calls: 30, NewestNS: now.UnixNano() - 5e8, SamplesPerCall: 4}},
	}
	prev := map[int]uint64{0: 10}
	evs := agent.SelfEvents(st, now, 2*time.Second, prev)
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	field := func(ev sampler.Event, k string) float64 {
		for _, f := range ev.Fields {
			if f.Key == k {
				return f.Value
			}
		}
		t.Fatalf("no field %s", k)
		return 0
	}
	if evs[0].Kind != sampler.EventSelf || field(evs[0], "dropped") != 2 || field(evs[0], "buffered") != 3 {
		t.Errorf("output event %+v", evs[0])
	}
	if field(evs[1], "nvml_calls_per_s") != 10 || field(evs[1], "newest_sample_age_ns") != 5e8 || prev[0] != 30 {
		t.Errorf("device event %+v", evs[1])
	}
}
