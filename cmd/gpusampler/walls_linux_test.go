package main

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stderrLines starts reading f line by line; each line goes to the
// returned channel, which is closed at EOF.
func stderrLines(f *os.File) <-chan string {
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// waitStderr waits for a line containing want (a liveness bound, not a
// timing check) and returns what was read until then.
func waitStderr(t *testing.T, lines <-chan string, want string) string {
	t.Helper()
	var seen strings.Builder
	bound := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("stderr ended without %q:\n%s", want, seen.String())
			}
			seen.WriteString(l + "\n")
			if strings.Contains(l, want) {
				return seen.String()
			}
		case <-bound:
			t.Fatalf("no %q on stderr after 2 minutes:\n%s", want, seen.String())
		}
	}
}

// A second Ctrl-C ends the process at once, even while the first one's
// final flush waits on a reader that never reads ([agent] shutdown_timeout
// of an hour): exit 130, and the first said how.
func TestSecondInterruptExitsAtOnce(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gpusampler.toml")
	doc := "[agent]\nshutdown_timeout = \"1h\"\n[sampler]\nbackend = \"sim\"\n[[outputs.stdout]]\nformat = \"json\"\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close() // open to the end, never read: the writer blocks
	if _, err := unix.FcntlInt(r.Fd(), unix.F_SETPIPE_SZ, 4096); err != nil {
		t.Fatal(err)
	}
	er, ew, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer er.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GPUSAMPLER_TEST_MAIN=1", "GPUSAMPLER_TEST_ARGS=run --config "+cfg)
	cmd.Stdout, cmd.Stderr = w, ew
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	ew.Close()
	lines := stderrLines(er)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	// Blocked writing: a thread sleeps in write(2) on fd 1 (see
	// TestShutdownWithStalledReader).
	liveness := time.Now().Add(5 * time.Minute)
	for blocked := false; !blocked; {
		select {
		case err := <-exited:
			t.Fatalf("exited before it blocked writing: %v", err)
		case <-time.After(10 * time.Millisecond): // polling /proc
		}
		blocked, _ = sleepsInWrite(cmd.Process.Pid, 1)
		if !blocked && time.Now().After(liveness) {
			t.Fatal("not blocked writing to the stalled pipe after 5 minutes")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitStderr(t, lines, "interrupt again to exit now")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	seen := waitStderr(t, lines, "interrupt again: exiting now")
	select {
	case err = <-exited:
	case <-time.After(2 * time.Minute): // a failure guard, not a timing check
		t.Fatalf("still running 2 minutes after the second SIGINT:\n%s", seen)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit %v, want status 130:\n%s", err, seen)
	}
}

// Without --config there is nothing to reload: SIGHUP is logged and
// ignored, and sampling goes on until SIGINT (exit 0).
func TestSIGHUPWithoutConfigIgnored(t *testing.T) {
	er, ew, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer er.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GPUSAMPLER_TEST_MAIN=1", "GPUSAMPLER_TEST_ARGS=run --backend sim --format json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = ew
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ew.Close()
	defer cmd.Process.Kill()
	lines := stderrLines(er)
	out := bufio.NewScanner(stdout)
	out.Buffer(nil, 1<<20)
	if !out.Scan() { // sampling: the signal handlers are in place
		t.Fatalf("no output: %v", out.Err())
	}
	go func() {
		for out.Scan() {
		}
	}()
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitStderr(t, lines, "SIGHUP ignored: no --config to reload")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit %v after SIGHUP then SIGINT, want 0", err)
	}
}

// A config that configures nothing (an empty file) runs, with a warning
// that the samples go nowhere.
func TestEmptyConfigWarns(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "empty.toml")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "run", "--config", cfg, "--backend", "sim", "--duration", "200ms")
	if code != 0 || !strings.Contains(stderr, "no outputs configured: samples are taken and go nowhere") || !strings.Contains(stderr, cfg) {
		t.Errorf("exit %d, stderr %q: want 0 and a warning naming %s", code, stderr, cfg)
	}
}

// version takes no arguments: "version extra" is a usage error.
func TestVersionExtraIsUsageError(t *testing.T) {
	code, stdout, stderr := runCLI(t, "version", "extra")
	if code != 2 || stdout != "" || stderr != "gpusampler version: unexpected argument \"extra\" (version takes none)\n" {
		t.Errorf("exit %d, stdout %q, stderr %q: want 2 and one usage line", code, stdout, stderr)
	}
}

// A secret from ${VAR} in a URL that does not parse is never printed, in
// any form: config --check and run name the variable instead.
func TestURLParseErrorHidesSecret(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gpusampler.toml")
	doc := "[[outputs.influxdb]]\ndatabase = \"gpu\"\nurl = \"http://gpusampler:${INFLUX_PW}@127.0.0.1:8086\"\n"
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{`sk"ret-value`, "secret%en"} {
		t.Setenv("INFLUX_PW", secret)
		for _, args := range [][]string{{"config", "--check", cfg}, {"run", "--config", cfg, "--backend", "sim", "--duration", "100ms"}} {
			code, stdout, stderr := runCLI(t, args...)
			out := stdout + stderr
			if code == 0 || !strings.Contains(out, "${INFLUX_PW}") {
				t.Errorf("%s with %q: exit %d, %q: want a failure naming ${INFLUX_PW}", args[0], secret, code, out)
			}
			for _, part := range []string{"ret-value", `sk\"ret`, "%en"} {
				if strings.Contains(secret, strings.ReplaceAll(part, `\`, "")) && strings.Contains(out, part) {
					t.Errorf("%s with %q: output shows %q of the secret: %s", args[0], secret, part, out)
				}
			}
		}
	}
}
