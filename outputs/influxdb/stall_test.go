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
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	time.Sleep(1500 * time.Millisecond)
	mid := good.n.Load()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := eng.Stats()
	var bad sampler.OutputStats
	for _, o := range st.Outputs {
		if o.Name == "influxdb" {
			bad = o
		}
	}
	if mid == 0 || good.n.Load() <= mid {
		t.Fatalf("good output received %d then %d samples: stalled", mid, good.n.Load())
	}
	if bad.WriteErrors == 0 {
		t.Fatalf("broken output: %+v, want write errors", bad)
	}
}
