package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// discard is the in-process baseline: it touches every sample once, as an
// encoder would.
type discard struct{ sum float64 }

func (d *discard) Write(_ context.Context, b *record.Batch) error {
	for i := range b.Samples {
		d.sum += b.Samples[i].Value
	}
	return nil
}
func (d *discard) Close() error { return nil }

// cpuTime returns the CPU time (user+system) of this process, and of pid
// when pid > 0.
func cpuTime(pid int) (self, child time.Duration) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if pid > 0 {
		if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			s := string(data)
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
			ut, _ := strconv.ParseInt(f[11], 10, 64)
			st, _ := strconv.ParseInt(f[12], 10, 64)
			child = time.Duration(ut+st) * (time.Second / 100) // USER_HZ
		}
	}
	return self, child
}

// BenchmarkWrite: samples/s from the host into a plugin process beside the
// same batches into an in-process output, per batch size; CPU (host and
// plugin) per million samples delivered.
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{1, 64, 1024, 8192} {
		batch := &record.Batch{Devices: []record.Device{outputtest.Device}, Samples: outputtest.Samples(n)}
		run := func(b *testing.B, out record.Output, pid int) {
			ctx := context.Background()
			b.ReportAllocs()
			self0, child0 := cpuTime(pid)
			b.ResetTimer()
			for i := range b.N {
				batch.Seq = uint64(i + 1)
				if err := out.Write(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			self1, child1 := cpuTime(pid)
			samples := float64(b.N) * float64(n)
			b.ReportMetric(samples/b.Elapsed().Seconds(), "samples/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/samples, "ns/sample")
			b.ReportMetric(float64(self1-self0+child1-child0)/float64(time.Millisecond)/(samples/1e6), "cpu-ms/Msample")
		}
		b.Run(fmt.Sprintf("inproc/batch=%d", n), func(b *testing.B) { run(b, &discard{}, 0) })
		b.Run(fmt.Sprintf("plugin/batch=%d", n), func(b *testing.B) {
			c, err := plugins.Start(plugins.Options{Name: "bench", Command: testPluginCmd})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			run(b, c, c.Stats().PID)
		})
	}
}

// liveDevice is a one-metric device whose buffer always holds one sample
// stamped at drain time, so that a sample's age at the plugin is the
// pipeline's latency (ring, pump flush, gRPC).
type liveDevice struct{ last uint64 }

func (d *liveDevice) Identity() (record.Device, error) { return outputtest.Device, nil }
func (d *liveDevice) Drain(t catalog.BufferType, cursor uint64, dst []sampler.RawSample) ([]sampler.RawSample, error) {
	if t != catalog.BufferTotalPower {
		return dst, sampler.ErrNotSupported
	}
	now := uint64(time.Now().UnixMicro())
	if now <= d.last {
		return dst, sampler.ErrNothingNew
	}
	d.last = now
	return append(dst, sampler.RawSample{TimeUS: now, Value: 100}), nil
}
func (d *liveDevice) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	for i := range out {
		out[i].Err = sampler.ErrNotSupported
	}
	return nil
}

type liveSource struct{}

func (liveSource) Name() string { return "live" }
func (liveSource) Devices() ([]sampler.DeviceSource, error) {
	return []sampler.DeviceSource{&liveDevice{}}, nil
}
func (liveSource) Close() error { return nil }

// BenchmarkLatency: sample-to-plugin latency through the engine (drain →
// ring → pump at the default 100 ms flush interval → gRPC → plugin), p50
// and p99 over every sample. Goal: p99 ≤ flush interval + 5 ms.
func BenchmarkLatency(b *testing.B) {
	for range b.N {
		latFile := filepath.Join(b.TempDir(), "lat.json")
		c, err := plugins.Start(plugins.Options{Name: "lat", Command: testPluginCmd,
			Config: map[string]any{"latency": latFile}})
		if err != nil {
			b.Fatal(err)
		}
		e, err := sampler.New(liveSource{}, sampler.Config{DrainInterval: 2 * time.Millisecond,
			Select: func(m *catalog.Metric) bool { return m.ID == catalog.MetricPowerDraw }})
		if err != nil {
			b.Fatal(err)
		}
		e.AddOutput("lat", c, sampler.PumpOptions{FlushInterval: sampler.DefaultFlushInterval})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := e.Run(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		data, err := os.ReadFile(latFile)
		if err != nil {
			b.Fatal(err)
		}
		var lat []int64
		json.Unmarshal(data, &lat)
		if len(lat) == 0 {
			b.Fatal("no samples")
		}
		slices.Sort(lat)
		q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
		b.ReportMetric(q(0.5), "p50-ms")
		b.ReportMetric(q(0.99), "p99-ms")
		b.ReportMetric(q(1), "max-ms")
	}
}

// BenchmarkRestart: time from SIGKILL of the plugin to a restarted,
// configured plugin (BackoffMin 10 ms, health probes every 50 ms).
func BenchmarkRestart(b *testing.B) {
	c, err := plugins.Start(plugins.Options{Name: "restart", Command: testPluginCmd, HealthInterval: 50 * time.Millisecond,
		HealthTimeout: 200 * time.Millisecond, BackoffMin: 10 * time.Millisecond, ResetAfter: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var total time.Duration
	for range b.N {
		pid := c.Stats().PID
		t0 := time.Now()
		syscall.Kill(pid, syscall.SIGKILL)
		// a Write notices at once (as the pump's next flush would)
		for c.Write(context.Background(), &record.Batch{Seq: 1}) == nil {
			time.Sleep(time.Millisecond)
		}
		for s := c.Stats(); s.PID == 0 || s.PID == pid; s = c.Stats() {
			time.Sleep(time.Millisecond)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/restart")
}
