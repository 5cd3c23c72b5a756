//go:build linux && cgo

package main

import (
	"bufio"
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

// serviceHost runs gpusampler processes on one fake driver (all nine buffer
// types at 20 ms, 3000 deep: a 60 s history, so nothing is overwritten while
// the service is down) with one default state directory.
type serviceHost struct {
	t     *testing.T
	env   []string
	state string
	conf  string // the service's config: JSON lines on stdout
}

func newServiceHost(t *testing.T) *serviceHost {
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
	h := &serviceHost{t: t, state: filepath.Join(dir, "state"), conf: filepath.Join(dir, "service.toml")}
	os.WriteFile(h.conf, []byte("[[outputs.stdout]]\n  format = \"json\"\n"), 0o600)
	h.env = append(withoutEnv(os.Environ(), "STATE_DIRECTORY", "GPUSAMPLER_NVML_LIBRARY"), "GPUSAMPLER_TEST_MAIN=1",
		"STATE_DIRECTORY="+h.state, "GPUSAMPLER_NVML_LIBRARY="+lib, "FAKENVML_PERIOD_US=20000", "FAKENVML_DEPTH=3000")
	return h
}

// start starts `gpusampler run --backend nvml --log-level info args`.
func (h *serviceHost) start(args string, stdout, stderr *syncBuffer) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(slices.Clone(h.env), "GPUSAMPLER_TEST_ARGS=run --backend nvml --log-level info "+args)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	return cmd
}

// waitPower waits until out holds at least n power buffer samples.
func (h *serviceHost) waitPower(what string, out *syncBuffer, cmd *exec.Cmd) {
	h.waitPowerN(what, out, cmd, 1)
}

func (h *serviceHost) waitPowerN(what string, out *syncBuffer, cmd *exec.Cmd, n int) {
	deadline := time.Now().Add(2 * time.Minute) // a liveness bound only
	for len(powerTimes(h.t, []byte(out.String()))) < n {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			h.t.Fatalf("%s delivered fewer than %d power samples in 2 minutes", what, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The service and an operator's ad-hoc runs on one host, with the default
// state directory (STATE_DIRECTORY, as systemd sets it): the service's
// sinks get every driver sample exactly once across "service running →
// ad-hoc run with a config beside it → service stops → ad-hoc
// `run --format json` → service restarts". The ad-hoc run beside the
// service finds the state directory in use and says so, naming the
// service's PID; the one without a config never touches the state.
func TestStateDirOneOwnerIntegration(t *testing.T) {
	h := newServiceHost(t)
	start, waitPower, state := h.start, h.waitPower, h.state
	conf := h.conf
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
	dups, missing := gaps(ts)
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
	return bufferSeries(t, string(out))["power_draw"]
}

func lastPower(t *testing.T, out []byte) int64 {
	ts := powerTimes(t, out)
	if len(ts) == 0 {
		return 0
	}
	return slices.Max(ts)
}

// The service crashes (kill -9), an operator looks with `run --format
// json`, the service restarts: its sinks get every driver sample of every
// buffer type, none skipped. The saved cursors are the ones the output had
// taken, saved as soon as it has taken more, so only what it took between a
// write and the next save comes again: the duplicates are logged, not
// asserted (whether the kill falls in that instant is chance).
func TestStateDirCrashIntegration(t *testing.T) {
	h := newServiceHost(t)
	var svc1, svc1Err, look, lookErr, svc2, svc2Err syncBuffer
	s1 := h.start("--config "+h.conf, &svc1, &svc1Err)
	h.waitPowerN("the service", &svc1, s1, 3000+100) // its history, then 2 s live
	s1.Process.Signal(syscall.SIGKILL)
	s1.Wait()
	l := h.start("--format json --duration 1s", &look, &lookErr)
	if err := l.Wait(); err != nil {
		t.Fatalf("ad-hoc run without a config: %v\n%s", err, lookErr.String())
	}
	s2 := h.start("--config "+h.conf, &svc2, &svc2Err)
	lookLast := lastPower(t, []byte(look.String()))
	deadline := time.Now().Add(2 * time.Minute) // a liveness bound only
	for lastPower(t, []byte(svc2.String())) <= lookLast+int64(time.Second) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s2.Process.Signal(syscall.SIGTERM)
	if err := s2.Wait(); err != nil {
		t.Fatalf("restarted service: %v\n%s", err, svc2Err.String())
	}
	got := bufferSeries(t, svc1.String()+svc2.String())
	var n, dups, missing int64
	for metric, ts := range got {
		n += int64(len(ts))
		d, m := gaps(ts)
		if m != 0 {
			t.Errorf("%s: %d samples missing across the crash", metric, m)
		}
		dups += d
		missing += m
	}
	t.Logf("kill -9, look, restart: the service's sinks got %d buffer samples of %d series, %d missing, %d duplicated",
		n, len(got), missing, dups)
	if len(got) < 9 || n < 9*3000 {
		t.Errorf("%d buffer series, %d samples: want all nine types and their histories", len(got), n)
	}
}

// bufferSeries returns, per metric, the timestamps (ns) of the buffer
// samples (20 ms apart on the fake) in JSON lines; point reads left out.
func bufferSeries(t *testing.T, out string) map[string][]int64 {
	got := map[string][]int64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s struct {
			Type, Metric string
			Time         int64
			PointRead    bool `json:"point_read"`
		}
		if json.Unmarshal(sc.Bytes(), &s) != nil || s.Type != "sample" || s.PointRead || s.Time%20e6 != 0 {
			continue
		}
		got[s.Metric] = append(got[s.Metric], s.Time)
	}
	return got
}

// With the service down, an operator runs `gpusampler run --config` with
// outputs of its own and the same state directory: the run delivers the
// driver buffers' history to its outputs and keeps cursors of its own, so
// the restarted service still delivers, once, every sample its sinks did not
// get. A second such run resumes from its own cursors.
func TestStateDirOtherOutputsIntegration(t *testing.T) {
	h := newServiceHost(t)
	other := filepath.Join(filepath.Dir(h.conf), "look.toml")
	os.WriteFile(other, []byte("[[outputs.stdout]]\n  name = \"look\"\n  format = \"json\"\n"), 0o600)
	var svc1, svc1Err, look1, look1Err, look2, look2Err, svc2, svc2Err syncBuffer
	s1 := h.start("--config "+h.conf, &svc1, &svc1Err)
	h.waitPowerN("the service", &svc1, s1, 3000+50)
	if s1.Process.Signal(syscall.SIGTERM); s1.Wait() != nil {
		t.Fatalf("service: %s", svc1Err.String())
	}
	for _, l := range []struct{ out, err *syncBuffer }{{&look1, &look1Err}, {&look2, &look2Err}} {
		c := h.start("--config "+other+" --duration 1s", l.out, l.err)
		if err := c.Wait(); err != nil {
			t.Fatalf("ad-hoc run with outputs of its own: %v\n%s", err, l.err.String())
		}
	}
	s2 := h.start("--config "+h.conf, &svc2, &svc2Err)
	lookLast := lastPower(t, []byte(look2.String()))
	deadline := time.Now().Add(2 * time.Minute) // a liveness bound only
	for lastPower(t, []byte(svc2.String())) <= lookLast && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s2.Process.Signal(syscall.SIGTERM)
	if err := s2.Wait(); err != nil {
		t.Fatalf("restarted service: %v\n%s", err, svc2Err.String())
	}
	ts := append(powerTimes(t, []byte(svc1.String())), powerTimes(t, []byte(svc2.String()))...)
	dups, missing := gaps(ts)
	l1, l2 := powerTimes(t, []byte(look1.String())), powerTimes(t, []byte(look2.String()))
	l2dups, _ := gaps(append(slices.Clone(l1), l2...))
	t.Logf("service before and after two ad-hoc runs with other outputs: %d power samples, %d missing, %d duplicated; the ad-hoc runs delivered %d and %d (%d twice)",
		len(ts), missing, dups, len(l1), len(l2), l2dups)
	if dups != 0 || missing != 0 {
		t.Errorf("the service's sinks got %d power samples, %d missing, %d duplicated", len(ts), missing, dups)
	}
	if len(l1) < 3000 || len(l2) == 0 || l2dups != 0 {
		t.Errorf("the ad-hoc runs delivered %d and %d power samples, %d twice: want the history first, then the second from where the first stopped", len(l1), len(l2), l2dups)
	}
	if !strings.Contains(look1Err.String(), "other output sets") {
		t.Errorf("the ad-hoc run did not say it left the service's cursors alone:\n%s", look1Err.String())
	}
}

// gaps sorts ts (20 ms apart) and counts repeats and missing steps.
func gaps(ts []int64) (dups, missing int64) {
	slices.Sort(ts)
	for i := 1; i < len(ts); i++ {
		switch d := ts[i] - ts[i-1]; {
		case d == 0:
			dups++
		case d > 20e6:
			missing += d/20e6 - 1
		}
	}
	return dups, missing
}
