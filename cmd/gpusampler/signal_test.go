package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestMain lets a test re-execute this binary as the real gpusampler.
func TestMain(m *testing.M) {
	if os.Getenv("GPUSAMPLER_TEST_MAIN") == "1" {
		os.Args = append([]string{"gpusampler"}, strings.Fields(os.Getenv("GPUSAMPLER_TEST_ARGS"))...)
		main()
		return
	}
	// Drain cursors of non-simulated backends (the fake driver) persist in
	// the state directory, by default the machine's (/var/lib/gpusampler as
	// root): tests keep theirs in a directory of their own, which the
	// binaries they start inherit.
	dir, err := os.MkdirTemp("", "gpusampler-test-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("STATE_DIRECTORY", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// SIGINT and SIGTERM flush what was sampled and exit 0.
func TestSignalFlushesAndExitsZero(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "GPUSAMPLER_TEST_MAIN=1", "GPUSAMPLER_TEST_ARGS=run --backend sim --format json")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 1<<20)
			lines := 0
			for sc.Scan() {
				lines++
				if lines == 20 {
					cmd.Process.Signal(sig)
				}
				if !strings.HasPrefix(sc.Text(), "{") || !strings.HasSuffix(sc.Text(), "}") {
					t.Fatalf("torn line %q", sc.Text())
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("exit: %v", err)
			}
			if lines < 20 {
				t.Fatalf("only %d lines", lines)
			}
		})
	}
}
