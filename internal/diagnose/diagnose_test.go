package diagnose_test

import (
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/diagnose"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// replay runs a simulated GPU of profile for d on an injected clock,
// feeding the detector what the engine would (drained buffers, slow state
// once a second), and returns the findings' names (closed ones).
func replay(t *testing.T, profile string, d time.Duration) ([]string, []record.Event) {
	t.Helper()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	src, err := sim.New(sim.Options{GPUs: 1, Profile: profile, Seed: 3, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := src.Devices()
	dev := ds[0]
	id, _ := dev.Identity()
	var events []record.Event
	det := diagnose.New(func(e record.Event) { events = append(events, e.Clone()) })
	cursor := map[catalog.BufferType]uint64{}
	slow := []catalog.MetricID{catalog.MetricPowerLimit, catalog.MetricMemoryTotal, catalog.MetricMemoryUsed, catalog.MetricTempGPU,
		catalog.MetricTempMemory, catalog.MetricClocksEventReasons, catalog.MetricXIDCount,
		catalog.MetricSMActive, catalog.MetricNVLinkTxRate, catalog.MetricNVLinkRxRate, catalog.MetricPCIeTxRate, catalog.MetricPCIeRxRate,
		catalog.MetricNVLinkTxBytes, catalog.MetricNVLinkRxBytes, catalog.MetricPCIeTxBytes, catalog.MetricPCIeRxBytes,
		catalog.MetricPCIeLinkGen, catalog.MetricPCIeLinkWidth}
	out := make([]sampler.Reading, len(slow))
	var raw []sampler.RawSample
	var batch []record.Sample
	end := now.Add(d)
	for step := 0; now.Before(end); step++ {
		now = now.Add(100 * time.Millisecond)
		batch = batch[:0]
		for _, bt := range []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferGPUUtil} {
			raw, err = dev.Drain(bt, cursor[bt], raw[:0])
			if err != nil {
				continue
			}
			for _, r := range raw {
				batch = append(batch, record.Sample{TimeNS: int64(r.TimeUS) * 1000, Value: r.Value, Metric: catalog.Default().BufferMetric(bt)})
				cursor[bt] = max(cursor[bt], r.TimeUS)
			}
		}
		if step%10 == 0 {
			if err := dev.Read(slow, out); err != nil {
				t.Fatal(err)
			}
			for i, r := range out {
				if r.Err == nil {
					batch = append(batch, record.Sample{TimeNS: now.UnixNano(), Value: r.Value, Metric: slow[i]})
				}
			}
		}
		det.Observe(&id, batch)
	}
	det.Flush()
	var names []string
	for _, e := range events {
		if e.Kind != record.EventFinding {
			t.Fatalf("event kind %s", e.Kind)
		}
		i := slices.IndexFunc(e.Attrs, func(a record.Attr) bool { return a.Key == "finding" })
		st := slices.IndexFunc(e.Attrs, func(a record.Attr) bool { return a.Key == "state" })
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

func attr(e record.Event, k string) string {
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
		{"comm-bound", []string{diagnose.FindingCommBound}},
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
				case diagnose.FindingCommBound:
					if attr(e, "link") != "nvlink" || attr(e, "rate_source") != "gpm" || attr(e, "sm_active_pct") == "" {
						t.Errorf("communication-bound evidence %+v: want nvlink, from GPM, with SM activity", e.Attrs)
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
	var events []record.Event
	det := diagnose.New(func(e record.Event) { events = append(events, e) })
	dev := &record.Device{Index: 2} // reports no thresholds
	det.Observe(dev, []record.Sample{{TimeNS: 1e9, Value: 81, Metric: catalog.MetricTempGPU}})
	det.Flush()
	if len(events) != 2 || attr(events[0], "threshold_source") != "field_guide" || attr(events[0], "threshold_c") != "80" {
		t.Fatalf("events %+v", events)
	}
}

func TestXIDFinding(t *testing.T) {
	var events []record.Event
	det := diagnose.New(func(e record.Event) { events = append(events, e) })
	dev := &record.Device{Index: 0}
	det.Observe(dev, []record.Sample{{TimeNS: 1e9, Value: 0, Metric: catalog.MetricXIDCount}})
	det.Observe(dev, []record.Sample{{TimeNS: 2e9, Value: 1, Metric: catalog.MetricXIDCount}})
	det.Observe(dev, []record.Sample{{TimeNS: 3e9, Value: 1, Metric: catalog.MetricXIDCount}})
	if len(events) != 1 || attr(events[0], "finding") != diagnose.FindingXID {
		t.Fatalf("events %+v", events)
	}
}

// Every simulator profile has a row in TestDetectorsPerProfile, so each
// diagnosis is shown not to fire on the others.
func TestEveryProfileCovered(t *testing.T) {
	covered := []string{"idle", "training", "data-stall", "launch-bound", "thermal", "memory-pressure", "comm-bound"}
	for _, p := range sim.Profiles {
		if !slices.Contains(covered, p) {
			t.Errorf("profile %q has no row in TestDetectorsPerProfile", p)
		}
	}
}

// commFeed feeds one device a second at a time for secs+1 seconds:
// utilization (engine), SM activity (unless sm < 0), and byte counters
// growing by nvlink and pcie bytes/s in each direction. Counter rates need
// two readings and a verdict 1 s of rates: a finding opens at the third
// second, starting at the first rate (the second second).
func commFeed(det *diagnose.Detector, dev *record.Device, secs int, util, sm float64, nvlink, pcie float64, gen, width float64) {
	for i := 0; i <= secs; i++ {
		ts := int64(i+1) * 1e9
		b := []record.Sample{{TimeNS: ts, Value: util, Metric: catalog.MetricUtilGPU},
			{TimeNS: ts, Value: nvlink * float64(i), Metric: catalog.MetricNVLinkTxBytes},
			{TimeNS: ts, Value: nvlink * float64(i), Metric: catalog.MetricNVLinkRxBytes},
			{TimeNS: ts, Value: pcie * float64(i), Metric: catalog.MetricPCIeTxBytes},
			{TimeNS: ts, Value: pcie * float64(i), Metric: catalog.MetricPCIeRxBytes}}
		if gen > 0 {
			b = append(b, record.Sample{TimeNS: ts, Value: gen, Metric: catalog.MetricPCIeLinkGen},
				record.Sample{TimeNS: ts, Value: width, Metric: catalog.MetricPCIeLinkWidth})
		}
		if sm >= 0 {
			b = append(b, record.Sample{TimeNS: ts, Value: sm, Metric: catalog.MetricSMActive})
		}
		det.Observe(dev, b)
	}
	det.Flush()
}

func TestCommBoundSynthetic(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		util, sm               float64
		nvlink, pcie, gen, wid float64
		want                   map[string]string // evidence; nil: no finding
	}{
		{name: "nvlink counters, no GPM", util: 45, sm: -1, nvlink: 150e9, pcie: 1e9,
			want: map[string]string{"link": "nvlink", "nvlink_gbps": "300", "pcie_gbps": "2", "rate_source": "counters", "utilization_pct": "45",
				"pcie_threshold_gbps": "16", "nvlink_threshold_gbps": "250", "peak": "302"}},
		{name: "pcie at half a gen4 x16 link", util: 30, sm: 20, nvlink: 0, pcie: 18e9, gen: 4, wid: 16,
			want: map[string]string{"link": "pcie", "nvlink_gbps": "0", "pcie_gbps": "36", "rate_source": "counters", "sm_active_pct": "20",
				"pcie_threshold_gbps": "31.5", "nvlink_threshold_gbps": "250", "peak": "36"}},
		{name: "pcie busy but a gen5 link has room", util: 30, sm: 20, pcie: 18e9, gen: 5, wid: 16},
		{name: "links busy, SMs busy too", util: 95, sm: 85, nvlink: 150e9},
		{name: "links busy, engine busy, no GPM", util: 90, sm: -1, nvlink: 150e9},
		{name: "SMs idle, links quiet", util: 20, sm: 10, nvlink: 10e9, pcie: 1e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events []record.Event
			det := diagnose.New(func(e record.Event) { events = append(events, e.Clone()) })
			commFeed(det, &record.Device{Index: 1}, 6, tc.util, tc.sm, tc.nvlink, tc.pcie, tc.gen, tc.wid)
			if tc.want == nil {
				if len(events) != 0 {
					t.Fatalf("findings %+v, want none", events)
				}
				return
			}
			if len(events) != 2 {
				t.Fatalf("events %+v, want one finding opened and closed", events)
			}
			e := events[1]
			got := map[string]string{}
			for _, a := range e.Attrs {
				got[a.Key] = a.Value
			}
			tc.want["finding"], tc.want["state"] = diagnose.FindingCommBound, "closed"
			if e.Device != 1 || e.StartNS != 2e9 || e.EndNS != 7e9 || !maps.Equal(got, tc.want) {
				t.Fatalf("finding on GPU %d %d..%d %v,\nwant GPU 1 2e9..7e9 %v", e.Device, e.StartNS, e.EndNS, got, tc.want)
			}
		})
	}
}

// A process on a GPU that may run only on CPUs outside the GPU's affinity
// is a NUMA-placement finding, one per process, open while it is seen so
// placed and closed quietNS after; processes allowed on a close CPU, and
// simulated devices' made-up processes, raise nothing.
func TestNUMAPlacementLive(t *testing.T) {
	var events []record.Event
	det := diagnose.New(func(e record.Event) { events = append(events, e.Clone()) },
		diagnose.WithPlacement(func(dev int) ([]int, error) {
			return map[int][]int{0: {0, 1, 2, 3}, 1: {4, 5, 6, 7}}[dev], nil
		}, func(pid int) ([]int, error) {
			return map[int][]int{100: {5}, 101: {0, 1, 2, 3, 4, 5, 6, 7}, 102: {3, 4}, 103: {4, 6, 7}}[pid], nil
		}))
	gpu0, gpu1, simGPU := &record.Device{Index: 0}, &record.Device{Index: 1}, &record.Device{Index: 2, Simulated: true}
	for s := int64(1); s <= 3; s++ {
		det.ObserveProcesses(gpu0, []uint32{100, 101, 102, 999}, s*1e9) // 999: gone
		det.ObserveProcesses(gpu1, []uint32{100, 103}, s*1e9)
		det.ObserveProcesses(simGPU, []uint32{100}, s*1e9)
	}
	det.ObserveProcesses(gpu0, []uint32{101}, 9e9) // 100 is gone: its finding closes
	det.Flush()
	advice := "process 100 runs on CPUs 5, none of them close to GPU 0 (its CPUs: 0-3): every copy and kernel launch crosses the " +
		"socket interconnect. Bind it to the GPU's CPUs, as the field guide does: CUDA_VISIBLE_DEVICES=0 numactl -C 0-3 CMD (or taskset -c 0-3 CMD)"
	attrs := func(state string) []record.Attr {
		return []record.Attr{{Key: "finding", Value: diagnose.FindingNUMA}, {Key: "state", Value: state},
			{Key: "pid", Value: "100"}, {Key: "process_cpus", Value: "5"}, {Key: "gpu_cpus", Value: "0-3"}}
	}
	want := []record.Event{
		{Kind: record.EventFinding, Device: 0, StartNS: 1e9, Message: advice, Attrs: attrs("open")},
		{Kind: record.EventFinding, Device: 0, StartNS: 1e9, EndNS: 3e9, Message: advice, Attrs: attrs("closed")},
	}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events\n%+v\nwant\n%+v", events, want)
	}
	// Without WithPlacement, nothing is judged.
	events = nil
	plain := diagnose.New(func(e record.Event) { events = append(events, e) })
	plain.ObserveProcesses(gpu0, []uint32{100}, 1e9)
	plain.Flush()
	if len(events) != 0 {
		t.Fatalf("findings without WithPlacement: %+v", events)
	}
}

func TestCPUList(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		want string
	}{{nil, ""}, {[]int{3}, "3"}, {[]int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"}} {
		if got := diagnose.CPUList(tc.cpus); got != tc.want {
			t.Errorf("CPUList(%v) = %q, want %q", tc.cpus, got, tc.want)
		}
	}
}
