package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A closed stdout (`gpusampler run | head -1`, head gone) ends a run whose
// only output writes to stdout, cleanly (exit 0), instead of retrying the
// write forever.
func TestClosedStdoutEndsStdoutOnlyRun(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	var stderr syncBuffer
	code := within(t, "run with a closed stdout", func() int {
		return Main(context.Background(), []string{"run", "--backend", "sim", "--gpus", "1", "--log-level", "info"},
			strings.NewReader(""), w, &stderr)
	})
	if code != 0 {
		t.Fatalf("exit %d, want 0; stderr: %s", code, stderr.String())
	}
	if n := strings.Count(stderr.String(), "stdout closed"); n != 1 {
		t.Errorf("stdout closed said %d times, want once; stderr: %s", n, stderr.String())
	}
}

// With another output beside stdout, a closed stdout (SIGPIPE on the real
// fd 1) ends only the stdout output: the run goes on delivering to the
// other output, and SIGTERM then ends it with exit 0.
func TestClosedStdoutEndsOnlyStdoutOutputIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gpusampler")
	}
	bin := buildGpusampler(t)
	var mu sync.Mutex
	writes := 0
	influx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/write" && strings.Contains(string(body), "nvidia_smi") {
			mu.Lock()
			writes++
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer influx.Close()
	cfg := filepath.Join(t.TempDir(), "gpusampler.toml")
	doc := fmt.Sprintf("[sampler]\nbackend = \"sim\"\ngpus = 1\n[[outputs.stdout]]\nformat = \"json\"\n"+
		"[[outputs.influxdb]]\nurl = %q\ndatabase = \"db\"\nflush_interval = \"100ms\"\n", influx.URL)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfg)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatalf("no first line: %v; stderr: %s", err, stderr.String())
	}
	stdout.Close() // head -1 is done
	count := func() int { mu.Lock(); defer mu.Unlock(); return writes }
	waitCond := func(what string, cond func() bool) {
		t.Helper()
		for bound := time.Now().Add(5 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
			select {
			case err := <-exited:
				t.Fatalf("gpusampler ended (%v) while waiting for %s; stderr: %s", err, what, stderr.String())
			default:
			}
			if time.Now().After(bound) {
				t.Fatalf("no %s after 5 minutes; stderr: %s", what, stderr.String())
			}
		}
	}
	waitCond("stdout closed warning", func() bool { return strings.Contains(stderr.String(), "stdout closed") })
	after := count()
	waitCond("influxdb write after stdout closed", func() bool { return count() > after })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr: %s", err, stderr.String())
		}
	case <-time.After(5 * time.Minute):
		t.Fatalf("still running 5 minutes after SIGTERM; stderr: %s", stderr.String())
	}
	if n := strings.Count(stderr.String(), "stdout closed"); n != 1 {
		t.Errorf("stdout closed said %d times, want once; stderr: %s", n, stderr.String())
	}
}
