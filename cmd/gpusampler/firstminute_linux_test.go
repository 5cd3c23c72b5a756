//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// makefileCgoCFlags returns the CGO_CFLAGS the Makefile exports to its
// recipes when the environment sets none.
func makefileCgoCFlags(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", root, "-f", "Makefile", "-f", "-", "print-cgo-cflags")
	cmd.Stdin = strings.NewReader("print-cgo-cflags:\n\t@echo \"$$CGO_CFLAGS\"\n")
	cmd.Env = withoutEnv(os.Environ(), "CGO_CFLAGS", "MAKEFLAGS", "MAKELEVEL")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make print-cgo-cflags: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func withoutEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			if k == n {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// The first minute of a new user: `make run` builds with `make build`,
// then runs `bin/gpusampler run` with stdout on their terminal.
//
// The build prints nothing on stderr: go-nvml's headers mark many
// functions deprecated and gcc would warn ~150 times; the Makefile's
// CGO_CFLAGS silence that for our build only. A define unique to this run
// is added to the Makefile's flags: the flags are part of Go's build cache
// key, so gcc compiles every cgo file again and an empty stderr means it
// ran and said nothing. The binary's version names the commit it was built
// from. Run on a pseudo-terminal, as `make run` runs it, it shows the live
// table with the simulated marker (no driver here), every row complete
// (no half-empty first rows) and one row per GPU and second.
func TestMakeRunFirstMinuteIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program with make and gcc (about half a minute)")
	}
	for _, tool := range []string{"make", "gcc", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	flags := makefileCgoCFlags(t, root)
	if !strings.Contains(flags, "-Wno-deprecated-declarations") {
		t.Fatalf("the Makefile's CGO_CFLAGS %q do not silence go-nvml's deprecation warnings", flags)
	}
	bin := filepath.Join(t.TempDir(), "gpusampler")
	build := exec.Command("make", "-s", "--no-print-directory", "-C", root, "build", "BIN="+bin)
	build.Env = append(withoutEnv(os.Environ(), "CGO_CFLAGS", "MAKEFLAGS", "MAKELEVEL"),
		"CGO_CFLAGS="+flags+" -DGPUSAMPLER_WARNING_CHECK="+time.Now().Format("150405.000000000"))
	var stdout, stderr bytes.Buffer
	build.Stdout, build.Stderr = &stdout, &stderr
	if err := build.Run(); err != nil {
		t.Fatalf("make build: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if stderr.Len() != 0 {
		t.Fatalf("make build wrote to stderr (compiler warnings?):\n%s", stderr.String())
	}

	// version: the commit the Makefile passed, the Go toolchain, and the
	// driver and NVML versions of the library it loads (the fake driver's,
	// told to report 595.12.03).
	if head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil {
		fake := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
		if b, err := exec.Command("gcc", "-shared", "-fPIC", "-O1", "-o", fake, filepath.Join(root, "sampler/nvml/testdata/fakenvml.c")).CombinedOutput(); err != nil {
			t.Fatalf("gcc fakenvml.c: %v\n%s", err, b)
		}
		ver := exec.Command(bin, "version")
		ver.Env = append(withoutEnv(os.Environ(), "GPUSAMPLER_NVML_LIBRARY"), "GPUSAMPLER_NVML_LIBRARY="+fake, "FAKENVML_VERSION=13.595.12.03")
		out, err := ver.Output()
		_, rest, _ := strings.Cut(string(out), "\n")
		want := "commit  " + strings.TrimSpace(string(head)) + "\ngo      " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH +
			", cgo on\ndriver  595.12.03\nnvml    13.595.12.03\n"
		if err != nil || !strings.HasPrefix(string(out), "gpusampler ") || rest != want {
			t.Fatalf("version: %v\n%s\nwant after the first line\n%s", err, out, want)
		}
	}

	// `make run`'s command on a terminal.
	ctl, term := openPTY(t)
	run := exec.Command(bin, "run")
	run.Env = withoutEnv(os.Environ(), "GPUSAMPLER_NVML_LIBRARY")
	run.Stdout = term
	var runErr bytes.Buffer
	run.Stderr = &runErr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	term.Close() // the child holds the terminal now
	// Read until three rows per GPU are on screen; a liveness bound only.
	rowRE := regexp.MustCompile(`(?m)^(\d\d:\d\d:\d\d) +(\d+) +(.*?)\r?$`)
	chunks := make(chan []byte)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 4096)
			n, err := ctl.Read(buf)
			if n > 0 {
				chunks <- buf[:n]
			}
			if err != nil {
				return // EIO once the child has closed the terminal
			}
		}
	}()
	wait := make(chan error, 1)
	go func() { wait <- run.Wait() }()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var screen bytes.Buffer
	for enough := false; !enough; {
		select {
		case b := <-chunks:
			screen.Write(b)
		case err := <-wait:
			t.Fatalf("bin/gpusampler run exited early: %v\n%s\n%s", err, runErr.String(), screen.String())
		case <-ctx.Done():
			run.Process.Kill()
			t.Fatalf("no three rows per GPU in 2 minutes:\n%s\n%s", screen.String(), runErr.String())
		}
		rows := map[string]int{}
		for _, r := range rowRE.FindAllStringSubmatch(screen.String(), -1) {
			rows[r[2]]++
		}
		enough = rows["0"] >= 3 && rows["1"] >= 3
	}
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for b := range chunks {
		screen.Write(b)
	}
	if err := <-wait; err != nil {
		t.Fatalf("run after SIGINT: %v\n%s", err, runErr.String())
	}
	out := screen.String()
	if !strings.HasPrefix(out, "# SIMULATED GPUs (no NVIDIA driver): made-up numbers, not measurements\r\n#time    gpu  pwrW/max") {
		if !strings.Contains(runErr.String(), "NVML unavailable") {
			t.Skipf("a driver loads here: the simulated marker is not expected\n%s", out)
		}
		t.Fatalf("want the table under the simulated marker, got:\n%s", out)
	}
	if strings.Contains(out, "nvidia_smi,") {
		t.Fatalf("line protocol on a terminal:\n%s", out)
	}
	last := map[string]string{}
	for _, r := range rowRE.FindAllStringSubmatch(out, -1) {
		if strings.Contains(r[3], "-") || len(strings.Fields(r[3])) != 9 {
			t.Errorf("half-empty row: %q\n%s", r[0], out)
		}
		if r[1] <= last[r[2]] {
			t.Errorf("GPU %s: row for %s after one for %s (duplicate or out of order)\n%s", r[2], r[1], last[r[2]], out)
		}
		last[r[2]] = r[1]
	}
}
