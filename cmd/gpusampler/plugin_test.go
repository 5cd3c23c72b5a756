package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gpusampler plugin test on the example plugin and on a broken one.
func TestPluginTestCommandIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: builds plugins")
	}
	dir := t.TempDir()
	build := func(name, pkg string) string {
		bin := filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
		return bin
	}
	webhook := build("gpusampler-webhook", "../../plugins/examples/webhook/cmd/gpusampler-webhook")
	broken := build("testplugin", "../../plugins/internal/testplugin")
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hook.Close()
	cfg := filepath.Join(dir, "webhook.toml")
	os.WriteFile(cfg, []byte("url = \""+hook.URL+"/hook\"\nthresholds = [\"temperature_gpu > 85\"]\nbatch_interval = \"1h\"\nmax_retries = 0\n"), 0o644)
	// nothing listens on port 9: the alert's post fails, and the plugin
	// reports the lost alert at its close
	downCfg := filepath.Join(dir, "down.toml")
	os.WriteFile(downCfg, []byte("url = \"http://127.0.0.1:9/hook\"\nthresholds = [\"temperature_gpu > 85\"]\nbatch_interval = \"1h\"\nmax_retries = 0\n"), 0o644)
	badCfg := filepath.Join(dir, "bad.toml")
	os.WriteFile(badCfg, []byte("url = \"ftp://x\"\n"), 0o644)

	run := func(env string, args ...string) (int, string) {
		t.Helper()
		if env != "" {
			t.Setenv("GPUSAMPLER_TESTPLUGIN_BROKEN", env)
		}
		var out, errb bytes.Buffer
		code := Main(context.Background(), append([]string{"plugin", "test"}, args...), nil, &out, &errb)
		t.Logf("gpusampler plugin test %s → %d\n%s%s", strings.Join(args, " "), code, out.String(), errb.String())
		return code, out.String() + errb.String()
	}
	for _, tc := range []struct {
		name, env string
		args      []string
		code      int
		want      []string
	}{
		{"example", "", []string{webhook, "--config", cfg}, 0,
			[]string{"handshake  ok: protocol 1, gRPC, AutoMTLS", "configure  ok (4 keys)", "write      ok seq 3", "close      ok", "PASS"}},
		{"example-receiver-down", "", []string{webhook, "--config", downCfg}, 1,
			[]string{"write      ok seq 3", "close      FAIL", "1 alerts lost"}},
		{"example-bad-config", "", []string{webhook, "--config", badCfg}, 1,
			[]string{"configure  FAIL " + badCfg + ": url: \"ftp://x\": want an http or https URL"}},
		{"broken-handshake", "stdout", []string{broken}, 1,
			[]string{"start      FAIL", "hello from a plugin that prints to stdout", "plugin test failed"}},
		{"not-a-plugin", "", []string{"/bin/true"}, 1, []string{"start      FAIL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := run(tc.env, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}
