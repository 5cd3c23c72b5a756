package agent_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/pipeline/deadletter"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// With dead_letter_dir, every batch the sink refuses as permanent is kept
// in NAME.deadletter: behind no buffer, exactly the samples and events the
// pump counts as failed; behind a buffer, what the buffer counts as
// malformed.
func TestDeadLetterDir(t *testing.T) {
	b := &builds{outs: map[string][]*memOut{}}
	reg := b.registry()
	dir := t.TempDir()
	cfg := mustParse(t, reg, `
[agent]
stats_interval = "1h"
[sampler]
backend = "sim"
[[outputs.mem]]
name = "plain"
label = "refuse"
flush_interval = "10ms"
dead_letter_dir = "`+dir+`"
[[outputs.mem]]
name = "buffered"
label = "refuse"
buffer = "memory"
dead_letter_dir = "`+dir+`"
`)
	src, err := sim.New(sim.Options{GPUs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(src, cfg, agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for a.Engine().Stats().Outputs[0].Failed < 100 || a.Buffers()["buffered"].Stats().DroppedRecords.Malformed == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := a.Engine().Stats().Outputs[0]
	var samples, events uint64
	if err := deadletter.ReadFile(filepath.Join(dir, "plain.deadletter"), func(e *deadletter.Entry) error {
		samples += uint64(len(e.Batch.Samples))
		events += uint64(len(e.Batch.Events))
		if e.Output != "plain" || e.Error != "schema clash" {
			t.Errorf("entry %+v", e.Header)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if st.Delivered != 0 || samples != st.Failed || events != st.EventsDropped {
		t.Fatalf("dead-lettered %d samples and %d events; pump: %+v", samples, events, st)
	}
	// The buffer counts the records of the batches the pump gave it (the
	// first with the GPU's identity); the sink was offered them with the
	// identities the buffer adds to them.
	var records, devices uint64
	if err := deadletter.ReadFile(filepath.Join(dir, "buffered.deadletter"), func(e *deadletter.Entry) error {
		records += uint64(e.Records)
		devices += uint64(len(e.Batch.Devices))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if m := a.Buffers()["buffered"].Stats().DroppedRecords.Malformed; records == 0 || records-devices != m-1 {
		t.Fatalf("buffered: dead-lettered %d records (%d identities), buffer counted %d malformed", records, devices, m)
	}
}
