package prometheus

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// Every per-job field's series: name, type, help and value, pinned.
func TestJobSeriesPinned(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	o, err := New(Options{Listen: "127.0.0.1:0", Host: "node7", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	var fields []record.Field
	for i, k := range record.JobFieldKeys() {
		fields = append(fields, record.Field{Key: k, Value: float64(i + 1)})
	}
	b := &record.Batch{Devices: []record.Device{{Index: 3, UUID: "GPU-3"}}, Events: []record.Event{{Kind: record.EventJob, Device: 3,
		StartNS: now.UnixNano(), EndNS: now.UnixNano(), Attrs: []record.Attr{{Key: record.AttrOwner, Value: "unattributed"}}, Fields: fields}}}
	if err := o.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	mfs, err := o.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if len(mf.GetName()) > 15 && mf.GetName()[:15] == "gpusampler_job_" {
			got[mf.GetName()] = mf.GetType().String() + " " + strconv.FormatFloat(m.GetCounter().GetValue()+m.GetGauge().GetValue(), 'g', -1, 64) + " " + mf.GetHelp()
		}
	}
	want := map[string]string{
		"gpusampler_job_energy_joules_total":          "COUNTER 1 Energy the owner used on the GPU, integrated from every power-buffer sample (trapezoid between driver timestamps; nothing across a gap).",
		"gpusampler_job_energy_counter_joules_total":  "COUNTER 2 The owner's share of the GPU's energy-counter deltas (split in proportion to the integrated energy between readings).",
		"gpusampler_job_energy_diff_joules":           "GAUGE 3 energy_counter minus energy: how far the counter and the integrated samples disagree.",
		"gpusampler_job_busy_seconds_total":           "COUNTER 4 Seconds in which the owner's part of the GPU utilization was at least 1% (a kernel ran).",
		"gpusampler_job_idle_allocated_seconds_total": "COUNTER 5 Seconds the GPU was allocated to the owner and the owner ran no kernel.",
		"gpusampler_job_allocated_seconds_total":      "COUNTER 6 Seconds the owner held the GPU (along its power samples, or its other samples where it has none; gaps included).",
		"gpusampler_job_point_read_seconds_total":     "COUNTER 7 Seconds of the owner's time whose utilization came from point reads, not the driver's samples.",
		"gpusampler_job_lost_seconds_total":           "COUNTER 8 Seconds of the owner's time without power samples (a lost GPU, lost buffer samples).",
		"gpusampler_job_exactness_ratio":              "GAUGE 9 1 - (point-read + lost seconds) / allocated seconds.",
		"gpusampler_job_memory_peak_mib":              "GAUGE 10 Peak GPU memory the owner used (MiB).",
		"gpusampler_job_power_samples_total":          "COUNTER 11 Power samples integrated into the owner's energy.",
	}
	if !maps.Equal(got, want) {
		t.Errorf("series:\n%v\nwant:\n%v", got, want)
	}
}
