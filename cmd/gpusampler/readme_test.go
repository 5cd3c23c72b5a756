package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// The README's bench examples are copied by users: bench's own flags (--vs
// above all) must come before the "--" that starts the benchmarked command,
// or the command receives them.
func TestReadmeBenchExamplesPutFlagsBeforeCommand(t *testing.T) {
	own := map[string]bool{}
	for _, name := range []string{"vs", "runs", "warmup", "baseline", "export-json", "export-markdown",
		"export-csv", "export-svg", "fail-if-slower", "devices", "show-output", "ignore-failure"} {
		own["--"+name] = true
	}
	seen := 0
	for _, doc := range []string{"../../README.md", "../../bench/README.md"} {
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			i := strings.Index(line, "gpusampler bench ")
			if i < 0 || strings.HasPrefix(line[i:], "gpusampler bench compare") {
				continue
			}
			seen++
			args := strings.Fields(strings.SplitN(line[i:], "#", 2)[0])
			inCommand, quoted := false, false
			for _, a := range args {
				if a == "&&" || a == "|" || a == ";" {
					inCommand = false // the next command of a shell chain
					continue
				}
				if strings.Count(a, "'")%2 == 1 {
					quoted = !quoted
					continue
				}
				if quoted {
					continue
				}
				if a == "--" {
					inCommand = true
					continue
				}
				if name, _, _ := strings.Cut(a, "="); inCommand && own[name] {
					t.Errorf("%s:%d: %s comes after \"--\", so the benchmarked command receives it: %s",
						filepath.Base(doc), n, name, line)
				}
			}
		}
		f.Close()
	}
	if seen < 3 {
		t.Fatalf("found only %d bench examples: has the README moved?", seen)
	}
}

// readmeSkips are README commands that cannot run in a test here, each with
// the reason (and where the behaviour is tested instead). A README command
// that is neither run nor skipped fails the test: the docs and the tests
// move together.
var readmeSkips = []struct{ pattern, why string }{
	{`^make `, "make targets: CI runs them itself"},
	{`…|\[|CMD|PATH\b`, "a synopsis with placeholders"},
	{`\bsubscribe\b`, "needs a NATS server (subscribe_test.go runs one)"},
	{`--backend nvml`, "needs an NVIDIA driver (make gpu-check)"},
	{`python train\.py`, "needs the user's training script (flag order: TestReadmeBenchExamplesPutFlagsBeforeCommand)"},
	{`^/usr/bin/`, "a path inside a Telegraf config, not a command"},
}

// readmeCommands returns the gpusampler command lines of README.md: in
// shell code blocks, and in backticks in the prose.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	inBlock, shell := false, false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			shell = inBlock && (line == "```sh" || line == "```bash")
			continue
		}
		if inBlock {
			if shell {
				l := strings.TrimSpace(strings.SplitN(line, " # ", 2)[0])
				if strings.HasPrefix(l, "gpusampler ") || strings.HasPrefix(l, "bin/gpusampler ") || strings.Contains(l, " gpusampler ") {
					cmds = append(cmds, l)
				}
			}
			continue
		}
		for _, m := range regexp.MustCompile("`((?:bin/)?gpusampler [^`]+)`").FindAllStringSubmatch(line, -1) {
			if strings.Contains(m[1], " --") || strings.Count(m[1], " ") >= 2 {
				cmds = append(cmds, m[1])
			}
		}
	}
	return cmds
}

// splitWords splits a command line on blanks, keeping single-quoted words.
func splitWords(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, have := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, have = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

// Every README command that can run without a GPU runs, as written, on the
// simulator: exit 0, and `| grep X` finds X. Not parallel: it changes the
// working directory (commands name files relative to it).
func TestReadmeCommandsRun(t *testing.T) {
	dir := t.TempDir()
	example, err := os.ReadFile("../../config.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.example.toml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	cmds := readmeCommands(t)
	t.Chdir(dir)
	t.Setenv("GPUSAMPLER_NVML_LIBRARY", "")
	ran := 0
next:
	for _, line := range cmds {
		// An optional flag ("[--stats]") is run with the flag.
		line = regexp.MustCompile(`\[(--[a-z-]+)\]`).ReplaceAllString(line, "$1")
		for _, s := range readmeSkips {
			if regexp.MustCompile(s.pattern).MatchString(line) {
				t.Logf("skip %q: %s", line, s.why)
				continue next
			}
		}
		pipeline := strings.SplitN(line, " | ", 2)
		words := splitWords(pipeline[0])
		if why := cannotRunHere(words); why != "" {
			t.Logf("skip %q: %s", line, why)
			continue
		}
		redirect := ""
		if i := slices.Index(words, ">"); i >= 0 && i+1 < len(words) {
			redirect, words = words[i+1], words[:i]
		}
		args := words[1:]
		if args[0] == "run" && !slices.Contains(args, "--duration") {
			args = append(args, "--duration", "1s") // run runs until stopped
		}
		compare := len(args) > 1 && args[0] == "bench" && args[1] == "compare" // reads files, samples nothing
		if (args[0] == "run" || args[0] == "bench" || args[0] == "doctor" || args[0] == "metrics") && !compare {
			if !slices.Contains(args, "--backend") {
				args = append(args, "--backend", "sim") // this machine has no driver
			}
		}
		var out, errb bytes.Buffer
		code := Main(t.Context(), args, strings.NewReader(""), &out, &errb)
		if code != 0 {
			t.Errorf("README command %q: exit %d\n%s", line, code, errb.String())
			continue
		}
		if redirect != "" {
			if err := os.WriteFile(redirect, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if len(pipeline) == 2 {
			grep := strings.Trim(strings.TrimPrefix(pipeline[1], "grep "), `'"`)
			if !strings.Contains(out.String(), grep) {
				t.Errorf("README command %q: output has no %q", line, grep)
			}
		}
		ran++
	}
	if ran < 6 {
		t.Fatalf("ran only %d README commands", ran)
	}
}

// cannotRunHere says why a README command cannot run in this test's
// directory on this machine ("" when it can): `bench compare` of results
// an earlier README command did not save here (it benchmarked the user's
// own program), or taskset where it or CPU 1 is missing.
func cannotRunHere(words []string) string {
	if len(words) > 2 && words[1] == "bench" && words[2] == "compare" {
		for _, w := range words[3:] {
			if strings.HasSuffix(w, ".json") {
				if _, err := os.Stat(w); err != nil {
					return w + " was not saved by an earlier README command (TestBenchCompareSavedFiles compares saved results)"
				}
			}
		}
	}
	if i := slices.Index(words, "taskset"); i >= 0 {
		if _, err := exec.LookPath("taskset"); err != nil {
			return "taskset is not installed"
		}
		if i+2 < len(words) && words[i+1] == "-c" {
			// The simulator's two GPUs split the CPUs this process may use.
			src, err := sim.New(sim.Options{GPUs: 2})
			if err != nil {
				return err.Error()
			}
			devs, _ := src.Devices()
			var cpus [2][]int
			for d := range cpus {
				cpus[d], _ = devs[d].(sampler.CPUAffinityReporter).CPUAffinity()
			}
			cpu, err := strconv.Atoi(words[i+2])
			if err != nil {
				return "taskset -c " + words[i+2] + ": not one CPU number"
			}
			if slices.Equal(cpus[0], cpus[1]) {
				return "one CPU: every simulated GPU is close to it"
			}
			if !slices.Contains(cpus[0], cpu) && !slices.Contains(cpus[1], cpu) {
				return "CPU " + words[i+2] + " is not one this process may use"
			}
		}
	}
	return ""
}
