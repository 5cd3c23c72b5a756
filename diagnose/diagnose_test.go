package diagnose_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/diagnose"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// replay runs a simulated GPU of profile for d on an injected clock,
// feeding the detector what the engine would (drained buffers, slow state
// once a second), and returns the findings' names (closed ones).
func replay(t *testing.T, profile string, d time.Duration) ([]string, []sampler.Event) {
	t.Helper()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	src, err := sim.New(sim.Options{GPUs: 1, Profile: profile, Seed: 3, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := src.Devices()
	dev := ds[0]
	id, _ := dev.Identity()
	var events []sampler.Event
	det := diagnose.New(func(e sampler.Event) { events = append(events, e.Clone()) })
	cursor := map[sampler.BufferType]uint64{}
	slow := []sampler.MetricID{sampler.MetricPowerLimit, sampler.MetricMemoryTotal, sampler.MetricMemoryUsed, sampler.MetricTempGPU,
		sampler.MetricTempMemory, sampler.MetricClocksEventReasons, sampler.MetricXIDCount}
	out := make([]sampler.Reading, len(slow))
	var raw []sampler.RawSample
	var batch []sampler.Sample
	end := now.Add(d)
	for step := 0; now.Before(end); step++ {
		now = now.Add(100 * time.Millisecond)
		batch = batch[:0]
		for _, bt := range []sampler.BufferType{sampler.BufferTotalPower, sampler.BufferGPUUtil} {
			raw, err = dev.Drain(bt, cursor[bt], raw[:0])
			if err != nil {
				continue
			}
			for _, r := range raw {
				batch = append(batch, sampler.Sample{TimeNS: int64(r.TimeUS) * 1000, Value: r.Value, Metric: sampler.DefaultCatalog.BufferMetric(bt)})
				cursor[bt] = max(cursor[bt], r.TimeUS)
			}
		}
		if step%10 == 0 {
			if err := dev.Read(slow, out); err != nil {
				t.Fatal(err)
			}
			for i, r := range out {
				if r.Err == nil {
					batch = append(batch, sampler.Sample{TimeNS: now.UnixNano(), Value: r.Value, Metric: slow[i]})
				}
			}
		}
		det.Observe(&id, batch)
	}
	det.Flush()
	var names []string
	for _, e := range events {
		if e.Kind != sampler.EventFinding {
			t.Fatalf("event kind %s", e.Kind)
		}
		i := slices.IndexFunc(e.Attrs, func(a sampler.Attr) bool { return a.Key == "finding" })
		st := slices.IndexFunc(e.Attrs, func(a sampler.Attr) bool { return a.Key == "state" })
		if e.Attrs[st].Value == "closed" {
			if e.EndNS < e.StartNS || e.StartNS == 0 {
				t.Errorf("%s: closed finding spans %d..%d", profile, e.StartNS, e.EndNS)
			}
			if !slices.Contains(names, e.Attrs[i].Value) {
				names = append(names, e.Attrs[i].Value)
			}
		}
	}
	slices.Sort(names)
	return names, events
}

func attr(e sampler.Event, k string) string {
	for _, a := range e.Attrs {
		if a.Key == k {
			return a.Value
		}
	}
	return ""
}

func TestDetectorsPerProfile(t *testing.T) {
	for _, tc := range []struct {
		profile string
		want    []string
	}{
		{"idle", nil},
		{"training", nil},
		{"data-stall", []string{diagnose.FindingPeriodicDips}},
		{"launch-bound", []string{diagnose.FindingLaunchBound}},
		{"thermal", []string{diagnose.FindingThrottle, diagnose.FindingTemperature}},
		{"memory-pressure", []string{diagnose.FindingMemoryFull}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			got, events := replay(t, tc.profile, 90*time.Second)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("findings %v, want %v", got, tc.want)
			}
			for _, e := range events {
				switch attr(e, "finding") {
				case diagnose.FindingPeriodicDips:
					if p := attr(e, "period_s"); p != "6" {
						t.Errorf("dip period %s s, want the simulator's 6 s", p)
					}
				case diagnose.FindingTemperature:
					if attr(e, "threshold_source") == "field_guide" {
						t.Errorf("temperature threshold from the field guide although the device reports its own: %+v", e)
					}
				case diagnose.FindingThrottle:
					if r := attr(e, "reason"); r != "sw_thermal+hw_thermal" {
						t.Errorf("throttle reason %q", r)
					}
				}
			}
		})
	}
}

func TestFallbackThresholds(t *testing.T) {
	var events []sampler.Event
	det := diagnose.New(func(e sampler.Event) { events = append(events, e) })
	dev := &sampler.Device{Index: 2} // reports no thresholds
	det.Observe(dev, []sampler.Sample{{TimeNS: 1e9, Value: 81, Metric: sampler.MetricTempGPU}})
	det.Flush()
	if len(events) != 2 || attr(events[0], "threshold_source") != "field_guide" || attr(events[0], "threshold_c") != "80" {
		t.Fatalf("events %+v", events)
	}
}

func TestXIDFinding(t *testing.T) {
	var events []sampler.Event
	det := diagnose.New(func(e sampler.Event) { events = append(events, e) })
	dev := &sampler.Device{Index: 0}
	det.Observe(dev, []sampler.Sample{{TimeNS: 1e9, Value: 0, Metric: sampler.MetricXIDCount}})
	det.Observe(dev, []sampler.Sample{{TimeNS: 2e9, Value: 1, Metric: sampler.MetricXIDCount}})
	det.Observe(dev, []sampler.Sample{{TimeNS: 3e9, Value: 1, Metric: sampler.MetricXIDCount}})
	if len(events) != 1 || attr(events[0], "finding") != diagnose.FindingXID {
		t.Fatalf("events %+v", events)
	}
}
