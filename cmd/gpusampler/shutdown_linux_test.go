package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
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
			// wait until the pipe is full: gpusampler is blocked writing
			for full := false; !full; {
				select {
				case err := <-exited:
					t.Fatalf("exited before the pipe filled: %v\n%s", err, stderr.String())
				case <-time.After(10 * time.Millisecond):
				}
				n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ)
				if err != nil {
					t.Fatal(err)
				}
				full = n >= size
			}
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
			n, _ := strconv.Atoi(m[1])
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
