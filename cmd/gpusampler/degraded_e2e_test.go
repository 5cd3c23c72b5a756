package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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

	r := startE2E(t, exec.Command(bin, "run", "--config", cfg, "--stats", "--log-level", "info"))
	addr := r.waitPromAddr()
	notStarted := regexp.MustCompile(`^  output broken +NOT STARTED: \d+ failed start attempts; retrying with backoff \(the log says why\); \d+ samples published meanwhile never reach it$`)
	r.waitLine("--stats line naming the broken output", true, notStarted.MatchString)
	r.mu.Lock()
	n := len(r.stdout)
	r.mu.Unlock()
	r.waitFor("stdout lines", func() bool { return len(r.stdout) > n+100 })
	r.mu.Lock()
	for _, l := range r.stdout[n : n+100] {
		if !strings.Contains(l, "simulated=true") && !strings.HasPrefix(l, "gpusampler_self,") {
			t.Errorf("stdout line %q", l)
		}
	}
	r.mu.Unlock()

	healthRE := regexp.MustCompile(`^2 devices sampled within 10s, but outputs are failing:\noutput broken: not started, \d+ failed attempts\n$`)
	var body string
	var code int
	r.poll("/healthz naming the broken output", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body, code = string(b), resp.StatusCode
		return code == http.StatusServiceUnavailable && healthRE.MatchString(body)
	})

	r.mu.Lock()
	errText := strings.Join(r.stderr, "\n")
	r.mu.Unlock()
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
