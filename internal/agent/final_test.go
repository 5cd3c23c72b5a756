package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// selfOut keeps the self-metrics events (scope output) it receives and
// counts samples.
type selfOut struct {
	mu      sync.Mutex
	samples uint64
	self    []map[string]float64
}

func (s *selfOut) Write(_ context.Context, b *record.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples += uint64(len(b.Samples))
	for _, ev := range b.Events {
		if ev.Kind != record.EventSelf || len(ev.Attrs) < 2 || ev.Attrs[0].Value != "output" || ev.Attrs[1].Value != "out" {
			continue
		}
		f := map[string]float64{}
		for _, x := range ev.Fields {
			f[x.Key] = x.Value
		}
		s.self = append(s.self, f)
	}
	return nil
}

func (s *selfOut) Close() error { return nil }

// At exit the agent sends a final round of self-metrics through every
// output, after the last sample was published (so it carries the final
// published count), and prints a final stats line, taken after every
// output's final flush, that reconciles: published = delivered + dropped
// + failed + filtered.
func TestFinalSelfMetricsAndStats(t *testing.T) {
	out := &selfOut{}
	reg := outputs.NewRegistry(outputs.Kind{Kind: "self",
		Parse: func(t *config.Table) any { return nil },
		Build: func(*outputs.Block, outputs.BuildEnv) (record.Output, error) { return out, nil }})
	// stats_interval 1h: the only round of self-metrics is the final one
	cfg := mustParse(t, reg, "[agent]\nstats_interval = \"1h\"\n[sampler]\ndrain_interval = \"20ms\"\nfield_interval = \"20ms\"\n"+
		"[[outputs.self]]\nname = \"out\"\nflush_interval = \"10ms\"\n")
	src, err := sim.New(sim.Options{GPUs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var stats bytes.Buffer
	a, err := agent.New(src, cfg, agent.Options{Registry: reg, StatsWriter: &stats, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		out.mu.Lock()
		n := out.samples
		out.mu.Unlock()
		if n >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no samples delivered")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := a.Engine().Stats().Outputs[0]
	if st.Published == 0 || st.Published != st.Delivered+st.Dropped+st.Failed+st.Filtered {
		t.Fatalf("final stats %+v do not reconcile", st)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if len(out.self) != 1 {
		t.Fatalf("%d self-metrics rounds for the output, want the final one", len(out.self))
	}
	f := out.self[0]
	if uint64(f["published"]) != st.Published {
		t.Fatalf("final self-metrics say published %v, the engine's final count is %d", f["published"], st.Published)
	}
	if got := f["delivered"] + f["dropped"] + f["failed"] + f["filtered"] + f["buffered"]; got > f["published"] {
		t.Fatalf("final self-metrics account for %v of %v published: %v", got, f["published"], f)
	}
	m := regexp.MustCompile(`(?m)^gpusampler final stats:\n  output out +published (\d+) delivered (\d+) dropped (\d+) filtered (\d+) failed (\d+) `).
		FindStringSubmatch(stats.String())
	if m == nil {
		t.Fatalf("no final stats line:\n%s", stats.String())
	}
	var n [5]uint64
	for i := range n {
		n[i], _ = strconv.ParseUint(m[i+1], 10, 64)
	}
	if want := [5]uint64{st.Published, st.Delivered, st.Dropped, st.Filtered, st.Failed}; n != want || n[0] != n[1]+n[2]+n[3]+n[4] {
		t.Fatalf("final stats line %v, want %v reconciling", n, want)
	}
	t.Logf("final stats: published %d = delivered %d + dropped %d + filtered %d + failed %d; final self-metrics published %v delivered %v buffered %v",
		n[0], n[1], n[2], n[3], n[4], f["published"], f["delivered"], f["buffered"])
}
