package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// A run with a plugin that cannot start (its binary does not match its
// sha256) beside stdout and prometheus: stdout keeps writing, --stats says
// the plugin has not started, and /healthz names it (503 with
// health_fail_on_outputs). With --strict the same config exits 1 at start.
func TestBrokenPluginDoesNotStopOtherOutputsIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: builds and runs the binary")
	}
	bin := buildGpusampler(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gpusampler.toml")
	doc := `[agent]
stats_interval = "200ms"
[sampler]
backend = "sim"
[[outputs.stdout]]
format = "influx"
[[outputs.plugin]]
name = "broken"
path = "` + bin + `"
sha256 = "` + strings.Repeat("0", 64) + `"
[[outputs.prometheus]]
listen = "127.0.0.1:0"
health_fail_on_outputs = true
`
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "run", "--config", cfg, "--stats", "--log-level", "info")
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var mu sync.Mutex
	var outLines, errLines []string
	read := func(r io.Reader, dst *[]string) {
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			mu.Lock()
			*dst = append(*dst, sc.Text())
			mu.Unlock()
		}
	}
	go read(stdout, &outLines)
	go read(stderr, &errLines)
	// waitFor polls cond (mu held) until it holds; it fails only on a hang.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("no %s within 5 minutes; stderr:\n%s", what, strings.Join(errLines, "\n"))
			}
			time.Sleep(20 * time.Millisecond) // polling the process's output, not timing it
		}
	}
	addrRE := regexp.MustCompile(`msg="Listening on" output=prometheus address=(127\.0\.0\.1:\d+)`)
	var addr string
	waitFor("prometheus address", func() bool {
		for _, l := range errLines {
			if m := addrRE.FindStringSubmatch(l); m != nil {
				addr = m[1]
				return true
			}
		}
		return false
	})
	notStarted := regexp.MustCompile(`^  output broken +NOT STARTED: \d+ failed start attempts; retrying with backoff \(the log says why\)$`)
	waitFor("--stats line naming the broken output", func() bool {
		for _, l := range errLines {
			if notStarted.MatchString(l) {
				return true
			}
		}
		return false
	})
	mu.Lock()
	n := len(outLines)
	mu.Unlock()
	waitFor("stdout lines", func() bool { return len(outLines) > n+100 })
	mu.Lock()
	for _, l := range outLines[n : n+100] {
		if !strings.Contains(l, "simulated=true") && !strings.HasPrefix(l, "gpusampler_self,") {
			t.Errorf("stdout line %q", l)
		}
	}
	mu.Unlock()

	healthRE := regexp.MustCompile(`^2 devices sampled within 10s, but outputs are failing:\noutput broken: not started, \d+ failed attempts\n$`)
	var body string
	var code int
	waitFor("/healthz naming the broken output", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body, code = string(b), resp.StatusCode
		return code == http.StatusServiceUnavailable && healthRE.MatchString(body)
	})

	mu.Lock()
	errText := strings.Join(errLines, "\n")
	mu.Unlock()
	if n := strings.Count(errText, "checksum mismatch"); n != 1 {
		t.Errorf("the failure was logged %d times, want once:\n%s", n, errText)
	}

	// --strict: exit 1 at start, naming the output.
	out, err := exec.Command(bin, "run", "--config", cfg, "--strict").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 ||
		!strings.Contains(string(out), "output broken: start plugin "+bin+": plugins: checksum mismatch") {
		t.Errorf("--strict: %v\n%s", err, out)
	}
}
