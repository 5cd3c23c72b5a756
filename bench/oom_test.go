package bench

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

func TestOOMWatchFindsTheFirstMessage(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w := &oomWatch{now: func() time.Time { return at }}
	const msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 1 has a total capacity of 79.11 GiB of which 30.12 GiB is free."
	for _, chunk := range []string{"step 1 ok\nstep 2 o", "k\nTraceback (most recent call last):\n", msg[:40], msg[40:] + "\n",
		"RuntimeError: CUDA error: out of memory\n"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	got := w.first()
	want := &oomEvent{at: at, line: msg, requestMiB: 2560, gpu: 1}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("found %+v\nwant %+v", got, want)
	}
	// An unterminated last line counts; other wordings match too.
	for _, line := range []string{"RuntimeError: CUDA error: out of memory", "cudaErrorMemoryAllocation: CUDA out of memory (500 MiB)"} {
		w := &oomWatch{now: func() time.Time { return at }}
		w.Write([]byte("x\n" + line))
		got := w.first()
		if got == nil || got.line != line || got.gpu != -1 || !math.IsNaN(got.requestMiB) {
			t.Errorf("%q: found %+v", line, got)
		}
	}
	w = &oomWatch{}
	w.Write([]byte("all fine\nout of memory in the host allocator\n"))
	if got := w.first(); got != nil {
		t.Fatalf("found %+v in output without a CUDA out-of-memory message", got)
	}
}

func TestFragmentationRule(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	devs := []record.Device{{Index: 0, MemoryTotalMiB: 81920}, {Index: 1, MemoryTotalMiB: 81920}}
	// Memory use once a second: device 0 at usedMiB, device 1 nearly full.
	window := func(usedMiB float64) map[int]*deviceWindow {
		w := map[int]*deviceWindow{}
		for _, d := range devs {
			var s []record.Sample
			for i := range 10 {
				u := usedMiB
				if d.Index == 1 {
					u = 81000
				}
				s = append(s, record.Sample{TimeNS: t0.Add(time.Duration(i) * time.Second).UnixNano(), Value: u, Metric: catalog.MetricMemoryUsed})
			}
			w[d.Index] = newDeviceWindow(catalog.Default(), s)
		}
		return w
	}
	oomAt := t0.Add(4500 * time.Millisecond)
	ex := func(run int, line string) execution {
		e := execution{cmd: 0, run: run}
		if line != "" {
			ev := parseOOM(line)
			ev.at = oomAt.Add(time.Duration(run) * time.Second)
			e.oom = &ev
		}
		return e
	}
	const plain = "RuntimeError: CUDA error: out of memory"
	want := func(used float64, runs []int, extra map[string]string) []Diagnosis {
		ev := map[string]string{"memory_used_mib": fmt.Sprint(used), "memory_total_mib": "81920",
			"memory_used_pct": fmt.Sprint(math.Round(1000*used/81920) / 10), "memory_free_mib": fmt.Sprint(81920 - used),
			"threshold_pct": "80", "stderr": plain}
		for k, v := range extra {
			ev[k] = v
		}
		first, last := oomAt.Add(time.Duration(runs[0]-1)*time.Second).UnixNano(), oomAt.Add(time.Duration(runs[len(runs)-1]-1)*time.Second).UnixNano()
		return []Diagnosis{{Finding: FindingFragmentation, Kind: "memory fragmentation", Device: 0, StartNS: first, EndNS: last,
			Evidence: ev, Runs: runs}}
	}
	for _, tc := range []struct {
		name  string
		used  float64
		execs []execution
		want  []Diagnosis
	}{
		{name: "allocation fails at half full", used: 40960, execs: []execution{ex(0, plain)},
			want: want(40960, []int{1}, nil)},
		{name: "two runs fail", used: 40960, execs: []execution{ex(0, plain), ex(1, ""), ex(2, plain)},
			want: want(40960, []int{1, 3}, nil)},
		{name: "memory really full", used: 79000, execs: []execution{ex(0, plain)}},
		{name: "no out-of-memory message", used: 40960, execs: []execution{ex(0, "")}},
		{name: "a GPU holding none of the workload", used: 600, execs: []execution{ex(0, plain)}},
		{name: "request larger than the free memory", used: 50000, execs: []execution{ex(0, "CUDA out of memory. Tried to allocate 40.00 GiB")}},
		{name: "message names the full GPU", used: 40960, execs: []execution{ex(0, "CUDA out of memory. GPU 1 has a total capacity of 80 GiB")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fragmentation(tc.execs, 0, devs, window(tc.used))
			for i := range got {
				if !strings.Contains(got[i].Message, "fragmentation") || !strings.Contains(got[i].Message, "nvidia-smi -q -d MEMORY") ||
					!strings.Contains(got[i].Message, "halve it") {
					t.Errorf("message without the field guide's advice: %s", got[i].Message)
				}
				got[i].Message = ""
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("diagnoses %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
