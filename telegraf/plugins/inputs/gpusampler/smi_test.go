package gpusampler

import (
	"slices"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"

	"github.com/gpusampler/gpusampler/telegraf/nvidiasmitest"
)

// TestNvidiaSMIShape runs the plugin with shape "nvidia_smi" into Telegraf's
// test accumulator: each Gather writes one nvidia_smi metric per GPU, all
// its fields on one timestamp, memory_used and memory_total together (the
// dashboard's memory_used/memory_total has rows), nvidia_smi's tags, and
// no host tag. Its tags and fields have the names and types Telegraf's own
// nvidia_smi input writes on its fixtures (nvidiasmitest; -v logs the
// table).
func TestNvidiaSMIShape(t *testing.T) {
	ref := nvidiasmitest.Load(t)
	p := New()
	p.Backend, p.SimSeed, p.SimGPUs, p.Shape, p.MinMax = BackendSim, 3, 2, ShapeNvidiaSMI, true
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	acc := &testutil.Accumulator{}
	if err := p.Start(acc); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	// Gather until both GPUs' points carry memory: the engine's first
	// reads reach the output asynchronously. This waits on the
	// accumulator's state; the pause only spares the CPU.
	var points []telegraf.Metric
	for {
		if err := p.Gather(acc); err != nil {
			t.Fatalf("Gather: %v", err)
		}
		points = points[:0]
		for _, m := range acc.GetTelegrafMetrics() {
			if m.Name() == "nvidia_smi" && m.HasField("memory_total") && m.HasField("memory_used") {
				points = append(points, m)
			}
		}
		// and (min_max) until a window saw power samples
		if len(points) >= 2 && slices.ContainsFunc(points, func(m telegraf.Metric) bool { return m.HasField("power_draw_min") }) {
			break
		}
		acc.ClearMetrics()
		time.Sleep(20 * time.Millisecond)
	}
	nvidiasmitest.Check(t, ref, acc.GetTelegrafMetrics())
	var indexes []string
	for _, m := range points {
		idx, _ := m.GetTag("index")
		indexes = append(indexes, idx)
		for _, tag := range []string{"index", "uuid", "name", "pstate"} {
			if !m.HasTag(tag) {
				t.Errorf("GPU %s: no %s tag: %v", idx, tag, m)
			}
		}
		if m.HasTag("host") {
			t.Errorf("GPU %s: a host tag (Telegraf adds its own): %v", idx, m)
		}
		if total, _ := m.GetField("memory_total"); total == int64(0) {
			t.Errorf("GPU %s: memory_total is 0: %v", idx, m)
		}
		// min_max: the window's extremes bracket its mean, in its type;
		// state (memory_total) has none.
		if m.HasField("memory_total_min") || m.HasField("memory_total_max") {
			t.Errorf("GPU %s: extremes of a state metric: %v", idx, m)
		}
		if mean, ok := m.GetField("power_draw"); ok && m.HasField("power_draw_min") {
			lo, _ := m.GetField("power_draw_min")
			hi, _ := m.GetField("power_draw_max")
			l, okL := lo.(float64)
			h, okH := hi.(float64)
			if v := mean.(float64); !okL || !okH || l > v || v > h {
				t.Errorf("GPU %s: power_draw_min %v ≤ power_draw %v ≤ power_draw_max %v does not hold", idx, lo, mean, hi)
			}
		}
	}
	slices.Sort(indexes)
	if !slices.Equal(indexes, []string{"0", "1"}) {
		t.Errorf("one gather's points are for GPUs %v, want one each for 0 and 1", indexes)
	}
	if a, b := points[0].Time(), points[1].Time(); !a.Equal(b) {
		t.Errorf("one gather's points on %v and %v, want one timestamp", a, b)
	}
}
