package influxdb_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

type countOut struct{ n atomic.Uint64 }

func (c *countOut) Write(_ context.Context, b *record.Batch) error {
	c.n.Add(uint64(len(b.Samples)))
	return nil
}
func (c *countOut) Close() error { return nil }

// A broken InfluxDB output (a server that accepts and never answers) does
// not stall the output beside it.
func TestBrokenOutputDoesNotStallOthers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold it open, never answer
		}
	}()
	src, err := sim.New(sim.Options{GPUs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := sampler.New(src, sampler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	broken := newOutput(t, "http://"+l.Addr().String(), "gpu")
	good := &countOut{}
	if err := eng.AddOutput("influxdb", broken, sampler.PumpOptions{WriteTimeout: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := eng.AddOutput("good", good, sampler.PumpOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	broke := func() sampler.OutputStats {
		for _, o := range eng.Stats().Outputs {
			if o.Name == "influxdb" {
				return o
			}
		}
		return sampler.OutputStats{}
	}
	// Once the broken output has timed out a write, the good one must keep
	// receiving while the broken one sits in its next.
	waitFor(t, "a write error of the broken output", func() bool { return broke().WriteErrors > 0 })
	mid := good.n.Load()
	waitFor(t, "samples at the good output after the broken one's write error", func() bool { return good.n.Load() > mid })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if bad := broke(); bad.WriteErrors == 0 {
		t.Fatalf("broken output: %+v, want write errors", bad)
	}
}

// waitFor polls cond; the bound is a hang, not a slow machine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}
