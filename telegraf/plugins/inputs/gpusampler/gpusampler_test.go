package gpusampler

import (
	"bytes"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/influxdata/telegraf/plugins/inputs"
	"github.com/influxdata/telegraf/testutil"

	"github.com/gpusampler/gpusampler/outputs/execd"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
	"github.com/gpusampler/gpusampler/telegraf/internal/metrictest"
)

// syncBuffer is a bytes.Buffer safe for one writer and a later reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRegistered(t *testing.T) {
	c, ok := inputs.Inputs["gpusampler"]
	if !ok {
		t.Fatal("inputs.gpusampler is not registered")
	}
	p, ok := c().(*GPUSampler)
	if !ok {
		t.Fatalf("registered creator returns %T", c())
	}
	if !reflect.DeepEqual(p, New()) {
		t.Errorf("registered plugin %+v, want the defaults %+v", p, New())
	}
	if !strings.Contains(p.SampleConfig(), "[[inputs.gpusampler]]") {
		t.Errorf("sample config lacks the plugin's table:\n%s", p.SampleConfig())
	}
}

func TestInitRejectsBadKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*GPUSampler)
		want string
	}{
		{"backend", func(p *GPUSampler) { p.Backend = "cuda" }, `backend "cuda"`},
		{"shape", func(p *GPUSampler) { p.Shape = "summary" }, `shape "summary"`},
		{"min_max", func(p *GPUSampler) { p.MinMax = true }, `min_max applies to shape "nvidia_smi"`},
		{"profile", func(p *GPUSampler) { p.SimProfile = "gaming" }, `sim_profile "gaming"`},
		{"gpus", func(p *GPUSampler) { p.SimGPUs = 65 }, "sim_gpus 65"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New()
			tc.set(p)
			err := p.Init()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Init() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestAccumulatorMatchesTwin runs the plugin on simulated GPUs into
// Telegraf's test accumulator and compares everything it received with a
// twin output of the same engine: the same records, on their driver
// timestamps, with no host tag.
func TestAccumulatorMatchesTwin(t *testing.T) {
	twin := &syncBuffer{}
	p := New()
	p.Backend, p.SimSeed, p.Twin = BackendSim, 7, twin
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	acc := &testutil.Accumulator{}
	if err := p.Start(acc); err != nil {
		t.Fatal(err)
	}
	acc.Wait(50) // waits on the accumulator's state, not on a clock
	p.Stop()
	if err := p.Gather(acc); err != nil {
		t.Errorf("Gather: %v", err)
	}
	if len(acc.Errors) > 0 {
		t.Fatalf("accumulator errors: %v", acc.Errors)
	}
	got := acc.GetTelegrafMetrics()
	want := metrictest.Parse(t, twin.String())
	gp, wp := metrictest.Points(got), metrictest.Points(want)
	if !slices.Equal(gp, wp) {
		t.Fatalf("accumulator and twin differ:\naccumulator (%d points): %.2000s\ntwin (%d points): %.2000s", len(gp), strings.Join(gp, "\n"), len(wp), strings.Join(wp, "\n"))
	}
	t.Logf("%d metrics, %d points; first: %.300s", len(got), len(gp), strings.Join(gp[:3], " | "))
	stamps := map[int64]bool{}
	for _, m := range got {
		if _, ok := m.GetTag("host"); ok {
			t.Fatalf("metric has a host tag (Telegraf adds its own): %v", m)
		}
		stamps[m.Time().UnixNano()] = true
	}
	if len(stamps) < 2 {
		t.Errorf("all %d metrics on %d timestamps: want each sample on its own driver timestamp", len(got), len(stamps))
	}
}

// TestLineSink feeds the sink lines split at arbitrary points and one line
// Telegraf's parser refuses: every good line becomes its metric, the bad
// one is counted, reported to the accumulator and by the next Gather.
func TestLineSink(t *testing.T) {
	acc := &testutil.Accumulator{}
	sink, err := newLineSink(acc)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []string{"nvidia_smi,index=0 power_draw=1.5,memory_used=7i 100\nnot line protocol\nnvidia_smi,ind", "ex=1 power_draw=2.5 200", "\n"} {
		if n, err := sink.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	got := metrictest.Points(acc.GetTelegrafMetrics())
	want := []string{
		"nvidia_smi,index=0 memory_used=7 100",
		"nvidia_smi,index=0 power_draw=1.5 100",
		"nvidia_smi,index=1 power_draw=2.5 200",
	}
	if !slices.Equal(got, want) {
		t.Errorf("metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(acc.Errors) != 1 {
		t.Errorf("accumulator errors %v, want the refused line's", acc.Errors)
	}
	out, err := execd.New(io.Discard, execd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	src, err := sim.New(sim.Options{GPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := sampler.New(src, sampler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := &GPUSampler{Shape: ShapeRaw, eng: eng, out: out, sink: sink}
	if err := p.Gather(acc); err == nil || !strings.Contains(err.Error(), "1 lines dropped") {
		t.Errorf("Gather = %v, want the dropped line reported", err)
	}
	if err := p.Gather(acc); err != nil {
		t.Errorf("second Gather = %v, want nil (reported once)", err)
	}
}

// TestNewLosses: each loss the engine counts for the plugin's output is
// reported once; other outputs' losses are not the plugin's.
func TestNewLosses(t *testing.T) {
	p := New()
	stats := func(dropped, failed, events uint64) sampler.Stats {
		return sampler.Stats{Outputs: []sampler.OutputStats{
			{Name: "twin", Dropped: 1000},
			{Name: outputName, Dropped: dropped, Failed: failed, EventsDropped: events},
		}}
	}
	for _, step := range []struct {
		st   sampler.Stats
		want uint64
	}{
		{stats(0, 0, 0), 0},
		{stats(5, 2, 1), 8},
		{stats(5, 2, 1), 0},
		{stats(9, 2, 1), 4},
		{sampler.Stats{}, 0},
	} {
		if got := p.newLosses(step.st); got != step.want {
			t.Fatalf("newLosses(%+v) = %d, want %d", step.st, got, step.want)
		}
	}
}
