package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err = <-exited:
			case <-time.After(60 * time.Second): // a failure guard, not a timing check
				cmd.Process.Kill()
				<-exited
				t.Fatalf("still running 60s after %v with a stalled reader\n%s", sig, stderr.String())
			}
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
