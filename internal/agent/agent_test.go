package agent_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// memOut counts what it receives; safe to inspect after Close.
type memOut struct {
	label   string
	samples atomic.Uint64
	sums    atomic.Uint64
	closed  atomic.Bool
}

func (m *memOut) Write(_ context.Context, b *record.Batch) error {
	if m.closed.Load() {
		return record.ErrClosed
	}
	if m.label == "refuse" {
		return record.Permanent(errors.New("schema clash"))
	}
	m.samples.Add(uint64(len(b.Samples)))
	m.sums.Add(uint64(len(b.Summaries)))
	return nil
}

func (m *memOut) Close() error { m.closed.Store(true); return nil }

// builds records every output the registry built, per name.
type builds struct {
	mu   sync.Mutex
	outs map[string][]*memOut
}

func (b *builds) get(name string) []*memOut {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*memOut(nil), b.outs[name]...)
}

func (b *builds) registry() *outputs.Registry {
	return outputs.NewRegistry(outputs.Kind{
		Kind: "mem",
		Parse: func(t *config.Table) any {
			var label string
			t.String("label", &label)
			return label
		},
		Build: func(o *outputs.Block, _ outputs.BuildEnv) (record.Output, error) {
			label := o.Options.(string)
			if label == "unbuildable" {
				return nil, errors.New("cannot connect")
			}
			m := &memOut{label: label}
			b.mu.Lock()
			b.outs[o.Name] = append(b.outs[o.Name], m)
			b.mu.Unlock()
			return m, nil
		},
	})
}

func mustParse(t *testing.T, reg *outputs.Registry, doc string) *appconfig.Config {
	t.Helper()
	c, err := appconfig.Parse("test.toml", []byte(doc), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const base = `
[agent]
stats_interval = "1h"
[sampler]
drain_interval = "20ms"
field_interval = "20ms"
ring_size = 65536
[[outputs.mem]]
name = "steady"
label = "a"
flush_interval = "10ms"
`

func changing(label string) string {
	return base + "[[outputs.mem]]\nname = \"changing\"\nlabel = \"" + label + "\"\naggregate = \"100ms\"\n"
}

func TestReloadKeepsUnchangedOutput(t *testing.T) {
	bs := &builds{outs: map[string][]*memOut{}}
	reg := bs.registry()
	var periods [catalog.NumBufferTypes]time.Duration
	for i := range periods {
		periods[i] = 2 * time.Millisecond // load: ~500 samples/s per buffer and GPU
	}
	src, err := sim.New(sim.Options{GPUs: 2, Seed: 1, Periods: periods})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(src, mustParse(t, reg, changing("1")), agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	steady := bs.get("steady")[0]
	waitFor := func(n uint64) {
		for steady.samples.Load() < n {
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(1000)
	for i, label := range []string{"2", "3", "4"} {
		if err := a.Reload(mustParse(t, reg, changing(label))); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		waitFor(steady.samples.Load() + 500)
	}
	// A config whose output cannot be built is refused; the running one
	// stays (no new build of "changing", the last one still open).
	if err := a.Reload(mustParse(t, reg, changing("unbuildable"))); err == nil {
		t.Error("unbuildable config accepted")
	}
	// An output removed from the config is closed.
	if err := a.Reload(mustParse(t, reg, base)); err != nil {
		t.Fatal(err)
	}
	waitFor(steady.samples.Load() + 500)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if n := len(bs.get("steady")); n != 1 {
		t.Errorf("steady output built %d times, want 1 (kept across reloads)", n)
	}
	ch := bs.get("changing")
	if len(ch) != 4 {
		t.Fatalf("changing output built %d times, want 4", len(ch))
	}
	for i, m := range ch {
		if !m.closed.Load() {
			t.Errorf("changing output %d (label %s) not closed", i, m.label)
		}
		if m.sums.Load() == 0 {
			t.Errorf("changing output %d (label %s) received no summaries", i, m.label)
		}
	}
	var st *sampler.OutputStats
	for _, o := range a.Engine().Stats().Outputs {
		if o.Name == "steady" {
			st = &o
		}
	}
	if st == nil {
		t.Fatal("no stats for steady")
	}
	if st.Dropped != 0 || st.Published != st.Read || st.Delivered != st.Read || st.Failed != 0 {
		t.Errorf("steady output lost samples across reloads: %+v", *st)
	}
	if got := steady.samples.Load(); got != st.Delivered {
		t.Errorf("steady received %d samples, stats say %d delivered", got, st.Delivered)
	}
}
