package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

func TestScriptDrivesLoadProcessesAndMemory(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{start}
	s, err := New(Options{GPUs: 2, Seed: 1, Now: clk.now, Script: map[int][]Phase{0: {
		{Until: 2 * time.Second, Util: 100, Procs: []ScriptProcess{{PID: 11, SMUtil: 70, MemoryMiB: 1000}, {PID: 12, SMUtil: 30, MemoryMiB: 500}}},
		{Until: 4 * time.Second, Util: 0, Procs: []ScriptProcess{{PID: 12, MemoryMiB: 500}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	d := device(t, s, 0)
	clk.t = start.Add(3 * time.Second)
	util, err := d.Drain(catalog.BufferGPUUtil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range util {
		if r.Value != 100 {
			t.Fatalf("utilization sample %+v during the busy phase, want 100 (the idle phase records none)", r)
		}
	}
	if last := d.rawUS(start.Add(2 * time.Second)); len(util) == 0 || util[len(util)-1].TimeUS >= last {
		t.Fatalf("utilization samples %v reach into the idle phase", util)
	}
	power, _ := d.Drain(catalog.BufferTotalPower, 0, nil)
	busyW, idleW := 0.0, 0.0
	for _, r := range power {
		if r.TimeUS < d.rawUS(start.Add(2*time.Second)) {
			busyW = max(busyW, r.Value)
		} else {
			idleW = max(idleW, r.Value)
		}
	}
	if busyW < 550 || idleW > 110 {
		t.Fatalf("power busy %v W, idle %v W: want the utilization's", busyW, idleW)
	}
	procs, err := d.Processes(sampler.ProcessQuery{}, nil)
	if err != nil || len(procs) != 1 || procs[0].PID != 12 || procs[0].HasUtil || procs[0].UsedMemoryMiB != 500 {
		t.Fatalf("processes in the idle phase: %+v, %v", procs, err)
	}
	clk.t = start.Add(time.Second)
	procs, _ = d.Processes(sampler.ProcessQuery{}, nil)
	if len(procs) != 2 || procs[0].SMUtil != 70 || procs[1].SMUtil != 30 || !procs[0].HasUtil {
		t.Fatalf("processes in the busy phase: %+v", procs)
	}
	var out [1]sampler.Reading
	if err := d.Read([]catalog.MetricID{catalog.MetricMemoryUsed}, out[:]); err != nil || out[0].Value != 1500 {
		t.Fatalf("memory used %+v, %v; want the processes' 1500 MiB", out[0], err)
	}
	// Device 1 keeps its profile.
	if procs, _ := device(t, s, 1).Processes(sampler.ProcessQuery{}, nil); len(procs) != 1 || procs[0].Name != "python3" || procs[0].PID == 11 {
		t.Fatalf("device 1's processes %+v, want the profile's", procs)
	}
}

func TestScriptErrors(t *testing.T) {
	for _, tc := range []struct {
		phases []Phase
		want   string
	}{
		{nil, "no phase"},
		{[]Phase{{Until: 2 * time.Second}, {Until: time.Second}, {}}, "not after phase 0"},
		{[]Phase{{Util: 120}}, "util 120"},
		{[]Phase{{Procs: []ScriptProcess{{PID: 3, SMUtil: -1}}}}, "process 3"},
	} {
		_, err := New(Options{GPUs: 1, Script: map[int][]Phase{0: tc.phases}})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "script of gpu 0") {
			t.Errorf("%+v: err %v, want %q", tc.phases, err, tc.want)
		}
	}
}
