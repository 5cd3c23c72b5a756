package plugins_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
)

// processGone reports whether pid has exited (gone, or a zombie).
func processGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && len(stat) > i+2 && stat[i+2] == 'Z'
}

// orphanScript writes a plugin script that starts a `sleep 300` holding
// the plugin's stdout and stderr, writes its pid to a file, then runs what
// rest says; it returns the script's and the pid file's paths.
func orphanScript(t *testing.T, rest string) (script, pidFile string) {
	dir := t.TempDir()
	script, pidFile = filepath.Join(dir, "plugin.sh"), filepath.Join(dir, "orphan.pid")
	body := fmt.Sprintf("#!/bin/sh\nsleep 300 &\necho $! > %s\n%s\n", pidFile, rest)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, pidFile
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitDone waits for done, failing the test after a liveness bound far
// above what the step takes on a loaded machine.
func waitDone(t *testing.T, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s: still running after 2 minutes", what)
	}
}

// A process a plugin started that keeps the plugin's stdout and stderr
// open (it is not waited for by the plugin) does not make the plugin's
// end unbounded: Close ends the plugin's whole process group, the
// descendant included.
func TestCloseEndsPluginProcessGroup(t *testing.T) {
	script, pidFile := orphanScript(t, "exec "+testPluginPath)
	opts := fastOptions(t, "orphan", nil)
	opts.Command = func() *exec.Cmd { return exec.Command(script) }
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	orphan := readPID(t, pidFile)
	if err := c.Write(context.Background(), &record.Batch{Seq: 1, Samples: []record.Sample{{TimeNS: 1, Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Close()
	}()
	waitDone(t, "Close", done)
	waitGone(t, orphan)
}

// waitGone waits for pid to exit (a SIGKILL is delivered asynchronously),
// failing the test after a liveness bound.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !processGone(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin's child %d still runs 2 minutes after the plugin ended", pid)
		}
	}
}

// A plugin that prints a handshake and never serves, while its child holds
// its pipes: the failed start ends the process group and returns.
func TestFailedStartEndsPluginProcessGroup(t *testing.T) {
	script, pidFile := orphanScript(t, `echo "1|1|tcp|127.0.0.1:9|grpc"; wait`)
	opts := fastOptions(t, "orphan", nil)
	opts.Command = func() *exec.Cmd { return exec.Command(script) }
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		var c *plugins.Client
		if c, err = plugins.Start(opts); err == nil {
			c.Close()
		}
	}()
	waitDone(t, "Start", done)
	if err == nil {
		t.Fatal("a plugin that does not serve started")
	}
	waitGone(t, readPID(t, pidFile))
}

// killGroup signals only plugin processes the package started and has not
// reaped: a pid that is not one of them (here a process group of the
// test's own; in real life a pid reused after the plugin's reap) is left
// alone.
func TestKillGroupSparesProcessesNotPlugins(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	plugins.KillGroup(cmd.Process.Pid)
	// Then the test ends it with SIGTERM: had KillGroup signalled it, the
	// SIGKILL (sent first) is what ended it.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("wait: %v", err)
	}
	if ws := exit.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the process ended with %v: killGroup signalled a process that is not a plugin's (a reused pid)", ws)
	}
}
