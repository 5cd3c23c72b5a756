//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns a pseudo-terminal's controlling side and its terminal
// side (what a program sees as its terminal).
func openPTY(t *testing.T) (ctl, term *os.File) {
	t.Helper()
	ctl, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ctl.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ctl.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close(); term.Close() })
	return ctl, term
}

// On a terminal, `run` without --format shows the live table, marked
// simulated; piped, it writes line protocol.
func TestRunShowsTableOnTerminal(t *testing.T) {
	t.Setenv("TERM", "xterm")
	ctl, term := openPTY(t)
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(ctl) // ends with EIO once the terminal side closes
		got <- string(b)
	}()
	var errb bytes.Buffer
	code := Main(t.Context(), []string{"run", "--backend", "sim", "--gpus", "1", "--duration", "3500ms"}, nil, term, &errb)
	term.Close()
	out := <-got
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out, "# SIMULATED GPUs") || !strings.Contains(out, "#time    gpu  pwrW/max") || strings.Contains(out, "nvidia_smi,") {
		t.Fatalf("want the table with the simulated marker, got:\n%s", out)
	}
	code, piped, _ := runCLI(t, "run", "--backend", "sim", "--gpus", "1", "--duration", "1s")
	if code != 0 || !strings.Contains(piped, "nvidia_smi,") {
		t.Fatalf("piped: exit %d, want line protocol:\n%.300s", code, piped)
	}
}

// On a terminal, bench shows the running command live: the run and its
// elapsed time, the time left, and each GPU's power, utilization and clock.
// Nothing here waits on the wall clock: each run's first status is drawn as
// it starts, and bench starts only once every GPU has readings.
func TestBenchLiveProgressOnTerminal(t *testing.T) {
	t.Setenv("TERM", "xterm") // also keeps this test out of the parallel ones, so the variable below is not raced
	// The first run's line must carry live values: wait for them however
	// loaded the machine is (bench alone starts anyway after 2 s).
	defer func(d time.Duration) { benchReadyTimeout = d }(benchReadyTimeout)
	benchReadyTimeout = 2 * time.Minute
	ctl, term := openPTY(t)
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(ctl)
		got <- string(b)
	}()
	var out bytes.Buffer
	code := Main(t.Context(), []string{"bench", "--backend", "sim", "--gpus", "2", "--baseline", "0", "--runs", "2", "--", "sleep", "0.5"},
		nil, &out, term)
	term.Close()
	screen := <-got
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, screen)
	}
	for _, re := range []string{
		`A run 1  \d+\.\d s  \[0/2\] \| GPU0 \d+ W \d+% \d+ MHz \| GPU1 \d+ W`, // first run: no estimate yet
		`A run 2  \d+\.\d s  ~\d+s left  \[1/2\] \| GPU0`,                      // then one from the first run
		`\[=+\] 2/2  A run 2: \d+\.\d+ s`,
	} {
		if !regexp.MustCompile(re).MatchString(screen) {
			t.Errorf("terminal lacks %s:\n%q", re, screen)
		}
	}
}
