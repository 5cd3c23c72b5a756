package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/pipeline/buffer"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// recorder keeps every sample its outputs received, with how often.
type recorder struct {
	mu   sync.Mutex
	down bool
	got  map[record.Sample]int
}

func newRecorder() *recorder { return &recorder{got: map[record.Sample]int{}} }

func (r *recorder) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

func (r *recorder) snapshot() map[record.Sample]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.got)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// recOut is one built output writing into a recorder.
type recOut struct{ r *recorder }

func (o recOut) Write(_ context.Context, b *record.Batch) error {
	o.r.mu.Lock()
	defer o.r.mu.Unlock()
	if o.r.down {
		return fmt.Errorf("sink down: %w", record.ErrUnavailable)
	}
	for _, s := range b.Samples {
		o.r.got[s]++
	}
	return nil
}

func (recOut) Close() error { return nil }

// recorders is a registry of kind "rec" whose outputs write to one
// recorder per output name; label "unbuildable" fails to build.
type recorders struct {
	mu     sync.Mutex
	byName map[string]*recorder
	builds map[string]int
}

func (rs *recorders) get(name string) *recorder {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.byName[name] == nil {
		rs.byName[name] = newRecorder()
	}
	return rs.byName[name]
}

func (rs *recorders) built(name string) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.builds[name]
}

func (rs *recorders) registry() *outputs.Registry {
	var addrs sync.Map
	return outputs.NewRegistry(outputs.Kind{
		Kind: "rec",
		Parse: func(t *config.Table) any {
			var label string
			t.String("label", &label)
			return label
		},
		Build: func(o *outputs.Block, _ outputs.BuildEnv) (record.Output, error) {
			if o.Options.(string) == "unbuildable" {
				return nil, errors.New("cannot connect")
			}
			rs.mu.Lock()
			rs.builds[o.Name]++
			rs.mu.Unlock()
			return recOut{rs.get(o.Name)}, nil
		},
	}, outputs.Kind{
		Kind:      "listen",
		Exclusive: true,
		Parse: func(t *config.Table) any {
			var addr, fail string
			t.String("addr", &addr)
			t.String("fail", &fail)
			return [2]string{addr, fail}
		},
		Build: func(o *outputs.Block, _ outputs.BuildEnv) (record.Output, error) {
			opts := o.Options.([2]string)
			if opts[1] != "" {
				return nil, errors.New(opts[1])
			}
			if _, taken := addrs.LoadOrStore(opts[0], true); taken {
				return nil, fmt.Errorf("address %s in use", opts[0])
			}
			rs.mu.Lock()
			rs.builds[o.Name]++
			rs.mu.Unlock()
			return &listener{addrs: &addrs, addr: opts[0]}, nil
		},
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 120_000 { // 10 min: a hang, not a slow machine
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An output with a disk buffer can be reloaded: the old buffer is closed
// (its queue stays on disk) before the replacement opens the directory and
// delivers that queue. Every sample a twin without a buffer received
// reaches the sink exactly once.
func TestReloadDiskBufferedOutput(t *testing.T) {
	rs := &recorders{byName: map[string]*recorder{}, builds: map[string]int{}}
	reg := rs.registry()
	dir := t.TempDir()
	doc := func(label string) *appconfig.Config {
		return mustParse(t, reg, fmt.Sprintf(`
[agent]
stats_interval = "1h"
[sampler]
drain_interval = "20ms"
field_interval = "20ms"
ring_size = 65536
[[outputs.rec]]
name = "twin"
flush_interval = "10ms"
[[outputs.rec]]
name = "sink"
label = %q
flush_interval = "10ms"
buffer = "disk"
buffer_dir = %q
buffer_close_timeout = "50ms"
retry_initial = "5ms"
retry_max = "20ms"
`, label, dir))
	}
	src, err := sim.New(sim.Options{GPUs: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	twin, sink := rs.get("twin"), rs.get("sink")
	sink.setDown(true)
	a, err := agent.New(src, doc("1"), agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	first := a.Buffers()["sink"]
	waitUntil(t, "a backlog in the disk buffer", func() bool { return first.Stats().BufferedBatches >= 3 })
	if err := a.Reload(doc("2")); err != nil {
		t.Fatalf("reloading a disk-buffered output: %v", err)
	}
	second := a.Buffers()["sink"]
	if second == first {
		t.Fatal("the disk-buffered output was not replaced")
	}
	left := first.Stats()
	t.Logf("at reload: old buffer appended %d batches, kept %d batches (%d records) on disk, delivered %d",
		left.Appended, left.BufferedBatches, left.BufferedRecords, left.Delivered)
	if left.BufferedBatches == 0 || left.DroppedBatches.Total() != 0 {
		t.Fatalf("old buffer at reload: %+v, want a backlog kept on disk and nothing dropped", left)
	}
	n := twin.len()
	waitUntil(t, "more samples after the reload", func() bool { return twin.len() > n+200 })
	sink.setDown(false)
	waitUntil(t, "the replayed backlog", func() bool { return second.Stats().Replayed >= uint64(left.BufferedBatches) })
	n = twin.len()
	waitUntil(t, "samples after the sink came back", func() bool { return twin.len() > n+200 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// What the last buffer could not deliver within its close timeout is on
	// disk: deliver it too.
	rest, err := buffer.New(recOut{sink}, buffer.Config{Kind: buffer.KindDisk, Dir: dir, MaxBytes: 1 << 30, CloseTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := rest.Close(); err != nil {
		t.Fatal(err)
	}
	st := second.Stats()
	t.Logf("new buffer: replayed %d batches, delivered %d batches (%d records), retries %d; after exit %d batches left on disk",
		st.Replayed, st.Delivered, st.DeliveredRecords, st.Retries, rest.Stats().Delivered)
	if st.DroppedBatches.Total() != 0 {
		t.Errorf("new buffer dropped %+v", st.DroppedBatches)
	}
	for _, o := range a.Engine().Stats().Outputs {
		if o.Dropped != 0 || o.Failed != 0 {
			t.Errorf("output %s: %+v, want nothing dropped or failed", o.Name, o)
		}
	}
	want, got := twin.snapshot(), sink.snapshot()
	t.Logf("twin received %d samples, sink %d", len(want), len(got))
	if len(want) == 0 {
		t.Fatal("twin received nothing")
	}
	for s, c := range want {
		if c != 1 {
			t.Errorf("twin received %+v %d times", s, c)
		}
		if got[s] != 1 {
			t.Errorf("sample %+v reached the sink %d times, want once", s, got[s])
		}
	}
	for s := range got {
		if want[s] == 0 {
			t.Errorf("sink received %+v, which the twin never saw", s)
		}
	}
}

// A change to [sampler] is refused as a whole with a message naming the
// keys; the running config stays.
func TestReloadRefusesSamplerChange(t *testing.T) {
	rs := &recorders{byName: map[string]*recorder{}, builds: map[string]int{}}
	reg := rs.registry()
	doc := func(sampler, label string) *appconfig.Config {
		return mustParse(t, reg, "[sampler]\nbackend = \"sim\"\n"+sampler+"[[outputs.rec]]\nlabel = \""+label+"\"\n")
	}
	src, _ := sim.New(sim.Options{GPUs: 1})
	a, err := agent.New(src, doc("", "1"), agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Reload(doc("drain_interval = \"300ms\"\nring_size = 1024\n", "2"))
	if err == nil || !strings.Contains(err.Error(), "[sampler] drain_interval, ring_size changed") {
		t.Fatalf("reload with a changed [sampler]: %v, want a refusal naming drain_interval and ring_size", err)
	}
	if n := rs.built("rec"); n != 1 {
		t.Errorf("output built %d times, want 1 (the refused reload builds nothing)", n)
	}
	if err := a.Reload(doc("", "2")); err != nil {
		t.Fatalf("the same [sampler]: %v", err)
	}
	if n := rs.built("rec"); n != 2 {
		t.Errorf("output built %d times, want 2", n)
	}
}

// A reload is all-or-nothing: when one output of the new config cannot be
// built, no output changes — not those built before it, not close-first
// outputs replaced before it, not removed ones.
func TestReloadAllOrNothing(t *testing.T) {
	rs := &recorders{byName: map[string]*recorder{}, builds: map[string]int{}}
	reg := rs.registry()
	const head = "[sampler]\nbackend = \"sim\"\n"
	running := head + `
[[outputs.rec]]
name = "a"
label = "1"
[[outputs.rec]]
name = "gone"
[[outputs.listen]]
name = "l1"
addr = ":1"
[[outputs.listen]]
name = "l2"
addr = ":2"
`
	src, _ := sim.New(sim.Options{GPUs: 1})
	a, err := agent.New(src, mustParse(t, reg, running), agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	outputs := func() map[string]record.Output { return a.Outputs() }
	before := outputs()
	for _, tc := range []struct{ name, doc string }{
		{"a plain output fails", head + `
[[outputs.rec]]
name = "a"
label = "2"
[[outputs.rec]]
name = "b"
label = "unbuildable"
[[outputs.listen]]
name = "l1"
addr = ":11"
[[outputs.listen]]
name = "l2"
addr = ":2"
`},
		{"the second close-first output fails", head + `
[[outputs.rec]]
name = "a"
label = "2"
[[outputs.rec]]
name = "b"
[[outputs.listen]]
name = "l1"
addr = ":11"
[[outputs.listen]]
name = "l2"
addr = ":12"
fail = "cannot listen"
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := a.Reload(mustParse(t, reg, tc.doc)); err == nil {
				t.Fatal("reload accepted")
			}
			after := outputs()
			if len(after) != len(before) {
				t.Fatalf("outputs %v after a refused reload, want %v", slices(after), slices(before))
			}
			for name, out := range before {
				if name == "l1" || name == "l2" {
					// Close-first outputs are rebuilt from their old block.
					if l, ok := after[name].(*listener); !ok || l.addr != map[string]string{"l1": ":1", "l2": ":2"}[name] {
						t.Errorf("output %s is %+v after a refused reload, want its old address", name, after[name])
					}
					continue
				}
				if after[name] != out {
					t.Errorf("output %s replaced by a refused reload", name)
				}
			}
			var names []string
			for _, o := range a.Engine().Stats().Outputs {
				names = append(names, o.Name)
			}
			if got := strings.Join(names, ","); got != "a,gone,l1,l2" {
				t.Errorf("engine outputs %s after a refused reload, want a,gone,l1,l2", got)
			}
		})
	}
}

func slices(m map[string]record.Output) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	return s
}
