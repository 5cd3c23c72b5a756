//go:build cgo

package nvml

import (
	"context"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/sampler"
)

// Benchmarks load the fake library into the benchmark process itself (the
// tests never do: their scenarios run in child processes), once, with 8
// GPUs whose buffers sample every 20 ms and hold 100 samples.
var (
	benchOnce sync.Once
	benchSrc  *Source
	benchErr  error
)

func benchSource(b *testing.B) *Source {
	b.Helper()
	benchOnce.Do(func() {
		lib := buildFake(b, b.TempDir(), false)
		for k, v := range map[string]string{"FAKENVML_DEVICES": "8", "FAKENVML_PERIOD_US": "20000", "FAKENVML_DEPTH": "100"} {
			os.Setenv(k, v)
		}
		var s sampler.Source
		s, benchErr = Open(Options{LibraryPath: lib})
		if benchErr == nil {
			benchSrc = s.(*Source)
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchSrc
}

// keepOpen stops Engine.Run from closing the shared benchmark source.
type keepOpen struct{ *Source }

func (keepOpen) Close() error { return nil }

type discard struct{}

func (discard) Write(context.Context, *sampler.Batch) error { return nil }
func (discard) Close() error                                { return nil }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEngineFakeDriver runs the engine at its default rates on 8 fake
// GPUs for 5 s per iteration and reports samples delivered per NVML C call
// (a poller gets 1), NVML calls per GPU per second and the process's CPU per
// GPU in percent of one core (engine, rings, a discarding output and the
// fake library included: an upper bound for the backend's own cost).
//
// Sub-benchmarks: one-call drains (the backend's own nvmlDeviceGetSamples
// call with a kept buffer, the default) and two-call drains (go-nvml's
// GetSamples: a size query and a fill), measured in the same run.
func BenchmarkEngineFakeDriver(b *testing.B) {
	src := benchSource(b)
	devs, err := src.Devices()
	if err != nil {
		b.Fatal(err)
	}
	direct := src.direct
	defer func() { src.direct = direct }()
	b.Run("one-call", func(b *testing.B) {
		if direct == nil {
			b.Skip("one-call drain path unavailable")
		}
		src.direct = direct
		benchEngine(b, src, devs)
	})
	b.Run("two-call", func(b *testing.B) {
		src.direct = nil
		benchEngine(b, src, devs)
	})
}

func benchEngine(b *testing.B, src *Source, devs []sampler.DeviceSource) {
	const run = 5 * time.Second
	b.ReportAllocs()
	var published, calls uint64
	var cpu, wall time.Duration
	for i := 0; i < b.N; i++ {
		calls0 := totalCalls(devs)
		eng, err := sampler.New(keepOpen{src}, sampler.Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := eng.AddOutput("discard", discard{}, sampler.PumpOptions{}); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), run)
		c0, t0 := cpuTime(), time.Now()
		if err := eng.Run(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		cpu += cpuTime() - c0
		wall += time.Since(t0)
		for _, d := range eng.Stats().Devices {
			published += d.Published
		}
		calls += totalCalls(devs) - calls0
	}
	n := float64(len(devs))
	b.ReportMetric(float64(published)/float64(calls), "samples/call")
	b.ReportMetric(float64(calls)/n/wall.Seconds(), "calls/s/gpu")
	b.ReportMetric(float64(published)/n/wall.Seconds(), "samples/s/gpu")
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds()/n, "cpu_%/gpu")
}

func totalCalls(devs []sampler.DeviceSource) uint64 {
	var n uint64
	for _, d := range devs {
		n += d.(sampler.CallCounter).CallStats().Calls
	}
	return n
}

// BenchmarkDrain drains a full 100-sample buffer (cursor 0) per op.
func BenchmarkDrain(b *testing.B) {
	devs, err := benchSource(b).Devices()
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond) // let the buffers fill
	dst := make([]sampler.RawSample, 0, 256)
	b.ReportAllocs()
	b.ResetTimer()
	samples := 0
	for i := 0; i < b.N; i++ {
		out, err := devs[0].Drain(sampler.BufferGPUUtil, 0, dst[:0])
		if err != nil {
			b.Fatal(err)
		}
		samples += len(out)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(samples), "ns/sample")
}

// BenchmarkReadFields reads every fast field metric: one GetFieldValues call.
func BenchmarkReadFields(b *testing.B) {
	devs, err := benchSource(b).Devices()
	if err != nil {
		b.Fatal(err)
	}
	var ids []sampler.MetricID
	for _, m := range sampler.DefaultCatalog.All() {
		if m.Src.Kind == sampler.FromField {
			ids = append(ids, m.ID)
		}
	}
	out := make([]sampler.Reading, len(ids))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := devs[1].Read(ids, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(ids)), "values/op")
}
