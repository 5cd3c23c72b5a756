package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// BenchmarkProcess8SimulatedGPUs runs the real program (this test binary
// re-executed as gpusampler) on 8 simulated GPUs for 5 s, line protocol to
// /dev/null, and reports its peak RSS (goal ≤ 50 MB) and CPU per GPU. The
// test binary carries the testing package, so the RSS is an upper bound.
func BenchmarkProcess8SimulatedGPUs(b *testing.B) {
	for range b.N {
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(), "GPUSAMPLER_TEST_MAIN=1",
			"GPUSAMPLER_TEST_ARGS=run --backend sim --gpus 8 --duration 5s --format influx")
		cmd.Stdout = devnull
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		devnull.Close()
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		b.ReportMetric(float64(ru.Maxrss)/1024, "maxrss_MB")
		b.ReportMetric(float64(cpu)/float64(wall)/8*100, "cpu_%/gpu")
	}
}
