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

// readmeDocs returns the docs whose commands TestReadmeCommandsRun runs,
// relative to the repository root, by a rule rather than a list so that a
// new output's README is picked up without editing this test: README.md,
// every outputs/*/README.md, every README.md under telegraf/ (the Telegraf
// module's docs) and every Markdown file under deploy/.
func readmeDocs(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md"}
	outputs, err := filepath.Glob("../../outputs/*/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range outputs {
		docs = append(docs, strings.TrimPrefix(filepath.ToSlash(f), "../../"))
	}
	for _, tree := range []struct{ dir, name string }{{"telegraf", "README.md"}, {"deploy", "*.md"}} {
		err := filepath.WalkDir(filepath.Join("../..", tree.dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ok, _ := filepath.Match(tree.name, d.Name()); ok && !d.IsDir() {
				docs = append(docs, strings.TrimPrefix(filepath.ToSlash(path), "../../"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(outputs) < 5 || !slices.Contains(docs, "deploy/README.md") {
		t.Fatalf("docs %v: has the layout moved?", docs)
	}
	return docs
}

// readmeCommand is one command line of a doc: where it is, and what it says.
type readmeCommand struct {
	where string // file:line, the file relative to the repository root
	line  string
	stdin string // what the command reads (a Telegraf execd command: one gather request)
}

// readmeSkips are doc commands that cannot run in a test here, each with the
// reason (and where the behaviour is tested instead). A command that is
// neither run nor skipped fails the test, and so does a skip that matches
// no command any more: the docs and the tests move together.
var readmeSkips = []struct{ pattern, why string }{
	{`^make `, "make targets: CI runs them itself"},
	{`…|\[|\b(CMD|ARGS|PATH|FILE|DIR|NAME)\b|[a-z]\|[a-z]`, "a synopsis with placeholders or alternatives"},
	{`\bsubscribe\b`, "needs a NATS server (subscribe_test.go runs one)"},
	{`--backend nvml`, "needs an NVIDIA driver (make gpu-check)"},
	{`python train\.py`, "needs the user's training script (flag order: TestReadmeBenchExamplesPutFlagsBeforeCommand)"},
	{`^sudo `, "changes this machine as root (test/deploy verifies the systemd unit and the deploy configs)"},
	{`^journalctl `, "reads a running service's journal"},
	{`^docker `, "needs Docker (test/deploy checks the container's config)"},
	{`^kubectl `, "needs a Kubernetes cluster (test/deploy decodes the manifests strictly)"},
	{`^deploy/systemd/verify\.sh`, "verifies the unit with a gpusampler binary in bin/ (test/deploy's TestSystemdUnitVerifies runs the script)"},
	{`^curl .*localhost:9400`, "needs the service or container that the commands before it start (prometheus tests scrape the endpoint)"},
}

// readmeShell are the programs besides gpusampler whose doc commands the
// test runs with sh, in its working directory.
var readmeShell = []string{"printf", "echo", "cat", "grep", "test"}

// readmeCommands returns the command lines of the docs, by one rule:
//   - every line of a fenced block labelled sh, bash, shell or console (a
//     "$ " prompt and a " # " comment removed; a line that starts with a
//     blank, or follows one ending in "\", continues the command before);
//   - in prose, a backquoted "gpusampler ..." or "bin/gpusampler ..." with a
//     flag or at least two arguments;
//   - in a toml block, a Telegraf execd command whose program is gpusampler
//     (command = ["/usr/bin/gpusampler", "run", ...]).
func readmeCommands(t *testing.T, root string, docs []string) []readmeCommand {
	t.Helper()
	prose := regexp.MustCompile("`((?:bin/)?gpusampler [^`]+)`")
	execd := regexp.MustCompile(`^\s*command\s*=\s*\[(.*)\]`)
	var cmds []readmeCommand
	for _, doc := range docs {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		inBlock, lang, joining := false, "", false
		for n, line := range strings.Split(string(b), "\n") {
			where := doc + ":" + strconv.Itoa(n+1)
			if strings.HasPrefix(line, "```") {
				inBlock = !inBlock
				lang, _, _ = strings.Cut(strings.TrimPrefix(line, "```"), " ")
				joining = false
				continue
			}
			switch {
			case inBlock && (lang == "sh" || lang == "bash" || lang == "shell" || lang == "console"):
				l := strings.TrimPrefix(line, "$ ")
				if i := strings.Index(l, " # "); i >= 0 {
					l = l[:i]
				}
				cont := joining || (l != "" && (l[0] == ' ' || l[0] == '\t'))
				l = strings.TrimSpace(l)
				joining = strings.HasSuffix(l, "\\")
				l = strings.TrimSpace(strings.TrimSuffix(l, "\\"))
				switch {
				case l == "" || strings.HasPrefix(l, "#"):
				case cont && len(cmds) > 0:
					cmds[len(cmds)-1].line += " " + l
				default:
					cmds = append(cmds, readmeCommand{where: where, line: l})
				}
			case inBlock && lang == "toml":
				m := execd.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				var words []string
				for _, w := range strings.Split(m[1], ",") {
					words = append(words, strings.Trim(strings.TrimSpace(w), `"`))
				}
				if filepath.Base(words[0]) == "gpusampler" {
					cmds = append(cmds, readmeCommand{where: where, line: strings.Join(words, " "), stdin: "\n"})
				}
			case !inBlock:
				for _, m := range prose.FindAllStringSubmatch(line, -1) {
					if strings.Contains(m[1], " --") || strings.Count(m[1], " ") >= 2 {
						cmds = append(cmds, readmeCommand{where: where, line: m[1]})
					}
				}
			}
		}
	}
	return cmds
}

// The extraction rule, pinned on a doc that has each kind of command and
// each kind of text that is not one.
func TestReadmeCommandsRule(t *testing.T) {
	dir := t.TempDir()
	doc := "Run `gpusampler run --stats` or `gpusampler version`, not `gpusampler`.\n" +
		"```sh\n" +
		"$ gpusampler config --check a.toml   # check it\n" +
		"# a comment line\n" +
		"gpusampler run --config a.toml \\\n" +
		"  --stats\n" +
		"gpusampler run [--x]\n" +
		"               [--y]\n" +
		"```\n" +
		"```\n" +
		"gpusampler stats: output of a command, not a command\n" +
		"```\n" +
		"```toml\n" +
		"[[inputs.execd]]\n" +
		"  command = [\"/usr/bin/gpusampler\", \"run\", \"--execd\", \"gather\"]\n" +
		"  command = [\"/usr/bin/other\"]\n" +
		"```\n"
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	got := readmeCommands(t, dir, []string{"README.md"})
	want := []readmeCommand{
		{"README.md:1", "gpusampler run --stats", ""},
		{"README.md:3", "gpusampler config --check a.toml", ""},
		{"README.md:5", "gpusampler run --config a.toml --stats", ""},
		{"README.md:7", "gpusampler run [--x] [--y]", ""},
		{"README.md:15", "/usr/bin/gpusampler run --execd gather", "\n"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("commands:\n got %q\nwant %q", got, want)
	}
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

// isGpusampler says whether word names the gpusampler program: as on PATH,
// as make builds it, or installed (/usr/bin/gpusampler in a Telegraf config).
func isGpusampler(word string) bool {
	return word == "gpusampler" || word == "bin/gpusampler" || word == "./bin/gpusampler" ||
		strings.HasPrefix(word, "/") && filepath.Base(word) == "gpusampler"
}

// Every command of the docs (readmeDocs, readmeCommands) that can run
// without a GPU runs, as written, on the simulator: exit 0, and `| grep X`
// finds X. Each command is a subtest named by its file and line; one that
// cannot run here is skipped with the reason (go test -v lists them). Not
// parallel: it changes the working directory (commands name files relative
// to it).
func TestReadmeCommandsRun(t *testing.T) {
	dir := t.TempDir()
	example, err := os.ReadFile("../../config.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.example.toml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	// The deploy docs check the shipped configs by their paths in the
	// repository (deploy/systemd/gpusampler.toml).
	deploy, err := filepath.Abs("../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(deploy, filepath.Join(dir, "deploy")); err != nil {
		t.Fatal(err)
	}
	cmds := readmeCommands(t, "../..", readmeDocs(t))
	t.Chdir(dir)
	t.Setenv("GPUSAMPLER_NVML_LIBRARY", "")
	ran := 0
	skipUsed := make([]bool, len(readmeSkips))
	for _, c := range cmds {
		// An optional flag ("[--stats]") is run with the flag.
		line := regexp.MustCompile(`\[(--[a-z-]+)\]`).ReplaceAllString(c.line, "$1")
		why := ""
		for i, s := range readmeSkips {
			if regexp.MustCompile(s.pattern).MatchString(line) {
				why, skipUsed[i] = s.why, true
				break
			}
		}
		pipeline := strings.SplitN(line, " | ", 2)
		words := splitWords(pipeline[0])
		for len(words) > 1 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
			words = words[1:] // VAR=value before the program
		}
		if why == "" {
			why = cannotRunHere(words)
		}
		t.Run(c.where, func(t *testing.T) {
			if why != "" {
				t.Skipf("%q: %s", c.line, why)
			}
			switch {
			case isGpusampler(words[0]):
				runReadmeGpusampler(t, c, words, pipeline)
			case slices.Contains(readmeShell, words[0]):
				cmd := exec.Command("sh", "-c", line)
				cmd.Stdin = strings.NewReader(c.stdin)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s: %q: %v\n%s", c.where, c.line, err, out)
				}
			default:
				t.Errorf("%s: %q is neither run nor skipped: run it (readmeShell) or add the reason it cannot run here to readmeSkips", c.where, c.line)
			}
		})
		if why == "" {
			ran++
		}
	}
	for i, used := range skipUsed {
		if !used {
			t.Errorf("readmeSkips %q (%s) matches no doc command: remove it", readmeSkips[i].pattern, readmeSkips[i].why)
		}
	}
	if ran < 8 {
		t.Fatalf("ran only %d doc commands", ran)
	}
}

// runReadmeGpusampler runs a doc's gpusampler command in process: run gets
// --duration 1s unless it has one, the commands that sample get --backend
// sim unless they name a backend, "> FILE" is written, and "| grep X" must
// find X.
func runReadmeGpusampler(t *testing.T, c readmeCommand, words, pipeline []string) {
	redirect := ""
	if i := slices.Index(words, ">"); i >= 0 && i+1 < len(words) {
		redirect, words = words[i+1], words[:i]
	}
	args := slices.Clone(words[1:])
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
	code := Main(t.Context(), args, strings.NewReader(c.stdin), &out, &errb)
	if code != 0 {
		t.Fatalf("%s: %q: exit %d\n%s", c.where, c.line, code, errb.String())
	}
	if redirect != "" {
		if err := os.WriteFile(redirect, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(pipeline) == 2 {
		grep := strings.Trim(strings.TrimPrefix(pipeline[1], "grep "), `'"`)
		if !strings.Contains(out.String(), grep) {
			t.Errorf("%s: %q: output has no %q", c.where, c.line, grep)
		}
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
