package sim

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

var _ sampler.ProcessSource = (*Device)(nil)

func TestProcesses(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{start.Add(10 * time.Second)}
	d := device(t, newSim(t, "training", clk), 1)
	ps, err := d.Processes(sampler.ProcessQuery{}, nil)
	if err != nil || len(ps) != 1 {
		t.Fatalf("training: %d processes, %v; want 1", len(ps), err)
	}
	p := ps[0]
	if p.Name != "python3" || p.Type != "C" || !p.HasUtil || p.SMUtil < 90 || !p.HasMemory || p.UsedMemoryMiB < 90*1024 || p.Cmdline != "" {
		t.Fatalf("training process %+v: want python3, C, SM ≥ 90%%, ~97 GiB, no cmdline", p)
	}
	// Same instant, cursor at the sample: memory again, utilization not.
	again, _ := d.Processes(sampler.ProcessQuery{Cursor: p.TimeUS}, nil)
	if len(again) != 1 || again[0].HasUtil || again[0].PID != p.PID {
		t.Fatalf("second poll at the cursor: %+v; want the same pid without utilization", again)
	}
	clk.t = clk.t.Add(processPeriod)
	next, _ := d.Processes(sampler.ProcessQuery{Cursor: p.TimeUS, Cmdline: true, CmdlineMax: 16}, nil)
	if !next[0].HasUtil || next[0].TimeUS <= p.TimeUS || len(next[0].Cmdline) != 16 {
		t.Fatalf("poll after one period: %+v; want a newer sample and a 16-byte cmdline", next[0])
	}
	if ps, _ := device(t, newSim(t, "idle", clk), 0).Processes(sampler.ProcessQuery{}, nil); len(ps) != 0 {
		t.Fatalf("idle: %d processes, want none", len(ps))
	}
}

// collect is an in-process output keeping events.
type collect struct{ events []record.Event }

func (c *collect) Write(_ context.Context, b *record.Batch) error {
	for _, e := range b.Events {
		c.events = append(c.events, e.Clone())
	}
	return nil
}
func (c *collect) Close() error { return nil }

func TestProcessEventsThroughEngine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     sampler.Config
		want    bool
		cmdline bool
	}{
		{"default on", sampler.Config{}, true, false},
		{"cmdline", sampler.Config{ProcessCmdline: true, ProcessCmdlineMax: 20}, true, true},
		{"off", sampler.Config{ProcessInterval: -1}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := New(Options{GPUs: 1, Profile: "training", Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			eng, err := sampler.New(src, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			col := &collect{}
			if err := eng.AddOutput("c", col, sampler.PumpOptions{FlushInterval: 10 * time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if err := eng.Run(ctx); err != nil {
				t.Fatal(err)
			}
			var got []record.Event
			for _, e := range col.events {
				if e.Kind == record.EventProcess {
					got = append(got, e)
				}
			}
			if !tc.want {
				if len(got) != 0 {
					t.Fatalf("%d process events with processes off", len(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d process events in 300 ms at 1 Hz, want 1", len(got))
			}
			e := got[0]
			attrs := map[string]string{}
			for _, a := range e.Attrs {
				attrs[a.Key] = a.Value
			}
			fields := map[string]float64{}
			for _, f := range e.Fields {
				fields[f.Key] = f.Value
			}
			if attrs["name"] != "python3" || attrs["type"] != "C" || fields["pid"] == 0 || fields["sm_util"] < 90 || fields["used_memory_mib"] == 0 {
				t.Fatalf("event %+v", e)
			}
			if c, ok := attrs["cmdline"]; ok != tc.cmdline || (ok && len(c) != 20) {
				t.Fatalf("cmdline %q (present %v), want present %v and 20 bytes", c, ok, tc.cmdline)
			}
			if st := eng.Stats().Devices[0]; st.ProcessPolls != 1 || st.Processes != 1 {
				t.Fatalf("stats: %d polls, %d processes", st.ProcessPolls, st.Processes)
			}
		})
	}
}

// waitCollect is an output that hands process events to a channel.
type waitCollect struct{ procs chan record.Event }

func (c *waitCollect) Write(_ context.Context, b *record.Batch) error {
	for _, e := range b.Events {
		if e.Kind == record.EventProcess {
			select {
			case c.procs <- e.Clone():
			default: // the test has what it needs
			}
		}
	}
	return nil
}
func (c *waitCollect) Close() error { return nil }

// A process's own attribution (Engine.SetProcessAttribution) is on its
// process events, after name and type; other PIDs' maps do not leak.
func TestProcessAttributionThroughEngine(t *testing.T) {
	src, err := New(Options{GPUs: 2, Profile: "training", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	ps, err := devs[0].(sampler.ProcessSource).Processes(sampler.ProcessQuery{}, nil)
	if err != nil || len(ps) != 1 {
		t.Fatalf("%d processes, %v", len(ps), err)
	}
	pid := ps[0].PID
	eng, err := sampler.New(src, sampler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	train := record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer", HPCJob: "4711"}
	eng.SetProcessAttribution(0, map[uint32]record.Attribution{pid: train})
	eng.SetProcessAttribution(1, map[uint32]record.Attribution{pid + 1000: {Pod: "other"}})
	col := &waitCollect{procs: make(chan record.Event, 16)}
	if err := eng.AddOutput("c", col, sampler.PumpOptions{FlushInterval: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	got := map[int][]record.Attr{}
	for len(got) < 2 {
		e := <-col.procs
		got[e.Device] = e.Attrs
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want0 := []record.Attr{{Key: "name", Value: "python3"}, {Key: "type", Value: "C"},
		{Key: "pod", Value: "train-7"}, {Key: "namespace", Value: "ml"}, {Key: "container", Value: "trainer"}, {Key: "hpc_job", Value: "4711"}}
	if !slices.Equal(got[0], want0) {
		t.Fatalf("device 0 process attrs %v, want %v", got[0], want0)
	}
	if a, ok := record.ProcessAttribution(record.Event{Attrs: got[1]}); ok {
		t.Fatalf("device 1 process has attribution %+v, want none", a)
	}
}
