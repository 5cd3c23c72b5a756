package main

import (
	"bufio"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"
)

// `run --execd nvidia_smi --min-max` answers each gather (a newline on
// stdin) with nvidia_smi lines that also carry the window's extremes of
// the metrics written as a mean, NAME_min ≤ NAME ≤ NAME_max in NAME's
// type, and none for state; it exits 0 when stdin closes.
func TestExecdNvidiaSMIMinMax(t *testing.T) {
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- Main(context.Background(), []string{"run", "--execd", "nvidia_smi", "--min-max", "--backend", "sim", "--gpus", "1"},
			stdinR, stdoutW, &stderr)
		stdoutW.Close()
	}()
	var mu sync.Mutex
	var lines []string
	go func() {
		sc := bufio.NewScanner(stdoutR)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	// Gather until a line carries power's extremes: the first gathers may
	// come before the engine's first samples. The pause only spares the CPU.
	var line string
	for deadline := time.Now().Add(2 * time.Minute); line == ""; {
		if time.Now().After(deadline) {
			t.Fatalf("no nvidia_smi line with power_draw_min after 2 min; stderr: %s", stderr.String())
		}
		if _, err := stdinW.Write([]byte("\n")); err != nil {
			t.Fatalf("gpusampler stopped reading stdin: %v; stderr: %s", err, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		for _, l := range lines {
			if strings.HasPrefix(l, "nvidia_smi,") && strings.Contains(l, "power_draw_min=") && strings.Contains(l, "utilization_gpu_min=") {
				line = l
			}
		}
		mu.Unlock()
	}
	stdinW.Close()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit %d after stdin closed; stderr: %s", code, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("still running 2 min after stdin closed")
	}

	fields := map[string]lineprotocol.Value{}
	dec := lineprotocol.NewDecoderWithBytes([]byte(line))
	for dec.Next() {
		for {
			k, _, err := dec.NextTag()
			if err != nil {
				t.Fatal(err)
			}
			if k == nil {
				break
			}
		}
		for {
			k, v, err := dec.NextField()
			if err != nil {
				t.Fatalf("%v: %q", err, line)
			}
			if k == nil {
				break
			}
			fields[string(k)] = v
		}
	}
	for name, kind := range map[string]lineprotocol.ValueKind{"power_draw": lineprotocol.Float, "utilization_gpu": lineprotocol.Int} {
		v, lo, hi := fields[name], fields[name+"_min"], fields[name+"_max"]
		if v.Kind() != kind || lo.Kind() != kind || hi.Kind() != kind {
			t.Fatalf("%s %v, _min %v, _max %v: want all %v: %q", name, v.Kind(), lo.Kind(), hi.Kind(), kind, line)
		}
		num := func(x lineprotocol.Value) float64 {
			if x.Kind() == lineprotocol.Int {
				return float64(x.IntV())
			}
			return x.FloatV()
		}
		if !(num(lo) <= num(v) && num(v) <= num(hi)) {
			t.Fatalf("%s_min %v ≤ %s %v ≤ %s_max %v does not hold: %q", name, num(lo), name, num(v), name, num(hi), line)
		}
	}
	for _, state := range []string{"memory_total_min", "memory_total_max", "memory_used_min", "temperature_gpu_min"} {
		if _, ok := fields[state]; ok {
			t.Fatalf("extremes of a state metric (%s): %q", state, line)
		}
	}
}
