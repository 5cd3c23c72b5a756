package main

import (
	"encoding/xml"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/bench"
)

// benchCLI runs `gpusampler bench` on one simulated GPU with a short
// baseline and returns the exit code, output and the exported result.
func benchCLI(t *testing.T, args ...string) (int, string, string, *bench.Result) {
	t.Helper()
	return benchCLIExport(t, filepath.Join(t.TempDir(), "r.json"), args...)
}

// benchCLIExport is benchCLI exporting the result to js.
func benchCLIExport(t *testing.T, js string, args ...string) (int, string, string, *bench.Result) {
	t.Helper()
	full := append([]string{"bench", "--backend", "sim", "--gpus", "1", "--baseline", "500ms", "--export-json", js}, args...)
	code, out, errs := runCLI(t, full...)
	var res *bench.Result
	if f, err := os.Open(js); err == nil {
		defer f.Close()
		if st, _ := f.Stat(); st.Size() > 0 {
			if res, err = bench.ReadResult(f); err != nil {
				t.Fatalf("exported JSON: %v", err)
			}
		}
	}
	return code, out, errs, res
}

func TestBenchAB(t *testing.T) {
	t.Parallel()
	code, out, errs, res := benchCLI(t, "--runs", "3", "--warmup", "1", "--vs", "sleep 0.3", "--", "sleep", "0.2")
	if code != 0 || res == nil {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if res.Comparison == nil || len(res.Benchmarks) != 2 || len(res.Benchmarks[0].Runs) != 3 || len(res.Benchmarks[1].Runs) != 3 {
		t.Fatalf("want two benchmarks of 3 measured runs and a comparison:\n%s", out)
	}
	// The reported comparison is the one the recorded runs give, in words
	// on stdout.
	want := bench.CompareResults(res, &res.Benchmarks[0], res, &res.Benchmarks[1], bench.CompareOptions{Paired: true})
	// (the file keeps 10 significant digits)
	if got := *res.Comparison; got.Summary != want.Summary || math.Abs(float64(got.Speedup/want.Speedup)-1) > 1e-8 || got.Significant != want.Significant {
		t.Fatalf("comparison %+v\nfrom the runs %+v", got, want)
	}
	if !strings.Contains(out, "\n"+want.Summary+"\n") {
		t.Fatalf("comparison %q not on stdout:\n%s", want.Summary, out)
	}
	// Not on a terminal, progress is one plain line per execution, in
	// order, warmups first: no redrawing, no escape sequences.
	var progress []string
	for _, l := range strings.Split(errs, "\n") {
		if m := regexp.MustCompile(`^([AB] (?:warmup|run) \d): \d+\.\d{3} s (\[\d/8\])$`).FindStringSubmatch(l); m != nil {
			progress = append(progress, m[1]+" "+m[2])
		}
	}
	if want := []string{"A warmup 1 [1/8]", "B warmup 1 [2/8]", "A run 1 [3/8]", "B run 1 [4/8]", "B run 2 [5/8]", "A run 2 [6/8]",
		"A run 3 [7/8]", "B run 3 [8/8]"}; !slices.Equal(progress, want) || strings.ContainsAny(errs, "\r\x1b") {
		t.Fatalf("progress %q, want %q; stderr:\n%q", progress, want, errs)
	}
	// Interleaved in pairs of alternating order: A B, B A, A B; analysed
	// as pairs, both started the same way (executed directly).
	a, b := res.Benchmarks[0].Runs, res.Benchmarks[1].Runs
	for i := range a {
		first, second := a[i], b[i]
		if i%2 == 1 {
			first, second = b[i], a[i]
		}
		if first.EndNS > second.StartNS || (i+1 < len(a) && second.EndNS > min(a[i+1].StartNS, b[i+1].StartNS)) {
			t.Fatalf("pair %d not in order", i+1)
		}
	}
	if res.Settings.Order != bench.PairOrder || res.Comparison.Analysis != bench.AnalysisPaired || res.Comparison.Pairs != 3 ||
		res.Benchmarks[0].Shell || res.Benchmarks[1].Shell || !slices.Equal(res.Benchmarks[1].Command, []string{"sleep", "0.3"}) {
		t.Fatalf("order %q, analysis %q of %d pairs, A %q shell %v, B %q shell %v", res.Settings.Order, res.Comparison.Analysis,
			res.Comparison.Pairs, res.Benchmarks[0].Command, res.Benchmarks[0].Shell, res.Benchmarks[1].Command, res.Benchmarks[1].Shell)
	}
	// --fail-if-slower exits 1 exactly when the recorded runs put B more
	// than PCT percent behind A (B sleeps 1 s, A runs true: it does).
	js := filepath.Join(t.TempDir(), "slower.json")
	code, _, errs = runCLI(t, "bench", "--backend", "sim", "--gpus", "1", "--baseline", "0s", "--runs", "2", "--no-progress",
		"--export-json", js, "--vs", "sleep 1", "--fail-if-slower", "10", "--", "true")
	f, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := bench.ReadResult(f)
	if err != nil {
		t.Fatal(err)
	}
	// The exit status follows the printed verdict: 1 exactly when the
	// comparison calls B slower by more than the limit.
	c := r.Comparison
	if fail := c.Verdict == bench.VerdictSlower && c.SlowerBy() > 10; (code == 1) != fail || (code == 1) != strings.Contains(errs, "regression: B is") {
		t.Fatalf("--fail-if-slower 10 with verdict %q, B %.1f%% slower: exit %d: %s", c.Verdict, c.SlowerBy(), code, errs)
	}
}

func TestBenchStepMarks(t *testing.T) {
	t.Parallel()
	script := `for i in 1 2 3; do echo "step $i $(date +%s.%N)" > "$GPUSAMPLER_MARKS"; sleep 0.15; done`
	code, out, errs, res := benchCLI(t, "--runs", "2", "--", script)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, run := range res.Benchmarks[0].Runs {
		if len(run.Steps) != 4 || run.Steps[0].Name != "(before first mark)" || run.Steps[3].Name != "step 3" {
			t.Fatalf("steps %+v", run.Steps)
		}
		var wall, energy float64
		for i, st := range run.Steps {
			wall += float64(st.WallS)
			energy += float64(st.EnergyJ)
			if i > 0 && run.Steps[i-1].EndNS != st.StartNS {
				t.Fatalf("steps do not tile the run: %+v", run.Steps)
			}
			// Marks are the program's own timestamps, 0.15 s of sleep
			// apart at least (no upper bound: a loaded machine may be
			// slow); the last step lasts until the run ends, after a sleep.
			if i > 0 && st.WallS < 0.149 {
				t.Errorf("step %s lasted %v s (sleep 0.15 before the next mark)", st.Name, st.WallS)
			}
			if !st.UtilMeanPct.Known() {
				t.Errorf("step %s has no utilization", st.Name)
			}
		}
		if math.Abs(wall-float64(run.WallS)) > 1e-3 {
			t.Fatalf("steps' wall %v, run %v", wall, run.WallS)
		}
		if math.Abs(energy-float64(run.EnergyJ)) > 1e-6*math.Abs(float64(run.EnergyJ))+1e-9 {
			t.Fatalf("steps' energy %v, run %v", energy, run.EnergyJ)
		}
	}
	if !strings.Contains(out, "steps of run 1") {
		t.Fatalf("steps not in the table:\n%s", out)
	}
}

// savedResult writes a bench result file with the given wall times (energy
// 100 J per second of wall time), as --export-json would.
func savedResult(t *testing.T, path string, walls ...float64) {
	t.Helper()
	b := bench.Benchmark{Name: "A", Command: []string{"./train"}}
	var energy []float64
	for i, w := range walls {
		b.Runs = append(b.Runs, bench.Run{Index: i + 1, WallS: bench.Num(w), EnergyJ: bench.Num(100 * w)})
		energy = append(energy, 100*w)
	}
	m, sd := bench.MeanStd(walls)
	em, esd := bench.MeanStd(energy)
	b.Summary.WallS = bench.Stat{N: len(walls), Mean: bench.Num(m), SD: bench.Num(sd)}
	b.Summary.EnergyJ = bench.Stat{N: len(walls), Mean: bench.Num(em), SD: bench.Num(esd)}
	r := &bench.Result{Schema: bench.Schema, SchemaVersion: bench.SchemaVersion, Benchmarks: []bench.Benchmark{b}}
	var buf strings.Builder
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(buf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bench compare on saved files with fixed wall times: the whole report,
// and --fail-if-slower's exit status both ways. A file exported by a live
// run is read too.
func TestBenchCompareSavedFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	savedResult(t, a, 0.101, 0.103, 0.102, 0.104)
	savedResult(t, b, 0.204, 0.201, 0.203, 0.202)
	code, out, errs := runCLI(t, "bench", "compare", a, b)
	want := a + ": 4 runs, wall 0.102 ± 0.001 s, energy 10.2 J\n" +
		b + ": 4 runs, wall 0.203 ± 0.001 s, energy 20.2 J\n" +
		b + " is 98 % slower than " + a + " (time B/A 1.976, 95% interval 1.939–2.013; Welch's t-test on log wall times, unpaired " +
		"(runs not interleaved), 4 runs each: p < 0.001). Energy: " + b + " uses 98 % more (energy B/A 1.976, 95% interval 1.939–2.013)\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d\n got %q\nwant %q\n%s", code, out, want, errs)
	}
	if code, _, errs := runCLI(t, "bench", "compare", "--fail-if-slower", "20", a, b); code != 1 ||
		errs != "gpusampler bench: regression: "+b+" is 98 % slower than "+a+" (limit 20 %; 95% interval +94 % to +101 %, p < 0.001)\n" {
		t.Fatalf("compare --fail-if-slower: exit %d: %q", code, errs)
	}
	if code, out, _ := runCLI(t, "bench", "compare", "--fail-if-slower", "20", b, a); code != 0 || !strings.Contains(out, a+" is 49 % faster than "+b+": 1.98× as fast") {
		t.Fatalf("reverse compare: %d\n%s", code, out)
	}
	// Files whose runs cannot settle a 3 % limit: no difference detected,
	// not failed, and stderr says the interval reaches past the limit; a
	// stated margin is printed with the verdict.
	c1, c2 := filepath.Join(dir, "c1.json"), filepath.Join(dir, "c2.json")
	savedResult(t, c1, 1.00, 0.90, 1.10, 1.05)
	savedResult(t, c2, 1.02, 0.95, 1.12, 1.01)
	if code, out, errs := runCLI(t, "bench", "compare", "--fail-if-slower", "3", "--same-within", "5", c1, c2); code != 0 ||
		!strings.Contains(out, "no difference detected between "+c2+" and "+c1+"; the interval cannot rule out ±") ||
		!strings.Contains(out, "margin ±3.0 %, from --fail-if-slower") ||
		!strings.HasPrefix(errs, "gpusampler bench: --fail-if-slower 3: not failed: no difference detected, but the interval allows "+c2+" up to +") {
		t.Fatalf("inconclusive compare: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := runCLI(t, "bench", "compare", "--same-within", "-1", c1, c2); code != 2 || !strings.Contains(errs, "--same-within -1") {
		t.Fatalf("--same-within -1: exit %d: %s", code, errs)
	}
	live := filepath.Join(dir, "live.json")
	if code, out, errs := runCLI(t, "bench", "--backend", "sim", "--gpus", "1", "--baseline", "0s", "--runs", "2",
		"--no-progress", "--export-json", live, "--", "sleep", "0.1"); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := runCLI(t, "bench", "compare", live, a); code != 0 ||
		!strings.HasPrefix(out, "note: "+live+" was measured on SIMULATED GPUs\n"+live+": 2 runs, wall ") {
		t.Fatalf("compare a live export: exit %d\n%s\n%s", code, out, errs)
	}
}

// A and B start the same way: both executed directly when neither needs a
// shell, both through sh -c when either does (A's words quoted), so that
// neither side alone pays a shell's start.
func TestBenchCommandsStartAlike(t *testing.T) {
	for _, tc := range []struct {
		argv   []string
		vs     string
		wantA  []string
		wantB  []string
		shell  bool
		noVs   bool
		shellA bool
	}{
		{argv: []string{"sleep", "0.1"}, vs: "sleep 0.1", wantA: []string{"sleep", "0.1"}, wantB: []string{"sleep", "0.1"}},
		{argv: []string{"sleep", "0.1"}, vs: "sleep  0.108 ", wantA: []string{"sleep", "0.1"}, wantB: []string{"sleep", "0.108"}},
		{argv: []string{"sleep", "0.1"}, vs: "sleep 0.1 && true", wantA: []string{"sleep 0.1"}, wantB: []string{"sleep 0.1 && true"}, shell: true},
		{argv: []string{"python3", "-c", "print('a b')"}, vs: "FOO=1 python3 x.py", wantA: []string{`python3 -c 'print('\''a b'\'')'`},
			wantB: []string{"FOO=1 python3 x.py"}, shell: true},
		{argv: []string{"sleep 0.1"}, vs: "sleep 0.1", wantA: []string{"sleep 0.1"}, wantB: []string{"sleep 0.1"}, shell: true},
		{argv: []string{"sleep", "0.1"}, vs: "cd /tmp", wantA: []string{"sleep 0.1"}, wantB: []string{"cd /tmp"}, shell: true},
		{argv: []string{"sleep 0.1"}, noVs: true, wantA: []string{"sleep 0.1"}, shellA: true},
		{argv: []string{"sleep", "0.1"}, noVs: true, wantA: []string{"sleep", "0.1"}},
	} {
		cmds := commands(tc.argv, tc.vs, !tc.noVs)
		if tc.noVs {
			if len(cmds) != 1 || !slices.Equal(cmds[0].Argv, tc.wantA) || cmds[0].Shell != tc.shellA {
				t.Errorf("%q alone: %+v", tc.argv, cmds)
			}
			continue
		}
		a, b := cmds[0], cmds[1]
		if !slices.Equal(a.Argv, tc.wantA) || !slices.Equal(b.Argv, tc.wantB) || a.Shell != tc.shell || b.Shell != tc.shell {
			t.Errorf("%q --vs %q: A %q (shell %v), B %q (shell %v); want A %q B %q shell %v", tc.argv, tc.vs, a.Argv, a.Shell,
				b.Argv, b.Shell, tc.wantA, tc.wantB, tc.shell)
		}
	}
	// the quoting is what sh reads back as the same words
	line := shellQuote([]string{"printf", "%s|", "it's", "a b", ""})
	out, err := exec.Command("/bin/sh", "-c", line).Output()
	if err != nil || string(out) != "it's|a b||" {
		t.Fatalf("sh -c %q: %q %v", line, out, err)
	}
}

func TestBenchReportExports(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	svg, md, csv := filepath.Join(dir, "r.svg"), filepath.Join(dir, "r.md"), filepath.Join(dir, "r.csv")
	script := `echo "phase 1 $(date +%s.%N)" > "$GPUSAMPLER_MARKS"; sleep 0.2; echo "phase 2 $(date +%s.%N)" > "$GPUSAMPLER_MARKS"; sleep 0.2`
	code, out, errs := runCLI(t, "bench", "--backend", "sim", "--gpus", "2", "--baseline", "300ms", "--runs", "2",
		"--vs", "sleep 0.1", "--export-svg", svg, "--export-markdown", md, "--export-csv", csv, "--", script)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	// The simulator's own processes are its workload, not a foreign user.
	if strings.Contains(out+errs, "contaminates") || strings.Contains(out+errs, "another process") {
		t.Fatalf("simulated processes flagged as foreign:\n%s\n%s", out, errs)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(b)))
	texts := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "text" {
			texts++
		}
	}
	if texts < 20 || !strings.Contains(string(b), "GPU 1") {
		t.Fatalf("SVG has %d text elements", texts)
	}
	for _, u := range regexp.MustCompile(`(?i)https?://[^"'\s)]*`).FindAllString(string(b), -1) {
		if u != "http://www.w3.org/2000/svg" && u != "http://www.w3.org/1999/xlink" {
			t.Fatalf("SVG references %s (must be self-contained)", u)
		}
	}
	mdb, _ := os.ReadFile(md)
	// The verdict's wording is pinned in package bench on synthetic runs;
	// here only that the report carries one (how fast sleep runs on this
	// machine must not decide the test).
	if !strings.Contains(string(mdb), "| A: `"+script+"`") || !regexp.MustCompile(`(faster|slower) than A|the same time within|no difference detected between`).Match(mdb) {
		t.Fatalf("markdown:\n%s", mdb)
	}
	csvb, _ := os.ReadFile(csv)
	lines := strings.Split(strings.TrimSpace(string(csvb)), "\n")
	if lines[0] != "time_ns,t_s,gpu,metric,unit,value,point_read,command,run" || len(lines) < 100 ||
		!strings.Contains(string(csvb), ",1,power_draw,W,") || !strings.Contains(string(csvb), ",B,1\n") {
		t.Fatalf("csv: %d lines, header %q", len(lines), lines[0])
	}
}

func TestBenchBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"schema": "gpusampler.bench", "schema_version": 1, "benchmarks": [`), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", []string{"bench", "--backend", "sim"}, 2, "no command to benchmark"},
		{"runs 0", []string{"bench", "--backend", "sim", "--runs", "0", "--", "true"}, 2, "--runs 0: must be at least 1"},
		{"missing program", []string{"bench", "--backend", "sim", "--", "no-such-program-xyz"}, 2, `"no-such-program-xyz" not found`},
		{"missing program in --vs", []string{"bench", "--backend", "sim", "--vs", "no-such-program-xyz 1", "--", "true"}, 2, `command B: "no-such-program-xyz" not found`},
		{"failing command", []string{"bench", "--backend", "sim", "--gpus", "1", "--baseline", "0s", "--", "sh", "-c", "echo boom >&2; exit 3"}, 1, "exit status 3"},
		{"malformed file", []string{"bench", "compare", bad, bad}, 2, "truncated JSON"},
		{"missing file", []string{"bench", "compare", filepath.Join(dir, "nope.json"), bad}, 2, "no such file"},
		{"one file", []string{"bench", "compare", bad}, 2, "two result files"},
		{"bad devices", []string{"bench", "--backend", "sim", "--devices", "x", "--", "true"}, 2, `"x" is neither an index nor a UUID`},
		{"absent devices", []string{"bench", "--backend", "sim", "--gpus", "2", "--devices", "0,7,GPU-nope", "--", "true"}, 2,
			"gpusampler bench: --devices 0,7,GPU-nope: no GPU 7, GPU-nope here (GPUs: 0, 1)\n"},
		{"fail-if-slower without vs", []string{"bench", "--backend", "sim", "--fail-if-slower", "5", "--", "true"}, 2, "needs --vs"},
	} {
		code, out, errs := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, stderr %q, want %d and %q (stdout %q)", tc.name, code, errs, tc.code, tc.want, out)
		}
	}
	// A failing command is reported with its stderr; --ignore-failure keeps
	// going and records the exit code.
	code, _, errs := runCLI(t, "bench", "--backend", "sim", "--gpus", "1", "--baseline", "0s", "--", "sh", "-c", "echo boom >&2; exit 3")
	if code != 1 || !strings.Contains(errs, "boom") || !strings.Contains(errs, "--ignore-failure") {
		t.Fatalf("failing command: %d %q", code, errs)
	}
	code, out, errs, res := benchCLI(t, "--runs", "2", "--ignore-failure", "--baseline", "0s", "--", "sh", "-c", "exit 3")
	if code != 0 || res.Benchmarks[0].Summary.Failed != 2 || res.Benchmarks[0].Runs[1].ExitCode != 3 {
		t.Fatalf("--ignore-failure: %d\n%s\n%s", code, out, errs)
	}
}

func TestBenchDeviceSelection(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "1")
	t.Setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
	code, out, errs := runCLI(t, "bench", "--backend", "sim", "--gpus", "3", "--baseline", "0s", "--runs", "1", "--", "true")
	if code != 0 || !strings.Contains(out, "GPU 1 ") || strings.Contains(out, "GPU 0 ") || strings.Contains(out, "GPU 2 ") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "bench", "--backend", "sim", "--gpus", "3", "--devices", "0,2", "--baseline", "0s", "--runs", "1", "--", "true")
	if code != 0 || !strings.Contains(out, "GPU 0 ") || !strings.Contains(out, "GPU 2 ") || strings.Contains(out, "GPU 1 ") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "")
	if code, _, errs := runCLI(t, "bench", "--backend", "sim", "--", "true"); code != 2 || !strings.Contains(errs, "hides every GPU") {
		t.Fatalf("empty CUDA_VISIBLE_DEVICES: %d %s", code, errs)
	}
}

// TestBenchHygieneOtherProcesses: the simulator's training process is part
// of its made-up workload, not another user of the GPU: it is never flagged
// as a foreign process that contaminates the measurement (the detection
// itself is tested on synthetic events in package bench). The simulated
// GPUs' modes are recorded.
func TestBenchHygieneOtherProcesses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ profile, want string }{
		{"training", "none"},
		{"idle", "none"},
	} {
		code, out, errs, res := benchCLI(t, "--profile", tc.profile, "--runs", "2", "--", "sleep", "0.6")
		if code != 0 || res == nil {
			t.Fatalf("%s: exit %d\n%s\n%s", tc.profile, code, out, errs)
		}
		items := map[string]string{}
		for _, it := range res.Hygiene.Items {
			if it.Device == 0 {
				items[it.Name] = it.Value
			}
		}
		if items["persistence_mode"] != "enabled" || items["ecc_mode"] != "enabled" || items["mig_mode"] != "disabled" {
			t.Errorf("%s: modes %v", tc.profile, items)
		}
		other := items["other_processes"]
		warned := false
		for _, w := range res.Warnings {
			if strings.Contains(w, "python3 used") && strings.Contains(w, "on GPU 0") && strings.Contains(w, " during ") {
				warned = true
			}
		}
		if tc.want == "none" {
			if other != "none" || warned {
				t.Errorf("idle: other processes %q, warned %v", other, warned)
			}
			continue
		}
		if other != "none" || warned || strings.Contains(out, "python3 used") {
			t.Errorf("training: the simulator's own process flagged as foreign: other processes %q, warned %v:\n%s", other, warned, out)
		}
	}
}

// A first Ctrl-C lets the current run finish and reports what was measured,
// marked partial (exit 130); a second stops at once, and the interrupted
// workload is never called a failed command. The workload sends the
// signals itself ($PPID is gpusampler), so nothing here depends on timing.
// Not parallel: SIGINT goes to the whole test process.
func TestBenchInterrupts(t *testing.T) {
	dir := t.TempDir()
	md, js := filepath.Join(dir, "r.md"), filepath.Join(dir, "r.json")
	code, out, errs := runCLI(t, "bench", "--backend", "sim", "--gpus", "1", "--baseline", "0", "--runs", "3", "--no-progress",
		"--export-markdown", md, "--export-json", js, "--", `kill -INT $PPID; sleep 0.3`)
	if code != 130 || !strings.Contains(out, "PARTIAL: interrupted after 1 of 3 measured runs") ||
		!strings.Contains(out, "\nPARTIAL: interrupted; the numbers below cover the completed runs only\nGPU 0 ") ||
		!strings.Contains(errs, "stopping after the current run") || strings.Contains(errs+out, "failed") {
		t.Fatalf("first Ctrl-C: exit %d\n%s\n%s", code, out, errs)
	}
	mdb, _ := os.ReadFile(md)
	jsb, _ := os.ReadFile(js)
	if !strings.Contains(string(mdb), "> **Partial**: interrupted; the numbers cover the completed runs only.") || !strings.Contains(string(jsb), `"partial": true`) {
		t.Fatalf("exports not marked partial:\n%s\n%.300s", mdb, jsb)
	}
	code, out, errs = runCLI(t, "bench", "--backend", "sim", "--gpus", "1", "--baseline", "0", "--runs", "3", "--no-progress",
		"--", `while :; do kill -INT $PPID; sleep 0.2; done`)
	if code != 130 || !strings.Contains(errs, "stopping now") || !strings.Contains(errs, "interrupted before any run completed") ||
		strings.Contains(errs+out, "failed") || strings.Contains(errs, "--ignore-failure") {
		t.Fatalf("second Ctrl-C: exit %d\n%s\n%s", code, out, errs)
	}
}

// A workload killed by a signal from outside (the out-of-memory killer, a
// kill) is said to be that, not a failed command; one whose shell reports
// a signalled child (exit status 128+N) is explained the same way.
func TestBenchSignalledWorkload(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ script, want string }{
		{`kill -KILL $$`, `command "kill -KILL $$" run 1 was killed by signal 9 (killed) from outside gpusampler, so it did not complete (exit status 137; --ignore-failure keeps going)`},
		{`sh -c 'kill -TERM $$'; exit $?`, `command "sh -c 'kill -TERM $$'; exit $?" run 1 ended with exit status 143, which a shell reports for a program killed by signal 15 (terminated) (--ignore-failure keeps going)`},
	} {
		code, out, errs := runCLI(t, "bench", "--backend", "sim", "--gpus", "1", "--baseline", "0s", "--runs", "2", "--no-progress", "--", tc.script)
		// (the shell may add its own "Terminated" under the stderr tail)
		if code != 1 || !strings.HasPrefix(errs, "gpusampler bench: "+tc.want+"\n") || strings.Contains(out+errs, "failed") {
			t.Errorf("%s: exit %d\nstderr %q\nwant   %q\n%s", tc.script, code, errs, "gpusampler bench: "+tc.want+"\n", out)
		}
	}
}
