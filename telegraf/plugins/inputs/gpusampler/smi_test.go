package gpusampler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/testutil"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/execd"
	"github.com/gpusampler/gpusampler/record"
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
	c := nvidiasmitest.Check(t, ref, acc.GetTelegrafMetrics())
	// What the simulated H200 SXM lacks, as nvidia-smi shows N/A for it on
	// such a board: a fan, Grace-Hopper module power, page retirement
	// (rows are remapped instead). Everything else Telegraf writes, the
	// drop-in writes.
	if got, want := c.TelegrafOnly(), []string{"fan_speed", "module_power_draw", "retired_pages_blacklist", "retired_pages_pending"}; !slices.Equal(got, want) {
		t.Errorf("names only Telegraf's nvidia_smi writes: %v, want %v", got, want)
	}
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

// Every name Telegraf's nvidia_smi writes, the drop-in shape can write, with
// Telegraf's type: one value of every catalog metric (1, so two-state
// metrics have their text) and a device with every identity string,
// gathered by the execd output in shape nvidia_smi and parsed by Telegraf's
// influx parser, leaves no name only Telegraf writes and no clash. This
// covers what the simulator has no data for (fan, module power, pending
// page retirement).
func TestNvidiaSMIShapeEveryName(t *testing.T) {
	ref := nvidiasmitest.Load(t)
	acc := &testutil.Accumulator{}
	sink, err := newLineSink(acc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := execd.New(sink, execd.Options{Signal: execd.SignalStdin, Shape: execd.ShapeNvidiaSMI, Trigger: make(chan struct{})})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	dev := record.Device{Index: 0, UUID: "GPU-0", Name: "NVIDIA H100", PCIBusID: "00000000:18:00.0", Serial: "1650", DriverVersion: "570.86.15",
		CUDAVersion: "12.8", VBIOSVersion: "96.00.89.00.01", ECCMode: record.ModeEnabled, Architecture: "Hopper", ComputeMode: "Default"}
	var samples []record.Sample
	for _, m := range catalog.Default().All() {
		samples = append(samples, record.Sample{TimeNS: 1e18, Value: 1, Device: 0, Metric: m.ID})
	}
	if err := out.Write(context.Background(), &record.Batch{Devices: []record.Device{dev}, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	if err := out.Gather(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Errors) > 0 {
		t.Fatalf("parser errors: %v", acc.Errors)
	}
	c := nvidiasmitest.Check(t, ref, acc.GetTelegrafMetrics())
	if only := c.TelegrafOnly(); len(only) > 0 {
		t.Errorf("names only Telegraf's nvidia_smi writes: %v", only)
	}
}
