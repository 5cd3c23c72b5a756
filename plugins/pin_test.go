package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
)

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// swapKit is a copy of the test plugin at path, its checksum, and an
// impostor: a script that writes marker when it runs and then runs the
// real plugin, so it would pass for the plugin if it ever ran.
type swapKit struct {
	dir, path, sum, impostor, marker string
}

func newSwapKit(t *testing.T) swapKit {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("exec from a verified descriptor needs /proc/self/fd")
	}
	dir := t.TempDir()
	k := swapKit{dir: dir, path: filepath.Join(dir, "my-sink"), marker: filepath.Join(dir, "impostor-ran")}
	copyFile(t, testPluginPath, k.path)
	k.sum = fileSHA256(t, k.path)
	k.impostor = filepath.Join(dir, "impostor")
	script := fmt.Sprintf("#!/bin/sh\necho ran >> %s\nexec %s\n", k.marker, testPluginPath)
	if err := os.WriteFile(k.impostor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return k
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// swap renames the impostor over the plugin's path (what a package
// manager or an attacker does).
func (k swapKit) swap(t *testing.T) {
	t.Helper()
	copyFile(t, k.impostor, k.path)
}

func (k swapKit) assertImpostorNeverRan(t *testing.T) {
	t.Helper()
	if data, err := os.ReadFile(k.marker); err == nil {
		t.Fatalf("the impostor ran: %q", data)
	}
}

// assertRunsOriginal checks that pid executes the verified bytes.
func (k swapKit) assertRunsOriginal(t *testing.T, pid int) {
	t.Helper()
	if got := fileSHA256(t, fmt.Sprintf("/proc/%d/exe", pid)); got != k.sum {
		t.Fatalf("/proc/%d/exe has sha256 %s, want the verified %s", pid, got, k.sum)
	}
}

func (k swapKit) options(t *testing.T, name string) (plugins.Options, *logBuffer) {
	opts := fastOptions(t, name, nil)
	log, lb := testLogger(t, name)
	opts.Logger = log
	path := k.path
	opts.Command = func() *exec.Cmd { return exec.Command(path) }
	opts.SHA256 = k.sum
	return opts, lb
}

// A plugin binary replaced on disk after the first start never runs: the
// supervisor verifies every restart, refuses the new file after a SIGKILL
// of the original, and starts again once the verified binary is back.
func TestSwappedBinaryNeverRunsAfterRestart(t *testing.T) {
	k := newSwapKit(t)
	opts, logs := k.options(t, "swap")
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := c.Stats().PID
	k.assertRunsOriginal(t, first)

	k.swap(t)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// two refused restarts: the supervisor keeps trying, and keeps refusing
	waitFor(t, func() bool { return c.Stats().StartFailures >= 2 })
	if n := warnLines(logs.String(), "checksum mismatch"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once", n)
	}
	k.assertImpostorNeverRan(t)
	if st := c.Stats(); st.PID != 0 || st.Crashes != 1 || st.Starts != 1 || st.Failing {
		t.Fatalf("stats after the swap %+v, want no process, 1 crash, 1 start", st)
	}
	err = c.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(2)})
	if !errors.Is(err, record.ErrUnavailable) {
		t.Fatalf("Write while refused: %v, want ErrUnavailable (the batch is kept)", err)
	}

	copyFile(t, testPluginPath, k.path) // the verified binary is back
	waitFor(t, func() bool { return c.Stats().PID != 0 })
	k.assertRunsOriginal(t, c.Stats().PID)
	k.assertImpostorNeverRan(t)
}

// A file renamed over the path between the check and the exec is not what
// runs: the exec uses the descriptor that was hashed.
func TestSwapBetweenCheckAndExec(t *testing.T) {
	k := newSwapKit(t)
	opts, _ := k.options(t, "race")
	var swaps atomic.Int32
	opts = plugins.WithAfterPin(opts, func() {
		if swaps.Add(1) == 1 {
			k.swap(t)
		}
	})
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if swaps.Load() != 1 {
		t.Fatalf("the swap hook ran %d times", swaps.Load())
	}
	k.assertRunsOriginal(t, c.Stats().PID)
	if err := c.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(2)}); err != nil {
		t.Fatal(err)
	}
	k.assertImpostorNeverRan(t)
	if got := fileSHA256(t, k.path); got == k.sum {
		t.Fatal("the file on disk was not swapped")
	}
}

// A write into the file itself between the check and the exec is caught
// by the second hash of the running executable: the process is killed and
// the start fails with ErrChecksum.
func TestModifiedBetweenCheckAndExec(t *testing.T) {
	k := newSwapKit(t)
	opts, _ := k.options(t, "inplace")
	opts = plugins.WithAfterPin(opts, func() {
		f, err := os.OpenFile(k.path, os.O_WRONLY, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		// same size, one byte changed near the end (the ELF still runs)
		st, _ := f.Stat()
		if _, err := f.WriteAt([]byte{0x5a}, st.Size()-1); err != nil {
			t.Error(err)
		}
	})
	c, err := plugins.Start(opts)
	if err == nil {
		c.Close()
		t.Fatal("a binary modified in place started")
	}
	if !errors.Is(err, plugins.ErrChecksum) || !strings.Contains(err.Error(), k.path) {
		t.Fatalf("err = %v, want ErrChecksum naming %s", err, k.path)
	}
	t.Log(err)
}

// Without sha256 a plugin block is refused unless allow_unverified is set.
func TestUnverifiedPluginNeedsOptIn(t *testing.T) {
	reg := outputs.NewRegistry(plugins.Kind())
	block := "[[outputs.plugin]]\n  name = \"my-sink\"\n  path = \"/usr/local/lib/gpusampler/my-sink\"\n"
	_, err := appconfig.Parse("test.toml", []byte(block), appconfig.Options{Registry: reg})
	want := "test.toml:1: outputs.plugin[0]: sha256 is required (sha256sum PATH): the plugin binary is verified at every start; set allow_unverified = true to run it unverified"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	cfg, err := appconfig.Parse("test.toml", []byte(block+"  allow_unverified = true\n"), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.Outputs[0].Options.(plugins.KindOptions); !o.AllowUnverified || o.SHA256 != "" {
		t.Fatalf("options %+v", o)
	}
}

// environ reads a process's environment, sorted.
func environ(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
	slices.Sort(env)
	return env
}

// A plugin's environment holds the handshake, PATH, TZ, the locale and
// the ${VAR}s of its own block, nothing else of the host's.
func TestPluginEnvironmentIsMinimal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/PID/environ")
	}
	dir := t.TempDir()
	rec := filepath.Join(dir, "rec.jsonl")
	t.Setenv("PATH", "/usr/bin:/bin")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("LC_TIME", "en_DK.UTF-8")
	t.Setenv("TZ", "UTC")
	t.Setenv("GPUSAMPLER_TEST_RECORD", rec)
	t.Setenv("OTHER_BLOCK_SECRET", "s3cret-other")
	t.Setenv("HOST_SECRET", "s3cret-host")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s3cret-aws")
	cfgText := `[global_tags]
  site = "${OTHER_BLOCK_SECRET}"
[[outputs.plugin]]
  name = "env-a"
  path = "` + testPluginPath + `"
  sha256 = "` + fileSHA256(t, testPluginPath) + `"
  [outputs.plugin.config]
    record = "${GPUSAMPLER_TEST_RECORD}"
[[outputs.plugin]]
  name = "env-b"
  path = "` + testPluginPath + `"
  allow_unverified = true
  [outputs.plugin.config]
    dump = "` + dir + `/${OTHER_BLOCK_SECRET}"
`
	reg := outputs.NewRegistry(plugins.Kind())
	cfg, err := appconfig.Parse("test.toml", []byte(cfgText), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := reg.Lookup("plugin")
	out, err := k.Build(&cfg.Outputs[0].Block, outputs.BuildEnv{})
	if err != nil {
		t.Fatal(err)
	}
	c := out.(*plugins.Client)
	defer c.Close()
	var names []string
	var certs int
	for _, kv := range environ(t, c.Stats().PID) {
		if strings.HasPrefix(kv, "PLUGIN_CLIENT_CERT=") { // go-plugin's AutoMTLS certificate: its value differs per start
			certs++
			continue
		}
		if dir, ok := strings.CutPrefix(kv, "PLUGIN_UNIX_SOCKET_DIR="); ok && dir != "" { // a directory per start
			names = append(names, "PLUGIN_UNIX_SOCKET_DIR=…")
			continue
		}
		names = append(names, kv)
	}
	want := []string{
		"GPUSAMPLER_PLUGIN=output-v1-5f0c1b7e",
		fmt.Sprintf("GPUSAMPLER_PLUGIN_PARENT_PID=%d", os.Getpid()),
		"GPUSAMPLER_TEST_RECORD=" + rec,
		"LANG=C.UTF-8",
		"LC_TIME=en_DK.UTF-8",
		"PATH=/usr/bin:/bin",
		"PLUGIN_MAX_PORT=25000",
		"PLUGIN_MIN_PORT=10000",
		"PLUGIN_PROTOCOL_VERSIONS=1",
		"PLUGIN_UNIX_SOCKET_DIR=…",
		"TZ=UTC",
	}
	if !slices.Equal(names, want) || certs != 1 {
		t.Errorf("plugin environment (without PLUGIN_CLIENT_CERT, seen %d times):\n%s\nwant:\n%s",
			certs, strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	if got := cfg.Outputs[1].EnvRefs(); !slices.Equal(got, []string{"OTHER_BLOCK_SECRET=s3cret-other"}) {
		t.Errorf("second block's EnvRefs = %q", got)
	}
}

// A script plugin runs by its path (its interpreter opens it by name): a
// script replaced between the check and the exec fails the start.
func TestScriptSwappedBetweenCheckAndExec(t *testing.T) {
	k := newSwapKit(t)
	script := fmt.Sprintf("#!/bin/sh\nexec %s\n", testPluginPath)
	if err := os.WriteFile(k.path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	k.sum = fileSHA256(t, k.path)
	opts, _ := k.options(t, "script")
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatalf("a verified script plugin: %v", err)
	}
	c.Close()
	opts = plugins.WithAfterPin(opts, func() { k.swap(t) })
	c, err = plugins.Start(opts)
	if err == nil {
		c.Close()
		t.Fatal("a script replaced before the exec started")
	}
	if !errors.Is(err, plugins.ErrChecksum) || !strings.Contains(err.Error(), "replaced while it was being started") {
		t.Fatalf("err = %v", err)
	}
}

// warnLines counts the log lines at WARN or above that contain s.
func warnLines(log, s string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) && (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) {
			n++
		}
	}
	return n
}
