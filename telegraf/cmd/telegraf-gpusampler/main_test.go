package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/influxdata/telegraf/plugins/common/shim"

	"github.com/gpusampler/gpusampler/telegraf/internal/metrictest"
	"github.com/gpusampler/gpusampler/telegraf/plugins/inputs/gpusampler"
)

// childTwin names the file a re-executed test binary (the shim's child
// process) writes the plugin's twin output to.
const childTwin = "TELEGRAF_GPUSAMPLER_TEST_TWIN"

func TestMain(m *testing.M) {
	if path := os.Getenv(childTwin); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = run(os.Args[1:], os.Stderr, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "telegraf-gpusampler:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestShimMatchesTwin runs the plugin through Telegraf's execd shim in a
// child process (Telegraf's influx serializer writes its stdout) on
// simulated GPUs, lets it write 200 lines, closes its stdin as Telegraf
// does to stop it, and compares all it wrote with a twin output of the same
// engine in the same run.
func TestShimMatchesTwin(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "gpusampler.conf")
	if err := os.WriteFile(conf, []byte("[[inputs.gpusampler]]\n  backend = \"sim\"\n  sim_gpus = 2\n  sim_seed = 11\n  shape = \"raw\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	twin := filepath.Join(dir, "twin.lp")
	cmd := exec.Command(os.Args[0], "-config", conf, "-poll_interval_disabled")
	cmd.Env = append(os.Environ(), childTwin+"="+twin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	r := bufio.NewReader(stdout)
	for n := 0; n < 200; n++ {
		line, err := r.ReadString('\n')
		got.WriteString(line)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("shim stdout after %d lines: %v; stderr:\n%s", n, err, stderr.String())
		}
	}
	stdin.Close() // Telegraf stops execd programs by closing stdin
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	got.Write(rest)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("shim: %v; stderr:\n%s", err, stderr.String())
	}
	wantText, err := os.ReadFile(twin)
	if err != nil {
		t.Fatal(err)
	}
	gp, wp := metrictest.Points(metrictest.Parse(t, got.String())), metrictest.Points(metrictest.Parse(t, string(wantText)))
	if !slices.Equal(gp, wp) {
		t.Fatalf("shim stdout and twin differ:\nshim (%d points): %.2000s\ntwin (%d points): %.2000s", len(gp), strings.Join(gp, "\n"), len(wp), strings.Join(wp, "\n"))
	}
	if strings.Contains(got.String(), ",host=") {
		t.Errorf("shim output has a host tag (Telegraf adds its own)")
	}
	t.Logf("%d lines, %d points equal", strings.Count(got.String(), "\n"), len(gp))
}

func TestBadConfigNamesKey(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "other.conf")
	if err := os.WriteFile(conf, []byte("[[inputs.gpusampler]]\n  shape = \"table\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	err := run([]string{"-config", conf}, &stderr, nil)
	if err == nil || !strings.Contains(err.Error(), `shape "table"`) {
		t.Fatalf("run = %v, want the bad shape named", err)
	}
}

func TestUnknownKeyIsAnError(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "typo.conf")
	if err := os.WriteFile(conf, []byte("[[inputs.gpusampler]]\n  backend = \"sim\"\n  sahpe = \"nvidia_smi\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	err := run([]string{"-config", conf}, &stderr, nil)
	if err == nil || !strings.Contains(err.Error(), "inputs.gpusampler.sahpe") || !strings.Contains(err.Error(), conf) {
		t.Fatalf("run = %v, want the file and the unknown key named", err)
	}
}

// TestExampleConfig: the plugin config file shipped as the example loads
// into the plugin, with no unknown key.
func TestExampleConfig(t *testing.T) {
	path := "gpusampler.conf"
	if err := checkKeys(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := shim.LoadConfig(&path)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := loaded.Input.(*gpusampler.GPUSampler)
	if !ok {
		t.Fatalf("example config loads %T, want the gpusampler input", loaded.Input)
	}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	if p.Backend != gpusampler.BackendAuto || p.Shape != gpusampler.ShapeRaw {
		t.Errorf("example config: backend %q, shape %q; want auto, raw as it says", p.Backend, p.Shape)
	}
}
