package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/stream"
)

// e2eRun is a built gpusampler running with its stdout and stderr read
// into lines.
type e2eRun struct {
	t   *testing.T
	cmd *exec.Cmd

	mu       sync.Mutex
	json, lp []string // stdout lines of the json and the influx output
	logs     []string // stderr lines mentioning a reload
	stdout   []string // every stdout line
	stderr   []string // every stderr line
	progress chan struct{}
	done     chan struct{}
}

func buildGpusampler(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpusampler")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // the simulator is all this test needs
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startE2E starts cmd (a built gpusampler; its Stdin and Env as the caller
// set them) with its stdout and stderr read into lines; the process is
// killed when the test ends.
func startE2E(t *testing.T, cmd *exec.Cmd) *e2eRun {
	t.Helper()
	r := &e2eRun{t: t, cmd: cmd, progress: make(chan struct{}, 1), done: make(chan struct{})}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cmd.Process.Kill() })
	var wg sync.WaitGroup
	wg.Add(2)
	read := func(f *os.File, add func(string)) {
		defer wg.Done()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			r.mu.Lock()
			add(sc.Text())
			r.mu.Unlock()
			select {
			case r.progress <- struct{}{}:
			default:
			}
		}
	}
	go read(stdout.(*os.File), func(l string) {
		r.stdout = append(r.stdout, l)
		if strings.HasPrefix(l, "{") {
			r.json = append(r.json, l)
		} else {
			r.lp = append(r.lp, l)
		}
	})
	go read(stderr.(*os.File), func(l string) {
		r.stderr = append(r.stderr, l)
		if strings.Contains(l, "reload") {
			r.logs = append(r.logs, l)
		}
	})
	go func() { wg.Wait(); close(r.done) }()
	return r
}

// waitFor waits until cond (called with r.mu held) holds, checking it
// again on each new line of output. It fails if the process ends first, or
// if cond has not held after 5 minutes: a liveness bound, far above what
// the slowest machine needs, that ends a hang with gpusampler's latest
// stderr instead of the test binary's timeout.
func (r *e2eRun) waitFor(what string, cond func() bool) {
	r.t.Helper()
	bound := time.NewTimer(5 * time.Minute)
	defer bound.Stop()
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.progress:
		case <-r.done:
			r.fatalf("gpusampler ended while waiting for %s", what)
		case <-bound.C:
			r.fatalf("no %s after 5 minutes", what)
		}
	}
}

// poll calls cond (without r.mu) every 100 ms until it holds, for a
// condition outside gpusampler's output (an HTTP endpoint); the same
// liveness bound and end-of-process failure as waitFor.
func (r *e2eRun) poll(what string, cond func() bool) {
	r.t.Helper()
	bound := time.NewTimer(5 * time.Minute)
	defer bound.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-r.done:
			r.fatalf("gpusampler ended while waiting for %s", what)
		case <-bound.C:
			r.fatalf("no %s after 5 minutes", what)
		}
	}
}

// fatalf fails the test with msg and the last lines gpusampler wrote to
// stderr.
func (r *e2eRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.mu.Lock()
	lines := r.stderr[max(0, len(r.stderr)-60):]
	r.mu.Unlock()
	r.t.Fatalf(format+"; stderr ends:\n%s", append(args, strings.Join(lines, "\n"))...)
}

var listeningRE = regexp.MustCompile(`msg="Listening on" output=prometheus address=(127\.0\.0\.1:\d+)`)

// promAddr returns the address of the prometheus output's newest
// "Listening on" line ("" before the first). r.mu held.
func (r *e2eRun) promAddr() string {
	for _, l := range slices.Backward(r.stderr) {
		if m := listeningRE.FindStringSubmatch(l); m != nil {
			return m[1]
		}
	}
	return ""
}

// waitPromAddr waits for the prometheus output's first "Listening on" line
// and returns its address.
func (r *e2eRun) waitPromAddr() string {
	r.t.Helper()
	return listeningRE.FindStringSubmatch(r.waitLine("prometheus's listening address", true, listeningRE.MatchString))[1]
}

// waitLine waits for a line of gpusampler's stderr (or stdout) that match
// accepts and returns it. Each line is looked at once: gpusampler writes
// lines far faster than a loaded machine could rescan them all on each
// new one (a wait that rescanned every line fell behind for good).
func (r *e2eRun) waitLine(what string, stderr bool, match func(string) bool) string {
	r.t.Helper()
	return r.waitLines(what, stderr, 1, match)
}

// waitLines waits until n lines of stderr (or stdout) that match accepts
// have been written, looking at each line once, and returns the n-th.
func (r *e2eRun) waitLines(what string, stderr bool, n int, match func(string) bool) string {
	r.t.Helper()
	var next, seen int
	var last string
	r.waitFor(what, func() bool {
		lines := r.stdout
		if stderr {
			lines = r.stderr
		}
		for ; next < len(lines) && seen < n; next++ {
			if match(lines[next]) {
				seen, last = seen+1, lines[next]
			}
		}
		return seen >= n
	})
	return last
}

// exit waits until gpusampler, told to stop by the caller, has exited, and
// returns cmd.Wait's error. A process still running after 3 minutes (a
// liveness bound, not a timing) is sent SIGQUIT, which makes it print its
// goroutines, and the test fails with its stderr.
func (r *e2eRun) exit() error {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(3 * time.Minute):
		r.cmd.Process.Signal(syscall.SIGQUIT)
		<-r.done
		r.fatalf("gpusampler did not exit within 3 minutes")
	}
	return r.cmd.Wait()
}

// more waits for n more json lines (when json) and n more line-protocol
// lines.
func (r *e2eRun) more(n int, json bool) {
	r.t.Helper()
	r.mu.Lock()
	j, l := len(r.json), len(r.lp)
	r.mu.Unlock()
	if !json {
		j = -n
	}
	r.waitFor(fmt.Sprintf("%d more lines", n), func() bool { return len(r.json) >= j+n && len(r.lp) >= l+n })
}

// reload sends SIGHUP and waits for the reload's log line, returned.
func (r *e2eRun) reload() string {
	r.t.Helper()
	r.mu.Lock()
	n := len(r.logs)
	r.mu.Unlock()
	if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		r.t.Fatal(err)
	}
	var line string
	r.waitFor("the reload's log line", func() bool {
		for _, l := range r.logs[n:] {
			if strings.Contains(l, "config reloaded") || strings.Contains(l, "config reload refused") {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

type sampleKey struct {
	dev    uint16
	metric catalog.MetricID
	timeNS int64
}

func decodeSamples(t *testing.T, contentType string, lines []string) map[sampleKey]int {
	t.Helper()
	h := nats.Header{}
	h.Set(stream.HeaderContentType, contentType)
	h.Set(stream.HeaderSchema, fmt.Sprint(stream.SchemaVersion))
	recs, err := stream.Decode(h, []byte(strings.Join(lines, "\n")+"\n"))
	if err != nil {
		t.Fatalf("decode %s: %v", contentType, err)
	}
	got := map[sampleKey]int{}
	for _, s := range recs.Batch.Samples {
		if s.Metric == catalog.MetricPState {
			continue // a tag in line protocol, not a sample
		}
		got[sampleKey{s.Device, s.Metric, s.TimeNS}]++
	}
	return got
}

// TestSIGHUPReloadIntegration runs the built binary with two outputs on
// stdout — "twin" (influx), never changed, and "main" (json), changed by a
// reload — and sends SIGHUP with an unchanged, a changed, a broken and a
// [sampler]-changing config. Output goes on throughout, the --host flag
// holds across reloads, and main's samples equal twin's, each exactly once.
func TestSIGHUPReloadIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildGpusampler(t)
	cfgPath := filepath.Join(t.TempDir(), "gpusampler.toml")
	writeCfg := func(mainFlush, extra string) {
		t.Helper()
		doc := fmt.Sprintf(`[agent]
stats_interval = "1h"
[sampler]
backend = "sim"
%s
[[outputs.stdout]]
name = "twin"
format = "influx"
[[outputs.stdout]]
name = "main"
format = "json"
flush_interval = %q
`, extra, mainFlush)
		if err := os.WriteFile(cfgPath, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg("200ms", "gpus = 2")
	r := startE2E(t, exec.Command(bin, "run", "--config", cfgPath, "--log-level", "info", "--host", "e2e-host"))
	r.more(100, true)

	steps := []struct {
		name, flush, extra, want string
	}{
		{"unchanged", "200ms", "gpus = 2", "kept=2 replaced_or_added=0"},
		{"changed", "50ms", "gpus = 2", "kept=1 replaced_or_added=1"},
		{"broken", "50ms", "gpus = ", "config reload refused"},
		{"sampler changed", "50ms", "gpus = 3", "[sampler] gpus changed"},
	}
	for _, st := range steps {
		writeCfg(st.flush, st.extra)
		line := r.reload()
		t.Logf("%s: %s", st.name, line)
		if !strings.Contains(line, st.want) {
			t.Errorf("reload %s: log %q, want %q", st.name, line, st.want)
		}
		r.more(100, true)
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := r.exit(); err != nil {
		t.Fatalf("exit: %v", err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.json {
		if strings.Contains(l, `"type":"sample"`) && !strings.Contains(l, `"host":"e2e-host"`) {
			t.Fatalf("json line without the --host value: %s", l)
		}
	}
	for _, l := range r.lp {
		if !strings.Contains(l, "host=e2e-host") {
			t.Fatalf("line protocol without the --host value: %s", l)
		}
	}
	main, twin := decodeSamples(t, stream.ContentTypeJSON, r.json), decodeSamples(t, stream.ContentTypeLineProtocol, r.lp)
	dups, missing, extra := 0, 0, 0
	for k, n := range main {
		if n != 1 {
			dups++
		}
		if twin[k] == 0 {
			extra++
		}
	}
	for k, n := range twin {
		if n != 1 {
			dups++
		}
		if main[k] == 0 {
			missing++
		}
	}
	t.Logf("main (json, replaced once): %d samples in %d lines; twin (influx, kept): %d samples in %d lines",
		len(main), len(r.json), len(twin), len(r.lp))
	if dups != 0 || missing != 0 || extra != 0 || len(main) == 0 {
		t.Errorf("main vs twin: %d duplicated, %d missing from main, %d only in main (of %d)", dups, missing, extra, len(twin))
	}
}

// With --execd stream and --host, a reload keeps the execd output (the
// flags are applied to the reloaded config as at start): Telegraf keeps
// hearing the process, with the same host.
func TestSIGHUPKeepsExecdIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildGpusampler(t)
	cfgPath := filepath.Join(t.TempDir(), "gpusampler.toml")
	if err := os.WriteFile(cfgPath, []byte("[agent]\nstats_interval = \"1h\"\n[sampler]\nbackend = \"sim\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdin, stdinW, err := os.Pipe() // Telegraf's end stays open: EOF would end the run
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--execd", "stream", "--host", "e2e-host",
		"--drain-interval", "300ms", "--log-level", "info")
	cmd.Stdin = stdin
	r := startE2E(t, cmd)
	stdin.Close()
	r.more(50, false)
	line := r.reload()
	t.Logf("reload: %s", line)
	if !strings.Contains(line, "kept=1 replaced_or_added=0") {
		t.Errorf("reload log %q, want the execd output kept", line)
	}
	r.mu.Lock()
	before := len(r.lp)
	r.mu.Unlock()
	r.more(200, false)
	stdinW.Close() // Telegraf stops us
	if err := r.exit(); err != nil {
		t.Fatalf("exit: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lp[before:] {
		if !strings.Contains(l, "host=e2e-host") {
			t.Fatalf("after the reload, a line without the --host value: %s", l)
		}
	}
	t.Logf("%d lines before the reload, %d after", before, len(r.lp)-before)
}
