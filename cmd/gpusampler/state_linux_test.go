//go:build linux && cgo

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The service and an operator's ad-hoc runs on one host, with the default
// state directory (STATE_DIRECTORY, as systemd sets it): the service's
// sinks get every driver sample exactly once across "service running →
// ad-hoc run with a config beside it → service stops → ad-hoc
// `run --format json` → service restarts". The ad-hoc run beside the
// service finds the state directory in use and says so, naming the
// service's PID; the one without a config never touches the state.
func TestStateDirOneOwnerIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpusampler on the fake driver for several seconds (-short)")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: ", err)
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnvidia-ml.so.1")
	if b, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-o", lib, "../../sampler/nvml/testdata/fakenvml.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc fakenvml.c: %v\n%s", err, b)
	}
	state := filepath.Join(dir, "state")
	conf := filepath.Join(dir, "service.toml")
	os.WriteFile(conf, []byte("[[outputs.stdout]]\n  format = \"json\"\n"), 0o600)
	// A 60 s power buffer (20 ms × 3000): nothing is overwritten while
	// the service is down, so every sample can reach it.
	env := append(withoutEnv(os.Environ(), "STATE_DIRECTORY", "GPUSAMPLER_NVML_LIBRARY"), "GPUSAMPLER_TEST_MAIN=1",
		"STATE_DIRECTORY="+state, "GPUSAMPLER_NVML_LIBRARY="+lib, "FAKENVML_PERIOD_US=20000", "FAKENVML_DEPTH=3000")
	start := func(args string, stdout, stderr *syncBuffer) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(slices.Clone(env), "GPUSAMPLER_TEST_ARGS=run --backend nvml --log-level info "+args)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	waitPower := func(what string, out *syncBuffer, cmd *exec.Cmd) {
		deadline := time.Now().Add(2 * time.Minute) // a liveness bound only
		for !strings.Contains(out.String(), `"metric":"power_draw"`) {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("%s delivered no power sample in 2 minutes", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var svc1, svc1Err, beside, besideErr, look, lookErr, svc2, svc2Err syncBuffer
	s1 := start("--config "+conf, &svc1, &svc1Err)
	waitPower("the service", &svc1, s1)
	b := start("--config "+conf+" --duration 1s", &beside, &besideErr)
	if err := b.Wait(); err != nil {
		t.Fatalf("ad-hoc run beside the service: %v\n%s", err, besideErr.String())
	}
	if s1.Process.Signal(syscall.SIGTERM); s1.Wait() != nil {
		t.Fatalf("service: %s", svc1Err.String())
	}
	l := start("--format json --duration 1s", &look, &lookErr)
	if err := l.Wait(); err != nil {
		t.Fatalf("ad-hoc run without a config: %v\n%s", err, lookErr.String())
	}
	s2 := start("--config "+conf, &svc2, &svc2Err)
	waitPower("the restarted service", &svc2, s2)
	// Until the restarted service has delivered past the ad-hoc runs.
	lookLast := lastPower(t, []byte(look.String()))
	deadline := time.Now().Add(2 * time.Minute)
	for lastPower(t, []byte(svc2.String())) <= lookLast && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s2.Process.Signal(syscall.SIGTERM)
	if err := s2.Wait(); err != nil {
		t.Fatalf("restarted service: %v\n%s", err, svc2Err.String())
	}

	inUse := "state dir in use by another gpusampler process"
	if n := strings.Count(besideErr.String(), inUse); n != 1 || !strings.Contains(besideErr.String(), "pid="+strconv.Itoa(s1.Process.Pid)) {
		t.Errorf("the run beside the service said %d times that the state dir is in use (want once, with pid=%d):\n%s", n, s1.Process.Pid, besideErr.String())
	}
	if strings.Contains(lookErr.String(), inUse) || strings.Contains(lookErr.String(), "drain cursors restored") {
		t.Errorf("the run without a config used the state dir:\n%s", lookErr.String())
	}
	// The service's sinks: every power sample from its first to its last,
	// once, across its restart.
	ts := append(powerTimes(t, []byte(svc1.String())), powerTimes(t, []byte(svc2.String()))...)
	slices.Sort(ts)
	var dups, missing int64
	for i := 1; i < len(ts); i++ {
		switch d := ts[i] - ts[i-1]; {
		case d == 0:
			dups++
		case d > 20e6:
			missing += d/20e6 - 1
		}
	}
	t.Logf("service before and after the ad-hoc runs: %d power samples, %d missing, %d duplicated; the ad-hoc runs delivered %d and %d",
		len(ts), missing, dups, len(powerTimes(t, []byte(beside.String()))), len(powerTimes(t, []byte(look.String()))))
	if dups != 0 || missing != 0 || len(ts) < 100 {
		t.Errorf("the service's sinks got %d power samples, %d missing, %d duplicated", len(ts), missing, dups)
	}
	if lookLast <= 0 || len(powerTimes(t, []byte(beside.String()))) == 0 {
		t.Errorf("the ad-hoc runs delivered nothing")
	}
	// A Telegraf execd program without a config is restarted by Telegraf:
	// it keeps cursors, in a state directory of its own, not the
	// service's.
	var execdOut, execdErr syncBuffer
	e := start("--execd stream", &execdOut, &execdErr)
	if err := e.Wait(); err != nil { // stdin is empty: EOF ends it
		t.Fatalf("execd: %v\n%s", err, execdErr.String())
	}
	if _, err := os.Stat(filepath.Join(state, "execd", "gpusampler.lock")); err != nil {
		t.Errorf("the execd run kept no state of its own: %v\n%s", err, execdErr.String())
	}
}

// powerTimes returns the timestamps (ns) of the power_draw buffer samples
// in JSON lines, point reads left out.
func powerTimes(t *testing.T, out []byte) []int64 {
	var ts []int64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s struct {
			Type, Metric string
			Time         int64
			PointRead    bool `json:"point_read"`
		}
		if json.Unmarshal(sc.Bytes(), &s) != nil || s.Type != "sample" || s.Metric != "power_draw" || s.PointRead || s.Time%20e6 != 0 {
			continue
		}
		ts = append(ts, s.Time)
	}
	return ts
}

func lastPower(t *testing.T, out []byte) int64 {
	ts := powerTimes(t, out)
	if len(ts) == 0 {
		return 0
	}
	return slices.Max(ts)
}
