package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childrenOf returns the pids of pid's child processes.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		for _, s := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(s); err == nil && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// The built-in network outputs of `run` share one child process, the
// binary re-executed as `gpusampler plugin serve`; a crash of that child
// does not take sampling down: the outputs come back in a new child and
// deliver again.
func TestRunNetworkOutputsShareOneChildIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gpusampler")
	}
	bin := buildGpusampler(t)
	var mu sync.Mutex
	writes := 0
	wrote := make(chan struct{}, 1)
	influx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/write" && strings.Contains(string(body), "nvidia_smi") {
			mu.Lock()
			writes++
			mu.Unlock()
			select {
			case wrote <- struct{}{}:
			default:
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer influx.Close()
	// Prometheus listens on a port of its own choosing, each child anew:
	// the test scrapes the address of the newest "Listening on" line.
	cfg := filepath.Join(t.TempDir(), "gpusampler.toml")
	doc := fmt.Sprintf("[sampler]\nbackend = \"sim\"\ngpus = 2\n"+
		"[[outputs.influxdb]]\nurl = %q\ndatabase = \"db\"\nflush_interval = \"100ms\"\n"+
		"[[outputs.prometheus]]\nlisten = \"127.0.0.1:0\"\n", influx.URL)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startE2E(t, exec.Command(bin, "run", "--config", cfg, "--log-level", "info"))
	pid := r.cmd.Process.Pid
	// waitWrites waits until the sink has taken more than n writes.
	waitWrites := func(n int) {
		t.Helper()
		for {
			mu.Lock()
			got := writes
			mu.Unlock()
			if got > n {
				return
			}
			select {
			case <-wrote:
			case <-r.done:
				r.fatalf("gpusampler ended")
			case <-time.After(5 * time.Minute):
				r.fatalf("no write for 5 minutes")
			}
		}
	}
	// oneChild waits until gpusampler has exactly one child, other than
	// old, and returns it after checking that it serves every kind.
	oneChild := func(old int) int {
		t.Helper()
		bound := time.After(5 * time.Minute) // liveness only
		for {
			if kids := childrenOf(t, pid); len(kids) == 1 && kids[0] != old {
				args, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", kids[0]))
				if parent, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); len(args) == 0 || string(args) == string(parent) {
					// Forked but not yet exec'd (its command line is
					// still its parent's), or already gone: look again.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if got := strings.Split(strings.TrimRight(string(args), "\x00"), "\x00"); !slices.Equal(got[1:], []string{"plugin", "serve"}) {
					t.Fatalf("child runs %q, want gpusampler plugin serve", got)
				}
				env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", kids[0]))
				if !slices.Contains(strings.Split(string(env), "\x00"), "GOGC="+outputsGOGC) {
					t.Fatalf("child's environment %q lacks GOGC=%s", env, outputsGOGC)
				}
				return kids[0]
			} else if len(kids) > 1 {
				t.Fatalf("gpusampler has %d children %v, want one for both network outputs", len(kids), kids)
			}
			select {
			case <-r.done:
				r.fatalf("gpusampler ended")
			case <-bound:
				r.fatalf("no single new child for 5 minutes")
			case <-time.After(10 * time.Millisecond): // polling /proc
			}
		}
	}
	// scrape waits until the newest prometheus listener serves the
	// device metrics.
	scrape := func() {
		t.Helper()
		r.poll("device metrics from the newest prometheus listener", func() bool {
			r.mu.Lock()
			addr := r.promAddr()
			r.mu.Unlock()
			if addr == "" {
				return false
			}
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				return false
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return strings.Contains(string(body), "DCGM_FI_DEV_POWER_USAGE")
		})
	}
	waitWrites(0)
	scrape()
	child := oneChild(0)
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	oneChild(child)
	mu.Lock()
	before := writes // the old child is gone: what comes now comes from the new one
	mu.Unlock()
	waitWrites(before)
	scrape()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("gpusampler after its outputs' process was killed: %v", err)
	}
}
