package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/bench"
	"github.com/gpusampler/gpusampler/internal/diagnose"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// profileFindings are the findings each simulator profile raises on its
// own, with a command that does nothing wrong.
var profileFindings = map[string][]string{
	"idle":            nil,
	"training":        nil,
	"data-stall":      {diagnose.FindingPeriodicDips},
	"launch-bound":    {diagnose.FindingLaunchBound},
	"thermal":         {diagnose.FindingThrottle, diagnose.FindingTemperature},
	"memory-pressure": {diagnose.FindingMemoryFull},
	"comm-bound":      {diagnose.FindingCommBound},
}

// findingSet is the sorted set of a benchmark's finding names.
func findingSet(ds []bench.Diagnosis) []string {
	var out []string
	for _, d := range ds {
		if !slices.Contains(out, d.Finding) {
			out = append(out, d.Finding)
		}
	}
	slices.Sort(out)
	return out
}

func with(base []string, extra ...string) []string {
	out := append(slices.Clone(base), extra...)
	slices.Sort(out)
	return out
}

// pinnedAway returns a CPU close to the simulator's GPU 1 but not GPU 0,
// and GPU 0's CPUs as bench prints them; ok is false when the machine
// cannot pin a process away from GPU 0 (one CPU, no taskset, not Linux).
func pinnedAway(t *testing.T) (taskset, cpu, gpu0 string, ok bool) {
	t.Helper()
	if runtime.GOOS != "linux" {
		return "", "", "", false
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return "", "", "", false
	}
	src, err := sim.New(sim.Options{GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	near, _ := devs[0].(sampler.CPUAffinityReporter).CPUAffinity()
	far, _ := devs[1].(sampler.CPUAffinityReporter).CPUAffinity()
	if len(near) == 0 || len(far) == 0 || slices.Contains(near, far[len(far)-1]) {
		return "", "", "", false
	}
	var parts []string
	for i := 0; i < len(near); {
		j := i
		for j+1 < len(near) && near[j+1] == near[j]+1 {
			j++
		}
		p := strconv.Itoa(near[i])
		if j > i {
			p += "-" + strconv.Itoa(near[j])
		}
		parts = append(parts, p)
		i = j + 1
	}
	return taskset, strconv.Itoa(far[len(far)-1]), strings.Join(parts, ","), true
}

// Every diagnosis on every simulator profile, through `gpusampler bench`
// as a user runs it, with the exact set of findings per profile and
// command:
//   - a plain command: the profile's own findings, nothing else;
//   - a command whose stderr says CUDA out of memory: memory
//     fragmentation is added, except where memory really is full
//     (memory-pressure) or the GPU holds none of the workload (idle);
//   - a command pinned (taskset) to CPUs away from the GPU: NUMA placement
//     is added, on every profile;
//   - `bench compare` of a faster training run against the profile's
//     plain runs: memory swap on memory-pressure only (the slower side ran
//     with memory near full), nothing elsewhere.
func TestBenchDiagnosesEveryProfile(t *testing.T) {
	for _, p := range sim.Profiles {
		if _, ok := profileFindings[p]; !ok {
			t.Fatalf("profile %q has no row in profileFindings", p)
		}
	}
	const oom = `echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 140.40 GiB" >&2; sleep %s; exit 1`
	taskset, pinCPU, gpu0CPUs, canPin := pinnedAway(t)
	dir := t.TempDir()
	fast := filepath.Join(dir, "fast.json")
	if code, out, errs := runCLI(t, "bench", "--backend", "sim", "--gpus", "1", "--profile", "training", "--baseline", "0s", "--runs", "2",
		"--no-progress", "--export-json", fast, "--", "sleep", "0.1"); code != 0 {
		t.Fatalf("fast training run: exit %d\n%s\n%s", code, out, errs)
	}
	for _, p := range sim.Profiles {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			secs := "0.4"
			switch p {
			case "comm-bound":
				secs = "1.5" // link rates need a second of readings for a verdict
			case "memory-pressure":
				// Memory swap needs the A/B against the 0.1 s runs to show a
				// difference (ranges apart or significant): a gap no stall of
				// a loaded machine closes.
				secs = "1.5"
			}
			check := func(cell string, code int, out, errs string, res *bench.Result, want []string) *bench.Benchmark {
				t.Helper()
				if code != 0 || res == nil || len(res.Benchmarks) != 1 {
					t.Fatalf("%s: exit %d\n%s\n%s", cell, code, out, errs)
				}
				if !res.Simulated || !strings.Contains(out, "SIMULATED") {
					t.Fatalf("%s: simulated results not marked:\n%s", cell, out)
				}
				b := &res.Benchmarks[0]
				if got := findingSet(b.Diagnoses); !slices.Equal(got, want) {
					t.Fatalf("%s on %s: findings %v, want %v\n%s", cell, p, got, want, out)
				}
				for _, d := range b.Diagnoses {
					if len(d.Evidence) == 0 || d.Message == "" || len(d.Runs) == 0 {
						t.Errorf("%s: diagnosis without evidence or runs: %+v", cell, d)
					}
				}
				if len(want) == 0 && !strings.Contains(out, "diagnoses: none found") {
					t.Errorf("%s: no diagnoses, yet the report does not say so:\n%s", cell, out)
				}
				return b
			}

			// The profile alone.
			plain := filepath.Join(dir, p+".json")
			code, out, errs, res := benchCLIExport(t, plain, "--profile", p, "--runs", "2", "--", "sleep", secs)
			b := check("plain command", code, out, errs, res, profileFindings[p])
			if p == "data-stall" {
				for _, d := range b.Diagnoses {
					if d.Evidence["period_s"] != "6" {
						t.Errorf("stall period %q, want the simulator's 6 s", d.Evidence["period_s"])
					}
				}
			}

			// An out-of-memory message on stderr.
			want := profileFindings[p]
			if p != "memory-pressure" && p != "idle" {
				want = with(want, bench.FindingFragmentation)
			}
			code, out, errs, res = benchCLI(t, "--profile", p, "--runs", "2", "--ignore-failure", "--", strings.Replace(oom, "%s", secs, 1))
			b = check("out-of-memory command", code, out, errs, res, want)
			if p == "training" {
				d := b.Diagnoses[slices.IndexFunc(b.Diagnoses, func(d bench.Diagnosis) bool { return d.Finding == bench.FindingFragmentation })]
				if d.Device != 0 || !slices.Equal(d.Runs, []int{1, 2}) || d.Evidence["requested_mib"] != "2048" ||
					d.Evidence["memory_total_mib"] != "143771" || d.Evidence["memory_used_pct"] != "69.1" ||
					!strings.Contains(d.Evidence["stderr"], "CUDA out of memory") ||
					!strings.Contains(out, "memory fragmentation on GPU 0 (runs [1 2])") || !strings.Contains(out, "nvidia-smi -q -d MEMORY") {
					t.Errorf("fragmentation diagnosis %+v\n%s", d, out)
				}
			}

			// Pinned away from the GPU.
			if canPin {
				code, out, errs, res = benchCLI(t, "--profile", p, "--runs", "2", "--", taskset, "-c", pinCPU, "sleep", secs)
				b = check("pinned command", code, out, errs, res, with(profileFindings[p], bench.FindingNUMA))
				d := b.Diagnoses[slices.IndexFunc(b.Diagnoses, func(d bench.Diagnosis) bool { return d.Finding == bench.FindingNUMA })]
				if d.Device != 0 || !slices.Equal(d.Runs, []int{1, 2}) || d.Evidence["process_cpus"] != pinCPU || d.Evidence["gpu_cpus"] != gpu0CPUs ||
					!strings.Contains(out, "NUMA placement on GPU 0 (runs [1 2])") || !strings.Contains(out, "numactl -C "+gpu0CPUs) {
					t.Errorf("NUMA diagnosis %+v\n%s", d, out)
				}
			} else {
				t.Log("pinned command not run: needs Linux, taskset and two CPUs")
			}

			// A/B against a faster training run.
			code, out, errs = runCLI(t, "bench", "compare", fast, plain)
			if code != 0 || !strings.Contains(out, "slower") {
				t.Fatalf("compare: exit %d\n%s\n%s", code, out, errs)
			}
			swap := regexp.MustCompile(`memory swap on GPU 0 \(runs \[1 2\] of .*` + p + `\.json\): .*` + p +
				`\.json is [0-9.]+× slower than .*fast\.json and ran with memory near full \(9[5-9]\.\d% against 69\.1%\).*gradient accumulation`)
			if got := swap.MatchString(out); got != (p == "memory-pressure") || (!got && strings.Contains(out, "memory swap")) {
				t.Fatalf("compare with a faster training run: memory swap %v, want it on memory-pressure only:\n%s", got, out)
			}
		})
	}
}
