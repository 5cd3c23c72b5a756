package nats_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// counting is an in-process output that counts what it receives.
type counting struct{ samples atomic.Uint64 }

func (c *counting) Write(_ context.Context, b *record.Batch) error {
	c.samples.Add(uint64(len(b.Samples)))
	return nil
}
func (c *counting) Close() error { return nil }

// TestSlowSubscriberIntegration: a subscriber that takes 20 ms per message
// does not slow the engine: the NATS output and another output both keep
// up (nothing dropped from the rings, read + dropped = published), while
// the subscriber falls far behind.
func TestSlowSubscriberIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t)
	for _, js := range []bool{false, true} {
		name := map[bool]string{false: "core", true: "jetstream"}[js]
		t.Run(name, func(t *testing.T) {
			var handled atomic.Uint64
			slow := natstest.Connect(t, s)
			if _, err := slow.Subscribe("gpusampler.>", func(*natsgo.Msg) {
				handled.Add(1)
				time.Sleep(20 * time.Millisecond)
			}); err != nil {
				t.Fatal(err)
			}
			slow.Flush()
			src, err := sim.New(sim.Options{GPUs: 4, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			eng, err := sampler.New(src, sampler.Config{DrainInterval: 50 * time.Millisecond, FieldInterval: 20 * time.Millisecond, RingSize: 1 << 12})
			if err != nil {
				t.Fatal(err)
			}
			cfg := natsout.DefaultConfig()
			cfg.Servers = []string{s.ClientURL()}
			cfg.JetStream, cfg.CreateStream = js, js
			out, err := natsout.New(cfg, natsout.WithHost("node1"))
			if err != nil {
				t.Fatal(err)
			}
			other := &counting{}
			fast := sampler.PumpOptions{FlushInterval: 10 * time.Millisecond}
			if err := eng.AddOutput("nats", out, fast); err != nil {
				t.Fatal(err)
			}
			if err := eng.AddOutput("other", other, fast); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			if err := eng.Run(ctx); err != nil {
				t.Fatal(err)
			}
			st := eng.Stats()
			msgs := out.Stats().Messages
			t.Logf("published %d messages; the slow subscriber handled %d", msgs, handled.Load())
			for _, o := range st.Outputs {
				t.Logf("%s: %+v", o.Name, o)
				if o.Published == 0 || o.Read+o.Dropped != o.Published {
					t.Errorf("%s: read %d + dropped %d != published %d", o.Name, o.Read, o.Dropped, o.Published)
				}
				if o.Dropped != 0 || o.Failed != 0 {
					t.Errorf("%s: dropped %d, failed %d: the slow subscriber stalled the output", o.Name, o.Dropped, o.Failed)
				}
			}
			if handled.Load()*2 > msgs {
				t.Errorf("the subscriber was not slow (handled %d of %d): the test shows nothing", handled.Load(), msgs)
			}
		})
	}
}
