package agent_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// A block with buffer = "memory"/"disk" gets a buffer between its pump and
// its output: everything arrives, the buffer's stats become self-metrics,
// and an unbuffered output beside it is unaffected.
func TestOutputBuffers(t *testing.T) {
	b := &builds{outs: map[string][]*memOut{}}
	reg := b.registry()
	dir := t.TempDir()
	cfg := mustParse(t, reg, `
[agent]
stats_interval = "50ms"
[sampler]
backend = "sim"
[[outputs.mem]]
name = "plain"
[[outputs.mem]]
name = "mem"
buffer = "memory"
[[outputs.mem]]
name = "disk"
buffer = "disk"
buffer_dir = "`+dir+`"
buffer_fsync_interval = "10ms"
`)
	if cfg.Outputs[1].Buffer.Kind != "memory" || cfg.Outputs[1].Buffer.MaxRecords == 0 || cfg.Outputs[2].Buffer.Dir != dir {
		t.Fatalf("buffer config: %+v / %+v", cfg.Outputs[1].Buffer, cfg.Outputs[2].Buffer)
	}
	src, err := sim.New(sim.Options{GPUs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(src, cfg, agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	bufs := a.Buffers()
	if len(bufs) != 2 || bufs["mem"] == nil || bufs["disk"] == nil {
		t.Fatalf("buffers %v, want mem and disk", bufs)
	}
	if evs := agent.BufferEvents(bufs, time.Now()); len(evs) != 2 || evs[0].Kind != record.EventSelf {
		t.Fatalf("buffer self-metrics: %+v", evs)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for a.Engine().Stats().Outputs[0].Delivered < 500 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := a.Engine().Stats()
	plain := b.get("plain")[0].samples.Load()
	for i, name := range []string{"plain", "mem", "disk"} {
		o := st.Outputs[i]
		if o.Name != name || o.Dropped != 0 || o.Failed != 0 || o.Delivered != o.Read {
			t.Errorf("%s: %+v", name, o)
		}
		if got := b.get(name)[0].samples.Load(); got != plain {
			t.Errorf("%s received %d samples, the unbuffered output %d", name, got, plain)
		}
	}
	for name, buf := range bufs {
		if s := buf.Stats(); s.BufferedRecords != 0 || s.DroppedRecords.Shutdown != 0 || s.Delivered == 0 {
			t.Errorf("%s buffer after close: %+v", name, s)
		}
	}
}
