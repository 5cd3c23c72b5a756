package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// With a stdout reader that never reads, SIGTERM and SIGINT still end the
// process: the final flush has a deadline ([agent] shutdown_timeout), and
// what could not be flushed is counted and reported.
func TestShutdownWithStalledReader(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gpusampler.toml")
	doc := "[agent]\nshutdown_timeout = \"1s\"\n[sampler]\nbackend = \"sim\"\n[[outputs.stdout]]\nformat = \"json\"\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close() // open to the end, never read: the writer blocks
			// a small pipe fills fast; the size is only an optimisation
			size, err := unix.FcntlInt(r.Fd(), unix.F_SETPIPE_SZ, 4096)
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "GPUSAMPLER_TEST_MAIN=1", "GPUSAMPLER_TEST_ARGS=run --stats --config "+cfg)
			cmd.Stdout, cmd.Stderr = w, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			// Wait until gpusampler is blocked writing: a thread of it
			// sleeps in write(2) on fd 1 and the pipe holds data. A full
			// pipe is not the test: a write of at most PIPE_BUF bytes is
			// atomic, so the writer blocks with the pipe only partly full.
			liveness := time.Now().Add(5 * time.Minute)
			n := 0
			for blocked := false; !blocked; {
				select {
				case err := <-exited:
					t.Fatalf("exited before it blocked writing: %v\n%s", err, stderr.String())
				case <-time.After(10 * time.Millisecond): // polling /proc
				}
				if n, err = unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ); err != nil {
					t.Fatal(err)
				}
				writing, states := sleepsInWrite(cmd.Process.Pid, 1)
				blocked = writing && n > 0
				if !blocked && time.Now().After(liveness) {
					cmd.Process.Kill()
					<-exited
					t.Fatalf("not blocked writing to the stalled pipe after 5 minutes (%d bytes in the pipe; threads' syscalls %q)\n%s",
						n, states, stderr.String())
				}
			}
			t.Logf("blocked writing with %d of %d bytes in the pipe", n, size)
			err = signalWait(t, cmd, exited, sig, &stderr)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1 (output not flushed)\n%s", err, stderr.String())
			}
			m := regexp.MustCompile(`output stdout: not flushed within the 1s shutdown timeout \(its sink or reader stopped taking data\): (\d+) samples not delivered`).FindStringSubmatch(stderr.String())
			if m == nil {
				t.Fatalf("stderr does not report the unflushed output:\n%s", stderr.String())
			}
			n, _ = strconv.Atoi(m[1])
			if n == 0 {
				t.Fatalf("0 samples reported unflushed:\n%s", stderr.String())
			}
			// the final stats line counts them: published = delivered +
			// dropped + filtered + failed
			f := regexp.MustCompile(`gpusampler final stats:\n  output stdout +published (\d+) delivered (\d+) dropped (\d+) filtered (\d+) failed (\d+) `).FindStringSubmatch(stderr.String())
			if f == nil {
				t.Fatalf("no final stats line:\n%s", stderr.String())
			}
			var c [5]int
			for i := range c {
				c[i], _ = strconv.Atoi(f[i+1])
			}
			if c[0] != c[1]+c[2]+c[3]+c[4] || c[4] < n {
				t.Fatalf("final stats %v do not reconcile or miss the %d unflushed:\n%s", c, n, stderr.String())
			}
			t.Logf("%v: exit 1; %d samples counted unflushed; final stats published %d delivered %d dropped %d filtered %d failed %d",
				sig, n, c[0], c[1], c[2], c[3], c[4])
		})
	}
}

// signalWait sends sig to cmd and returns its exit (from exited), failing
// the test if it still runs 60 s later.
func signalWait(t *testing.T, cmd *exec.Cmd, exited <-chan error, sig syscall.Signal, stderr *bytes.Buffer) error {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		return err
	case <-time.After(60 * time.Second): // a failure guard, not a timing check
		cmd.Process.Kill()
		<-exited
		t.Fatalf("still running 60s after %v\n%s", sig, stderr.String())
	}
	return nil
}

// sleepsInWrite reports whether a thread of process pid sleeps in write(2)
// on file descriptor fd, from /proc/PID/task/*/syscall (a thread that runs
// reads "running" there), and returns each thread's line for a failure
// message.
func sleepsInWrite(pid, fd int) (bool, []string) {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	var states []string
	writing := false
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		line := strings.TrimSpace(string(b))
		states = append(states, line)
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != strconv.Itoa(unix.SYS_WRITE) {
			continue
		}
		if arg, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64); err == nil && arg == uint64(fd) {
			writing = true
		}
	}
	return writing, states
}

// A black-holed sink at stop (an InfluxDB that accepts the connection and
// never answers) beside a healthy output: the stop ends within the
// shutdown timeout's reach, the black-holed output's undelivered samples
// are counted failed in a clear final line, the healthy output delivers
// everything, and the exit status is 1 (the shutdown timeout was hit).
func TestShutdownBlackHoledSinkIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gpusampler")
	}
	bin := buildGpusampler(t) // the network outputs run in the binary re-executed
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	requests := make(chan struct{}, 1)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
			go func() {
				buf := make([]byte, 4096)
				if n, _ := c.Read(buf); n > 0 && bytes.Contains(buf[:n], []byte("/write")) {
					select {
					case requests <- struct{}{}:
					default:
					}
				}
			}()
		}
	}()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gpusampler.toml")
	doc := "[agent]\nshutdown_timeout = \"1s\"\n[sampler]\nbackend = \"sim\"\n" +
		"[[outputs.influxdb]]\nname = \"blackhole\"\nurl = \"http://" + lis.Addr().String() + "\"\ndatabase = \"gpu\"\nskip_database_creation = true\n" +
		"[[outputs.stdout]]\nformat = \"json\"\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "run", "--stats", "--config", cfg)
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-requests: // a write is in the black hole
	case err := <-exited:
		t.Fatalf("exited before writing to the sink: %v\n%s", err, stderr.String())
	case <-time.After(5 * time.Minute): // a failure guard, not a timing check
		cmd.Process.Kill()
		<-exited
		t.Fatalf("no write reached the sink in 5 minutes\n%s", stderr.String())
	}
	err = signalWait(t, cmd, exited, syscall.SIGTERM, &stderr)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want status 1 (the shutdown timeout was hit)\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`output blackhole: not flushed within the 1s shutdown timeout \(its sink or reader stopped taking data\): (\d+) samples not delivered`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("stderr does not name the black-holed output:\n%s", stderr.String())
	}
	unflushed, _ := strconv.Atoi(m[1])
	if strings.Contains(stderr.String(), "output stdout: not flushed") {
		t.Fatalf("the healthy output is reported not flushed:\n%s", stderr.String())
	}
	line := func(name string) [5]int {
		f := regexp.MustCompile(`gpusampler final stats:\n(?:.*\n)*?  output ` + name + ` +published (\d+) delivered (\d+) dropped (\d+) filtered (\d+) failed (\d+) `).FindStringSubmatch(stderr.String())
		if f == nil {
			t.Fatalf("no final stats line for %s:\n%s", name, stderr.String())
		}
		var c [5]int
		for i := range c {
			c[i], _ = strconv.Atoi(f[i+1])
		}
		return c
	}
	bh, ok := line("blackhole"), line("stdout")
	if unflushed == 0 || bh[0] != bh[1]+bh[2]+bh[3]+bh[4] || bh[4] < unflushed {
		t.Fatalf("black-holed output: final stats %v do not reconcile or miss the %d unflushed:\n%s", bh, unflushed, stderr.String())
	}
	if ok[0] == 0 || ok[1] != ok[0] {
		t.Fatalf("healthy output: final stats %v, want every sample delivered:\n%s", ok, stderr.String())
	}
	t.Logf("exit 1; blackhole published %d delivered %d failed %d (%d unflushed); stdout published %d delivered %d",
		bh[0], bh[1], bh[4], unflushed, ok[0], ok[1])
}

// An InfluxDB that is down at stop (it answers 503 to every write of
// samples) and would black-hole the final self-metrics (it never answers a
// write without samples) beside a healthy output: the stop does not hand
// the final self-metrics to the output that refused its last batch, so it
// neither waits out the sink nor runs into the shutdown timeout; its
// samples are counted failed, the final events dropped, and the exit status
// is 0 (nothing went uncounted). Before, the final self-metrics went into
// the black hole and the stop ended with exit 1 and "0 samples not
// delivered". The timeouts make that deterministic: the stop waits half
// the shutdown timeout (10 s) for the down output to come back, and the
// sink's request timeout (12 s) is longer than what is left.
func TestShutdownUnavailableSinkFinalEventsDroppedIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gpusampler")
	}
	bin := buildGpusampler(t)
	refused := make(chan struct{}, 1)
	var holed atomic.Int64
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("nvidia_smi")) {
			select {
			case refused <- struct{}{}:
			default:
			}
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		holed.Add(1)
		select { // never answered
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gpusampler.toml")
	doc := "[agent]\nshutdown_timeout = \"20s\"\n[sampler]\nbackend = \"sim\"\n" +
		"[[outputs.influxdb]]\nname = \"down\"\nurl = \"" + srv.URL + "\"\ndatabase = \"gpu\"\nskip_database_creation = true\n" +
		"write_timeout = \"30s\"\ntimeout = \"12s\"\n" +
		"[[outputs.stdout]]\nformat = \"json\"\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "run", "--stats", "--config", cfg)
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-refused: // a batch of samples is held
	case err := <-exited:
		t.Fatalf("exited before writing to the sink: %v\n%s", err, stderr.String())
	case <-time.After(5 * time.Minute): // a failure guard, not a timing check
		cmd.Process.Kill()
		<-exited
		t.Fatalf("no write reached the sink in 5 minutes\n%s", stderr.String())
	}
	before := holed.Load()
	if err := signalWait(t, cmd, exited, syscall.SIGTERM, &stderr); err != nil {
		t.Fatalf("exit %v, want status 0 (the down output's losses are counted)\n%s", err, stderr.String())
	}
	if n := holed.Load() - before; n > 0 {
		t.Fatalf("%d writes without samples (the final self-metrics) reached the down sink at stop\n%s", n, stderr.String())
	}
	if !strings.Contains(stderr.String(), "output unavailable at stop; final events dropped, not written") {
		t.Fatalf("stderr does not say the final events were dropped:\n%s", stderr.String())
	}
	if !regexp.MustCompile(`msg="final output stats" output=down .* events_dropped=[1-9]`).MatchString(stderr.String()) {
		t.Fatalf("the down output's final stats do not count the final events dropped:\n%s", stderr.String())
	}
	line := func(name string) [5]int {
		f := regexp.MustCompile(`gpusampler final stats:\n(?:.*\n)*?  output ` + name + ` +published (\d+) delivered (\d+) dropped (\d+) filtered (\d+) failed (\d+) `).FindStringSubmatch(stderr.String())
		if f == nil {
			t.Fatalf("no final stats line for %s:\n%s", name, stderr.String())
		}
		var c [5]int
		for i := range c {
			c[i], _ = strconv.Atoi(f[i+1])
		}
		return c
	}
	down, ok := line("down"), line("stdout")
	if down[0] == 0 || down[1] != 0 || down[0] != down[2]+down[3]+down[4] {
		t.Fatalf("down output: final stats %v, want every sample counted failed or dropped:\n%s", down, stderr.String())
	}
	if ok[0] == 0 || ok[1] != ok[0] {
		t.Fatalf("healthy output: final stats %v, want every sample delivered:\n%s", ok, stderr.String())
	}
	t.Logf("exit 0; down published %d failed %d; stdout published %d delivered %d", down[0], down[4], ok[0], ok[1])
}
