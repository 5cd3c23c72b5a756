//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// Benchmarks load the fake library into the benchmark process itself (the
// tests never do: their scenarios run in child processes), once, with 8
// GPUs whose buffers hold 100 samples taken like a real driver's
// (driverPeriodsUS: power every 20 ms, utilization 1/6 s, clocks 100 ms).
var (
	benchOnce sync.Once
	benchSrc  *Source
	benchErr  error
)

func benchSource(b *testing.B) *Source {
	b.Helper()
	benchOnce.Do(func() {
		lib := buildFake(b, b.TempDir(), false)
		var periods []string
		for typ, us := range driverPeriodsUS {
			periods = append(periods, fmt.Sprintf("%d:%d", typ, us))
		}
		for k, v := range map[string]string{"FAKENVML_DEVICES": "8", "FAKENVML_PERIOD_US": "20000", "FAKENVML_DEPTH": "100",
			"FAKENVML_PERIODS_US": strings.Join(periods, ",")} {
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

// discard drops what it is given, counting the driver samples: buffer
// samples, not point reads.
type discard struct{ driverSamples *atomic.Uint64 }

func (d discard) Write(_ context.Context, b *record.Batch) error {
	n := 0
	for i := range b.Samples {
		s := &b.Samples[i]
		if m, _ := catalog.Default().Get(s.Metric); s.Flags&record.FlagPointRead == 0 && m.Src.Kind == catalog.FromBuffer {
			n++
		}
	}
	d.driverSamples.Add(uint64(n))
	return nil
}
func (discard) Close() error { return nil }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEngineFakeDriver runs the engine at its default rates on 8 fake
// GPUs for 5 s per iteration and reports NVML calls per GPU per second
// (calls/s/gpu), driver samples per NVML call (driver_samples/call: samples
// drained from the driver's buffers, point reads and fields not counted),
// every published record per call (records/call) and the process's CPU per
// GPU in percent of one core (engine, rings, a discarding output and the
// fake library included: an upper bound for the backend's own cost). Event
// waits are not counted here (scripts/nvml-calls.sh counts every call in the
// fake library).
//
// Sub-benchmarks: one-call drains (the backend's own nvmlDeviceGetSamples
// call with a kept buffer, the default), two-call drains (go-nvml's
// GetSamples: a size query and a fill), and the baseline: a poller that
// reads the same metrics with point queries at the rates that reach a
// similar resolution (power 50 Hz, utilization 6 Hz, SM and memory clocks
// 10 Hz, fields 5 Hz, slow state 1 Hz).
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
	b.Run("poller", func(b *testing.B) {
		benchPoller(b, devs)
	})
}

// benchPoller is the baseline: point queries at fixed rates on every GPU
// for 5 s per iteration. Its driver samples are the buffer metrics' point
// reads (one value each).
func benchPoller(b *testing.B, devs []sampler.DeviceSource) {
	const run = 5 * time.Second
	var fields, slow []catalog.MetricID
	for _, m := range catalog.Default().All() {
		switch {
		case m.Rare:
		case m.Src.Kind == catalog.FromField:
			fields = append(fields, m.ID)
		case m.Src.Kind == catalog.FromQuery:
			slow = append(slow, m.ID)
		}
	}
	tasks := []struct {
		ids    []catalog.MetricID
		every  time.Duration
		driver bool // buffer metrics: these values count as driver samples
	}{
		{[]catalog.MetricID{catalog.MetricPowerDraw}, 20 * time.Millisecond, true},
		{[]catalog.MetricID{catalog.MetricUtilGPU, catalog.MetricUtilMemory}, 166 * time.Millisecond, true},
		{[]catalog.MetricID{catalog.MetricClockSM, catalog.MetricClockMemory}, 100 * time.Millisecond, true},
		{fields, 200 * time.Millisecond, false},
		{slow, time.Second, false},
	}
	var samples, calls uint64
	var wall time.Duration
	for i := 0; i < b.N; i++ {
		calls0 := totalCalls(devs)
		var wg sync.WaitGroup
		var got atomic.Uint64
		t0 := time.Now()
		for _, d := range devs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				next := make([]time.Time, len(tasks))
				outs := make([][]sampler.Reading, len(tasks))
				for k, t := range tasks {
					next[k], outs[k] = t0, make([]sampler.Reading, len(t.ids))
				}
				for {
					now := time.Now()
					if now.Sub(t0) >= run {
						return
					}
					soonest := t0.Add(run)
					for k, t := range tasks {
						if !now.Before(next[k]) {
							if err := d.Read(t.ids, outs[k]); err == nil && t.driver {
								for _, r := range outs[k] {
									if r.Err == nil {
										got.Add(1)
									}
								}
							}
							next[k] = next[k].Add(t.every)
						}
						if next[k].Before(soonest) {
							soonest = next[k]
						}
					}
					time.Sleep(time.Until(soonest))
				}
			}()
		}
		wg.Wait()
		wall += time.Since(t0)
		samples += got.Load()
		calls += totalCalls(devs) - calls0
	}
	n := float64(len(devs))
	b.ReportMetric(float64(samples)/float64(calls), "driver_samples/call")
	b.ReportMetric(float64(calls)/n/wall.Seconds(), "calls/s/gpu")
}

func benchEngine(b *testing.B, src *Source, devs []sampler.DeviceSource) {
	const run = 5 * time.Second
	b.ReportAllocs()
	var published, calls uint64
	var driverSamples atomic.Uint64
	var cpu, wall time.Duration
	for i := 0; i < b.N; i++ {
		calls0 := totalCalls(devs)
		eng, err := sampler.New(keepOpen{src}, sampler.Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := eng.AddOutput("discard", discard{&driverSamples}, sampler.PumpOptions{}); err != nil {
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
	b.ReportMetric(float64(driverSamples.Load())/float64(calls), "driver_samples/call")
	b.ReportMetric(float64(published)/float64(calls), "records/call")
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
		out, err := devs[0].Drain(catalog.BufferGPUUtil, 0, dst[:0])
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
	var ids []catalog.MetricID
	for _, m := range catalog.Default().All() {
		if m.Src.Kind == catalog.FromField {
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
