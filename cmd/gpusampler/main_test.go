package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/internal/cgocall"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// gpusampler jobs: the live table of per-job accounts of an ad-hoc run
// (accounting on; with no attribution source everything is
// unattributed), with its last totals when the run ends.
func TestJobsCommand(t *testing.T) {
	code, out, errOut := runCLI(t, "jobs", "--backend", "sim", "--gpus", "2", "--duration", "2s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "OWNER ") || !strings.Contains(out, "\nunattributed ") || !strings.Contains(out, " 0,1 ") {
		t.Fatalf("jobs table:\n%s", out)
	}
}

// gpusampler jobs --config FILE: the config's [sampler] and
// [attribution] (here a Slurm job-mapping directory naming job 4711 on GPU
// 1), none of its outputs, and the jobs table with that job's row.
func TestJobsCommandConfig(t *testing.T) {
	dir := t.TempDir()
	mapping := filepath.Join(dir, "jobs")
	if err := os.MkdirAll(mapping, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mapping, "1"), []byte("4711\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "gpusampler.toml")
	text := fmt.Sprintf("[sampler]\n  backend = \"sim\"\n  gpus = 2\n\n[attribution]\n  hpc_job_mapping_dir = %q\n  refresh_interval = \"1s\"\n\n"+
		"[[outputs.stdout]]\n  format = \"influx\"\n", mapping)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "jobs", "--config", cfg, "--duration", "3s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "nvidia_smi") || !strings.Contains(out, "\nslurm:4711 ") || !strings.Contains(out, "\nunattributed ") {
		t.Fatalf("jobs table (want slurm:4711 on GPU 1, no line protocol):\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "slurm:4711 ") && !strings.Contains(l, " 1 ") {
			t.Errorf("job 4711's row is not on GPU 1: %q", l)
		}
	}
	if code, _, errOut := runCLI(t, "run", "--config", cfg, "--format", "json"); code != 2 || !strings.Contains(errOut, "--format applies only without --config") {
		t.Errorf("run --config --format json: exit %d, %s", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "--profile", "nope"}, `unknown profile "nope"`},
		{[]string{"run", "--format", "xml"}, `unknown format "xml"`},
		{[]string{"run", "--duration", "0s"}, "-duration: must be positive"},
		{[]string{"run", "--duration", "-5s"}, "-duration: must be positive"},
		{[]string{"run", "--duration", "soon"}, "-duration: not a duration"},
		{[]string{"run", "--backend", "cuda"}, `unknown backend "cuda"`},
		{[]string{"run", "--gpus", "0"}, "--gpus 0: must be between 1 and 64"},
		{[]string{"run", "extra"}, `unexpected argument "extra"`},
		{[]string{"run", "--min-max"}, "--min-max applies only with --execd nvidia_smi"},
		{[]string{"run", "--execd", "gather", "--min-max"}, "--min-max applies only with --execd nvidia_smi"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"jobs", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q: want one line containing %q", stderr, tc.want)
			}
		})
	}
}

func TestRunSimulated(t *testing.T) {
	for _, format := range []string{"influx", "json"} {
		t.Run(format, func(t *testing.T) {
			code, out, stderr := runCLI(t, "run", "--backend", "sim", "--gpus", "2", "--duration", "300ms", "--format", format, "--host", "testhost")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) < 50 {
				t.Fatalf("only %d lines", len(lines))
			}
			gpus := map[string]bool{}
			for _, l := range lines {
				// gpusampler's own final self-metrics (sent at exit) are
				// about the program, not a GPU
				if strings.HasPrefix(l, "gpusampler_self,") || strings.HasPrefix(l, `{"type":"self",`) {
					continue
				}
				switch format {
				case "influx":
					if !strings.Contains(l, "simulated=true") || !strings.Contains(l, "host=testhost") {
						t.Fatalf("line not labelled simulated: %q", l)
					}
					gpus[strings.Split(strings.SplitN(l, "index=", 2)[1], ",")[0]] = true
				case "json":
					if !strings.Contains(l, `"simulated":true`) {
						t.Fatalf("line not labelled simulated: %q", l)
					}
				}
			}
			if format == "influx" && len(gpus) != 2 {
				t.Fatalf("saw GPUs %v, want 2", gpus)
			}
		})
	}
}

func TestAutoFallsBackToSimulatorWithNotice(t *testing.T) {
	code, out, stderr := runCLI(t, "run", "--gpus", "1", "--duration", "200ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "SIMULATED") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("want one loud notice line on stderr, got %q", stderr)
	}
	if out == "" {
		t.Fatal("no samples")
	}
}

func TestMetricsListsCatalog(t *testing.T) {
	code, out, _ := runCLI(t, "metrics")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	// The first column is the metric's ID (records.proto's MetricId).
	if lines := strings.Split(out, "\n"); len(lines) < 3 || !strings.HasPrefix(lines[0], "ID  ") ||
		!strings.HasPrefix(lines[1], "1   power_draw ") || !strings.HasPrefix(lines[2], "2   power_draw_instant ") {
		t.Errorf("metrics output does not start with the ID column:\n%s", out)
	}
	for _, want := range []string{"power_draw_instant", "DCGM_FI_DEV_POWER_USAGE_INSTANT", "clocks_event_reasons_counters_hw_therm_slowdown (int, us, ×0.001)", "utilization_gpu"} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics output lacks %q", want)
		}
	}
}

func TestBackendNVMLWithoutDriver(t *testing.T) {
	t.Setenv("GPUSAMPLER_NVML_LIBRARY", t.TempDir()+"/libnvidia-ml.so.1")
	code, _, stderr := runCLI(t, "run", "--backend", "nvml", "--duration", "1s")
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	want := []string{"not found", "install the NVIDIA driver"}
	if !cgocall.Available {
		want = []string{"built without cgo", "CGO_ENABLED=1"}
	}
	if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want[0]) || !strings.Contains(stderr, want[1]) {
		t.Fatalf("want one line saying the library was not found and how to fix it, got %q", stderr)
	}
}

// doctor reports on the real driver: without one it fails and says why,
// rather than printing a report on simulated GPUs. A library named in
// GPUSAMPLER_NVML_LIBRARY that is missing or corrupt is an error naming the
// path and the loader's reason, under --backend auto too: never a silent
// switch to the simulator, never "not found" for a file that is there.
func TestDoctorWithoutDriverFails(t *testing.T) {
	if !cgocall.Available {
		t.Skip("needs cgo")
	}
	dir := t.TempDir()
	corrupt := dir + "/corrupt/libnvidia-ml.so.1"
	if err := os.MkdirAll(dir+"/corrupt", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt, []byte("not an ELF shared object, but long enough to be read as one's header"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ lib, loader string }{
		{dir + "/libnvidia-ml.so.1", "(loader: " + dir + "/libnvidia-ml.so.1: cannot open shared object file: No such file or directory): sampler: driver library not found"},
		{corrupt, ": the file is there but does not load (loader: " + corrupt + ": invalid ELF header)"},
	} {
		t.Setenv("GPUSAMPLER_NVML_LIBRARY", tc.lib)
		_, openErr := openNVML(slog.New(slog.DiscardHandler))
		if openErr == nil || !strings.Contains(openErr.Error(), tc.loader) {
			t.Fatalf("%s: open error %v, want the loader's reason %q", tc.lib, openErr, tc.loader)
		}
		for _, args := range [][]string{{"doctor"}, {"run", "--duration", "1s"}, {"run", "--backend", "auto", "--duration", "1s"}} {
			code, out, stderr := runCLI(t, args...)
			want := "gpusampler " + args[0] + ": GPUSAMPLER_NVML_LIBRARY=" + tc.lib + ": " + openErr.Error() + "\n"
			if code != 1 || out != "" || stderr != want {
				t.Fatalf("%v: exit %d, stdout %.200q, stderr\n%q\nwant exit 1 and\n%q", args, code, out, stderr, want)
			}
		}
	}
	// With no library named and no driver, doctor fails and says why (and
	// how to get a simulated report); --backend sim gives that report.
	t.Setenv("GPUSAMPLER_NVML_LIBRARY", "")
	if _, err := openNVML(slog.New(slog.DiscardHandler)); err == nil {
		t.Log("a driver loads here: the no-driver case is not checked")
	} else {
		code, out, stderr := runCLI(t, "doctor")
		want := "gpusampler doctor: " + err.Error() + " (no report: doctor checks the real driver; --backend sim reports on simulated GPUs)\n"
		if code != 1 || out != "" || stderr != want {
			t.Fatalf("doctor without a driver: exit %d, stdout %.200q, stderr\n%q\nwant exit 1 and\n%q", code, out, stderr, want)
		}
	}
	code, out, _ := runCLI(t, "doctor", "--backend", "sim", "--latency-calls", "5")
	if code != 0 || !strings.Contains(out, "SIMULATED") {
		t.Fatalf("doctor --backend sim: exit %d\n%s", code, out)
	}
}

// version names the version, the commit (from the Makefile's -X flags),
// the Go toolchain and the driver; a library named in
// GPUSAMPLER_NVML_LIBRARY that fails is named with the reason (run would
// fail on it, so there is no talk of a simulator).
func TestVersionSaysWhatWasBuilt(t *testing.T) {
	v, c := version, buildCommit
	version, buildCommit = "v1.2.3-4-gabcdef0", "abcdef0123456789abcdef0123456789abcdef01"
	t.Cleanup(func() { version, buildCommit = v, c })
	lib := t.TempDir() + "/libnvidia-ml.so.1"
	t.Setenv("GPUSAMPLER_NVML_LIBRARY", lib)
	_, openErr := openNVML(slog.New(slog.DiscardHandler))
	code, out, errs := runCLI(t, "version")
	cgo := "off"
	if cgocall.Available {
		cgo = "on"
	}
	want := "gpusampler v1.2.3-4-gabcdef0\ncommit  abcdef0123456789abcdef0123456789abcdef01\n" +
		"go      " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ", cgo " + cgo + "\n" +
		"driver  not loaded: GPUSAMPLER_NVML_LIBRARY=" + lib + ": " + openErr.Error() + "\n"
	if code != 0 || out != want || errs != "" {
		t.Fatalf("exit %d, stdout\n%s\nwant\n%s\nstderr %q", code, out, want, errs)
	}
	if cgocall.Available && !strings.Contains(out, "No such file or directory") {
		t.Fatalf("the loader's reason is missing:\n%s", out)
	}
}

// run --devices samples only the GPUs listed; a bad entry is a usage error.
func TestRunDevices(t *testing.T) {
	code, out, errs := runCLI(t, "run", "--backend", "sim", "--gpus", "3", "--devices", "0,2", "--format", "json", "--duration", "1s")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, `"gpu":`); i >= 0 && strings.Contains(l, `"type":"sample"`) {
			seen[l[i+6:i+7]] = true
		}
	}
	if !seen["0"] || !seen["2"] || seen["1"] {
		t.Fatalf("GPUs sampled %v, want 0 and 2", seen)
	}
	if code, _, errs := runCLI(t, "run", "--backend", "sim", "--devices", "zero", "--duration", "1s"); code != 2 || !strings.Contains(errs, `"zero" is neither an index nor a UUID`) {
		t.Fatalf("bad --devices: exit %d %s", code, errs)
	}
	// A GPU asked for that is not there is an error, never silently left out.
	code, out, errs = runCLI(t, "run", "--backend", "sim", "--gpus", "3", "--devices", "0,7,GPU-nope", "--duration", "1s")
	if want := "gpusampler run: --devices \"0,7,GPU-nope\": no GPU 7, GPU-nope here (GPUs: 0, 1, 2)\n"; code != 2 || out != "" || errs != want {
		t.Fatalf("missing GPU in --devices: exit %d, stdout %.100q, stderr %q, want %q", code, out, errs, want)
	}
}
