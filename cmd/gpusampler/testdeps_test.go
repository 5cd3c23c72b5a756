package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testDeps runs scripts/test-deps.sh (what `make test` runs first) with
// PATH holding only the stand-ins in bin: each program in have, a Python
// whose import check passes when pythonOK, an id saying uid, and (when
// apt) an apt-get that logs its arguments and, when aptWorks, installs a
// stand-in for each package's program. It returns the exit code, the
// script's output and apt-get's log.
func testDeps(t *testing.T, have []string, pythonOK bool, uid string, apt, aptWorks bool) (code int, out, aptLog string) {
	t.Helper()
	bin := t.TempDir()
	log := filepath.Join(t.TempDir(), "apt.log")
	stub := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range have {
		stub(p, "exit 0")
	}
	if pythonOK {
		stub("python3", "exit 0")
	} else {
		stub("python3", "exit 1")
	}
	stub("id", "echo "+uid)
	if apt {
		install := ""
		if aptWorks {
			chmod, err := exec.LookPath("chmod")
			if err != nil {
				t.Fatal(err)
			}
			install = `
for p in "$@"; do
	case $p in
	prometheus) p=promtool ;; influxdb) p=influxd ;; librsvg2-bin) p=rsvg-convert ;;
	systemd) p=systemd-analyze ;; python3-grpcio) p=python3 ;;
	esac
	printf '#!/bin/sh\nexit 0\n' > ` + bin + `/$p; ` + chmod + ` +x ` + bin + `/$p
done`
		}
		stub("apt-get", `echo "$*" >> `+log+install)
	}
	cmd := exec.Command("../../scripts/test-deps.sh")
	cmd.Env = []string{"PATH=" + bin, "TEST_DEPS_PYTHON=" + filepath.Join(bin, "python3")}
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	l, _ := os.ReadFile(log)
	return cmd.ProcessState.ExitCode(), b.String(), string(l)
}

var allTestPrograms = []string{"gcc", "promtool", "influxd", "nats-server", "rsvg-convert", "systemd-analyze"}

// The README's line under `make test`: on a fresh Debian machine as root the
// script installs what the tests need, silently does nothing when all is
// there, and without root or apt-get stops at once with the one command.
func TestTestDepsScript(t *testing.T) {
	t.Run("all there: silent", func(t *testing.T) {
		code, out, apt := testDeps(t, allTestPrograms, true, "1000", true, true)
		if code != 0 || out != "" || apt != "" {
			t.Errorf("exit %d, output %q, apt-get %q: want 0, nothing, not called", code, out, apt)
		}
	})
	t.Run("fresh machine as root: installs", func(t *testing.T) {
		code, out, apt := testDeps(t, nil, false, "0", true, true)
		want := "update -q\ninstall -y -q --no-install-recommends gcc prometheus influxdb nats-server librsvg2-bin systemd python3 python3-grpcio python3-protobuf python3-cryptography\n"
		if code != 0 || apt != want {
			t.Errorf("exit %d, apt-get calls %q: want 0 and %q\n%s", code, apt, want, out)
		}
	})
	t.Run("only influxd missing as root: installs influxdb", func(t *testing.T) {
		have := []string{"gcc", "promtool", "nats-server", "rsvg-convert", "systemd-analyze"}
		code, _, apt := testDeps(t, have, true, "0", true, true)
		if want := "update -q\ninstall -y -q --no-install-recommends influxdb\n"; code != 0 || apt != want {
			t.Errorf("exit %d, apt-get calls %q: want 0 and %q", code, apt, want)
		}
	})
	t.Run("apt-get installs nothing: fails", func(t *testing.T) {
		code, out, _ := testDeps(t, allTestPrograms[1:], true, "0", true, false)
		if code != 1 || !strings.Contains(out, "still missing after apt-get install: gcc") {
			t.Errorf("exit %d, output %q: want 1 and what is still missing", code, out)
		}
	})
	t.Run("not root: stops with the command", func(t *testing.T) {
		code, out, apt := testDeps(t, []string{"gcc"}, true, "1000", true, true)
		if code != 1 || apt != "" || strings.Count(out, "\n") != 1 ||
			!strings.Contains(out, "influxd") || !strings.Contains(out, "run: sudo ../../scripts/test-deps.sh") {
			t.Errorf("exit %d, apt-get %q, output %q: want 1, not called, one line naming influxd and the command", code, apt, out)
		}
	})
	t.Run("no apt-get: stops naming the packages", func(t *testing.T) {
		code, out, _ := testDeps(t, []string{"gcc"}, true, "0", false, false)
		if code != 1 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "no apt-get") || !strings.Contains(out, "influxdb") {
			t.Errorf("exit %d, output %q: want 1 and one line naming the missing apt-get and the packages", code, out)
		}
	})
}
