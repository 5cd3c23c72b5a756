//go:build cgo

// The check itself runs the NVML backend, which needs cgo (make test-nocgo
// builds and tests everything else).

package main

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeLibrary builds the repository's fake libnvidia-ml (one GPU) for
// gpucheck to run against.
func fakeLibrary(t *testing.T) string {
	t.Helper()
	lib := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O1", "-o", lib, "../../sampler/nvml/testdata/fakenvml.c").CombinedOutput(); err != nil {
		t.Fatalf("build the fake driver: %v\n%s", err, out)
	}
	t.Setenv("FAKENVML_DEVICES", "1")
	return lib
}

// checkOnFake runs the whole check against the fake driver with short
// phases, the load being the shell script loadScript, and returns the
// report and its Markdown.
func checkOnFake(t *testing.T, loadScript string) (*report, string) {
	t.Helper()
	lib := fakeLibrary(t)
	out := t.TempDir()
	script := filepath.Join(out, "load.sh")
	if err := os.WriteFile(script, []byte(loadScript+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	loadCmd := "sh " + script
	r := &report{Probes: map[int][]probe{}, LoadProbes: map[int][]probe{}, Gaps: map[string]int{}, Duplicates: map[string]int{}}
	if code := run(r, slog.New(slog.DiscardHandler), lib, loadCmd, 2, 100*time.Millisecond, 3*time.Second, 2*time.Second); code != 0 {
		t.Fatalf("exit %d: %v", code, r.Failures)
	}
	if err := write(r, out); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	return r, string(md)
}

// A load that cannot start: its phases are reported as not run, and
// nothing is measured under the load's name (no nvidia-smi comparison,
// cost or gap figure of an idle GPU filed as load).
func TestLoadThatCannotStartIsNotRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fake driver and runs the check for several seconds")
	}
	r, md := checkOnFake(t, "echo error torch unavailable; exit 3")
	want := []phase{{Name: "load", Why: "the load could not start: error torch unavailable"},
		{Name: "throughput", Why: "the load could not start: error torch unavailable"}, {Name: "idle", Ran: true}}
	if !slices.Equal(r.Phases, want) {
		t.Fatalf("phases %+v, want %+v", r.Phases, want)
	}
	for _, c := range r.Comparisons {
		if c.Phase == "load" {
			t.Fatalf("a comparison filed under the load that did not run: %+v", c)
		}
	}
	if len(r.Stats) != 0 || r.Throughput != nil || len(r.Gaps) != 0 || len(r.LoadProbes) != 0 || r.SamplesPerCall != 0 {
		t.Fatalf("load figures measured without a load: stats %v throughput %v gaps %v probes %v", r.Stats, r.Throughput, r.Gaps, r.LoadProbes)
	}
	for _, line := range []string{
		"- load: NOT RUN (the load could not start: error torch unavailable): nothing below is measured under its name",
		"- throughput: NOT RUN (the load could not start: error torch unavailable): nothing below is measured under its name",
		"- idle: ran",
		"not measured: the load phase did not run",
	} {
		if !strings.Contains(md, line+"\n") {
			t.Errorf("report lacks %q:\n%s", line, md)
		}
	}
}

// A load that runs (a stand-in speaking the load protocol: the fake driver
// has no GPU to load): every phase runs, the drop-in's reads and the
// buffers' zero counts are reported, and the report stays under 200 lines.
func TestCheckOnFakeDriverReport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fake driver and runs the check for several seconds")
	}
	load := `echo "ready n=1 flops_per_iter=1000000000000"; while read c s; do [ "$c" = run ] || exit 0; sleep "$s"; echo "done 10 $s"; done`
	r, md := checkOnFake(t, load)
	if !slices.Equal(r.Phases, []phase{{Name: "load", Ran: true}, {Name: "throughput", Ran: true}, {Name: "idle", Ran: true}}) {
		t.Fatalf("phases %+v", r.Phases)
	}
	if r.Throughput == nil || r.Throughput.Runs != 2 || len(r.LoadProbes[0]) == 0 || len(r.Stats) != 1 {
		t.Fatalf("throughput %+v, probes after load %v, stats %v", r.Throughput, r.LoadProbes, r.Stats)
	}
	for _, want := range []string{"## Reads (every catalog metric once per GPU, at the start)\n- gpu0: ", " encoder_sessions=0 ",
		" utilization_jpeg=", "| 0 | encoder_util | ", " zero) | ", "| 166.667ms |", "CUDA 13.0, VBIOS ", "- load: ran\n",
		"## Cost under load\nsamples per NVML call "} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if n := strings.Count(md, "\n"); n >= 200 {
		t.Errorf("report has %d lines, want under 200:\n%s", n, md)
	}
}
