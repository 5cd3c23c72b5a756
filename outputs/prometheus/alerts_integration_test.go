package prometheus

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
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

// alertFor is the `for` of every rule in the test's copy of
// deploy/alerts.yml: longer than the engine's rare_interval (30 s), so that
// a series that vanished for part of a 30-s cycle would reset the rule, and
// short enough for a test.
const alertFor = "40s"

// The shipped alerts fire against a real Prometheus scraping `gpusampler
// run --backend sim` with the default config on the simulator profile each
// is written for (deploy/alerts.yml, with `for` shortened to alertFor).
// Not covered: GPUPowerThrottling and GPUXidError (no profile throttles on
// power or raises XIDs), GPUStale and GPUSamplerNoDevices (no profile stops).
// GPUBusyButIdlePower compares the 1-s metrics with
// DCGM_FI_DEV_ENFORCED_POWER_LIMIT, read every rare_interval: it fires only
// if that series stays on every scrape.
func TestShippedAlertsFireIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs gpusampler and a Prometheus server")
	}
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not found (apt-get install prometheus): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "gpusampler")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/gpusampler")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // the simulator is all this test needs
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rules := shortenedRules(t)
	for _, tc := range []struct {
		profile string
		alerts  []string
	}{
		{"launch-bound", []string{"GPUBusyButIdlePower"}},
		{"memory-pressure", []string{"GPUMemoryNearFull"}},
		// GPUTemperatureOverSlowdown waits for the 5-minute mean to leave
		// the climb to the threshold behind (minutes).
		{"thermal", []string{"GPUTemperatureHigh", "GPUTemperatureOverSlowdown", "GPUThermalThrottling",
			"GPUMemoryTemperatureCritical", "GPUMemoryTemperatureHigh"}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			t.Parallel()
			bound := liveness(t)
			target := startSim(t, bin, tc.profile, bound)
			api := startPrometheus(t, promBin, target, rules, bound)
			waitFiring(t, api, tc.alerts, bound)
		})
	}
}

// liveness returns a channel closed at the test's liveness bound: 10
// minutes, or 30 s before the test binary's -timeout when that is sooner,
// so that a run that never gets there fails saying what it saw instead of
// panicking in the timeout.
func liveness(t *testing.T) <-chan time.Time {
	d := 10 * time.Minute
	if end, ok := t.Deadline(); ok {
		d = min(d, time.Until(end)-30*time.Second)
	}
	return time.After(d)
}

// shortenedRules writes deploy/alerts.yml with every `for` set to alertFor
// and returns its path.
func shortenedRules(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("deploy/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^(\s+for:\s*)\S+$`)
	if !re.Match(data) {
		t.Fatal("deploy/alerts.yml: no `for:` line to shorten")
	}
	path := filepath.Join(t.TempDir(), "alerts.yml")
	if err := os.WriteFile(path, re.ReplaceAll(data, []byte("${1}"+alertFor)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// logTail keeps a process's output for failure messages.
type logTail struct {
	mu    sync.Mutex
	lines []string
}

func (l *logTail) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if len(l.lines) > 40 {
		l.lines = l.lines[len(l.lines)-40:]
	}
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// start runs cmd until the test ends, its stderr lines sent to each line
// callback and kept for failure messages.
func start(t *testing.T, cmd *exec.Cmd, line func(string)) *logTail {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	tail := &logTail{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			tail.add(sc.Text())
			line(sc.Text())
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		cmd.Wait()
	})
	return tail
}

var listeningRe = regexp.MustCompile(`msg="Listening on" output=prometheus address=(\S+)`)

// startSim runs gpusampler on the simulator with the default config but a
// Prometheus output on a loopback port of its choosing, and returns that
// address.
func startSim(t *testing.T, bin, profile string, bound <-chan time.Time) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "gpusampler.toml")
	if err := os.WriteFile(cfg, []byte("[[outputs.prometheus]]\nlisten = \"127.0.0.1:0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	tail := start(t, exec.Command(bin, "run", "--backend", "sim", "--profile", profile, "--config", cfg, "--log-level", "info"), func(s string) {
		if m := listeningRe.FindStringSubmatch(s); m != nil {
			select {
			case addr <- m[1]:
			default:
			}
		}
	})
	select {
	case a := <-addr:
		return a
	case <-bound:
		t.Fatalf("gpusampler never listened:\n%s", tail)
	}
	return ""
}

// freePort returns a loopback address that was free a moment ago (for
// Prometheus, which does not report the port it took from :0).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startPrometheus runs a Prometheus server scraping target every second and
// evaluating rules every second, and returns its API base URL once it
// answers.
func startPrometheus(t *testing.T, promBin, target, rules string, bound <-chan time.Time) string {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	doc := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - %q\n"+
		"scrape_configs:\n  - job_name: gpusampler\n    static_configs:\n      - targets: [%q]\n", rules, target)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	tail := start(t, exec.Command(promBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr), func(string) {})
	api := "http://" + addr
	for {
		if resp, err := http.Get(api + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return api
			}
		}
		select {
		case <-bound:
			t.Fatalf("prometheus on %s never ready:\n%s", addr, tail)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitFiring polls Prometheus's alerts until every alert named is firing,
// and fails with what it saw when they do not within a generous liveness
// bound: how often each went pending, and the last states.
func waitFiring(t *testing.T, api string, names []string, bound <-chan time.Time) {
	t.Helper()
	pendings := map[string]int{}
	last := map[string]string{}
	for {
		states, err := alertStates(api)
		if err != nil {
			t.Logf("GET /api/v1/alerts: %v", err)
		}
		firing := 0
		for _, n := range names {
			s := states[n]
			if s == "pending" && last[n] != "pending" {
				pendings[n]++
			}
			last[n] = s
			if s == "firing" {
				firing++
			}
		}
		if firing == len(names) {
			t.Logf("firing: %v (times each went pending first: %v)", names, pendings)
			return
		}
		select {
		case <-bound:
			t.Fatalf("alerts %v not all firing; last states %v, times each went pending %v (for: %s)", names, last, pendings, alertFor)
		case <-time.After(time.Second):
		}
	}
}

// alertStates returns the state of every active alert by name (firing
// beats pending when devices differ).
func alertStates(api string) (map[string]string, error) {
	resp, err := http.Get(api + "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("decode alerts: %w", err)
	}
	out := map[string]string{}
	for _, a := range body.Data.Alerts {
		n := a.Labels["alertname"]
		if out[n] != "firing" {
			out[n] = a.State
		}
	}
	return out, nil
}
