package main

import (
	"bytes"
	"context"
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
// rather than printing a report on simulated GPUs.
func TestDoctorWithoutDriverFails(t *testing.T) {
	if !cgocall.Available {
		t.Skip("needs cgo")
	}
	dir := t.TempDir()
	lib := dir + "/libnvidia-ml.so.1"
	t.Setenv("GPUSAMPLER_NVML_LIBRARY", lib)
	code, out, stderr := runCLI(t, "doctor")
	if code != 1 || out != "" || !strings.Contains(stderr, lib) || !strings.Contains(stderr, "No such file") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	// An explicit library that fails is an error under --backend auto too:
	// never a silent switch to the simulator.
	code, _, stderr = runCLI(t, "run", "--duration", "1s")
	if code == 0 || !strings.Contains(stderr, "GPUSAMPLER_NVML_LIBRARY="+lib) || strings.Contains(stderr, "SIMULATED") {
		t.Fatalf("run: exit %d, stderr %q", code, stderr)
	}
	code, _, _ = runCLI(t, "doctor", "--backend", "sim", "--latency-calls", "5")
	if code != 0 {
		t.Fatalf("doctor --backend sim: exit %d", code)
	}
}

func TestVersionSaysWhatWasBuilt(t *testing.T) {
	t.Setenv("GPUSAMPLER_NVML_LIBRARY", t.TempDir()+"/libnvidia-ml.so.1")
	code, out, _ := runCLI(t, "version")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"gpusampler " + version + "\n", "commit  ", "go      go1.", "driver  not loaded"} {
		if !strings.Contains(out, want) {
			t.Errorf("version lacks %q:\n%s", want, out)
		}
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
}
