package sampler_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// discard counts samples; the pump writes n while the benchmark reads it.
type discard struct{ n atomic.Int64 }

func (d *discard) Write(_ context.Context, b *record.Batch) error {
	d.n.Add(int64(len(b.Samples)))
	return nil
}
func (d *discard) Close() error { return nil }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEngineCPU runs the engine on 8 simulated GPUs at the default
// rates for 3 s of wall time into a discarding output and reports the
// process CPU per GPU as a percentage of one core (goal ≤ 0.3%). The
// simulator's own cost is included, so this is an upper bound.
func BenchmarkEngineCPU(b *testing.B) {
	const gpus = 8
	const wall = 3 * time.Second
	for range b.N {
		src, err := sim.New(sim.Options{GPUs: gpus, Profile: "training"})
		if err != nil {
			b.Fatal(err)
		}
		e, err := sampler.New(src, sampler.Config{})
		if err != nil {
			b.Fatal(err)
		}
		out := &discard{}
		e.AddOutput("discard", out, sampler.PumpOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), wall)
		// skip the first drain's history burst: measure the steady state
		done := make(chan struct{})
		go func() { e.Run(ctx); close(done) }()
		time.Sleep(500 * time.Millisecond)
		c0, t0, n0 := cpuTime(), time.Now(), out.n.Load()
		<-ctx.Done()
		c1, t1, n1 := cpuTime(), time.Now(), out.n.Load()
		cancel()
		<-done // the engine has stopped before the next iteration starts
		b.ReportMetric(float64(c1-c0)/float64(t1.Sub(t0))/gpus*100, "cpu_%/gpu")
		b.ReportMetric(float64(n1-n0)/t1.Sub(t0).Seconds()/gpus, "samples/s/gpu")
	}
}
