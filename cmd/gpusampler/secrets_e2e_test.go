package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// leakSecrets are the secret values of TestSecretsNeverPrintIntegration:
// half come from ${ENV} references, half sit inline in the file.
var leakSecrets = map[string]string{
	"LEAK_INFLUX_TOKEN":      "ENV-influx-token-33a",
	"LEAK_NATS_PASSWORD":     "ENV-nats-password-0b7",
	"LEAK_TELEGRAF_PASSWORD": "ENV-telegraf-password-c19",
	"LEAK_WEBHOOK_TOKEN":     "ENV-webhook-token-88f",
	"LEAK_DURATION":          "ENV-not-a-duration-4e1",
	"inline influx":          "INLINE-influx-password-91c",
	"inline nats":            "INLINE-nats-token-5d2",
	"inline telegraf":        "INLINE-telegraf-token-e40",
	"inline webhook":         "INLINE-webhook-token-a76",
}

// No secret value reaches any stream gpusampler writes: run's stdout
// (records and self-metrics), its stderr at debug level with --stats (the
// agent's logs, the built-in network outputs' and the webhook plugin's
// relayed logs, connection errors from every sink being down), /metrics
// and /healthz, config --check, and the errors of a config that uses a
// secret where it is invalid. Every place a secret can go is set, from
// ${ENV} and inline: InfluxDB password and token, NATS password and token,
// Telegraf password and token, a webhook plugin URL carrying its token.
func TestSecretsNeverPrintIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: builds and runs the binary and the webhook plugin")
	}
	bin := buildGpusampler(t)
	dir := t.TempDir()
	webhook := filepath.Join(dir, "gpusampler-webhook")
	build := exec.Command("go", "build", "-o", webhook, "../../plugins/examples/webhook/cmd/gpusampler-webhook")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build webhook: %v\n%s", err, out)
	}
	data, err := os.ReadFile(webhook)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	// Every sink is down: port 1 on loopback. It is outside the range the
	// kernel hands out for port 0 and for outgoing connections, so no other
	// test's server can take it while this one runs. (A port picked free
	// and closed again could be, and a webhook that answers 2xx never logs
	// the failed post this test waits for.)
	const down = "127.0.0.1:1"

	env := os.Environ()
	for k, v := range leakSecrets {
		if strings.HasPrefix(k, "LEAK_") {
			env = append(env, k+"="+v)
		}
	}
	env = append(env, "LEAK_WEBHOOK_URL=http://"+down+"/hooks/"+leakSecrets["LEAK_WEBHOOK_TOKEN"])
	doc := `[agent]
stats_interval = "200ms"
[sampler]
backend = "sim"
[[outputs.stdout]]
format = "influx"
[[outputs.influxdb]]
name = "influx-v1"
url = "http://` + down + `"
database = "gpu"
username = "gpusampler"
password = "` + leakSecrets["inline influx"] + `"
[[outputs.influxdb]]
name = "influx-v2"
url = "http://` + down + `"
api = "v2"
organization = "o"
bucket = "b"
token = "${LEAK_INFLUX_TOKEN}"
[[outputs.nats]]
name = "nats-user"
servers = ["nats://` + down + `"]
username = "gpusampler"
password = "${LEAK_NATS_PASSWORD}"
[[outputs.nats]]
name = "nats-token"
servers = ["nats://` + down + `"]
token = "` + leakSecrets["inline nats"] + `"
[[outputs.telegraf]]
name = "telegraf-v1"
url = "http://` + down + `"
username = "gpusampler"
password = "${LEAK_TELEGRAF_PASSWORD}"
[[outputs.telegraf]]
name = "telegraf-v2"
url = "http://` + down + `"
listener = "influxdb_v2_listener"
token = "` + leakSecrets["inline telegraf"] + `"
[[outputs.plugin]]
name = "webhook-env"
path = "` + webhook + `"
sha256 = "` + hex.EncodeToString(sum[:]) + `"
[outputs.plugin.config]
url = "${LEAK_WEBHOOK_URL}"
thresholds = ["power_draw > 1"]
batch_interval = "100ms"
max_retries = 0
[[outputs.plugin]]
name = "webhook-inline"
path = "` + webhook + `"
sha256 = "` + hex.EncodeToString(sum[:]) + `"
[outputs.plugin.config]
url = "http://` + down + `/hooks/` + leakSecrets["inline webhook"] + `"
thresholds = ["power_draw > 1"]
batch_interval = "100ms"
max_retries = 0
[[outputs.prometheus]]
listen = "127.0.0.1:0"
`
	cfg := filepath.Join(dir, "gpusampler.toml")
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	streams := map[string]string{} // stream name → everything it carried

	// config --check, and the errors of secrets used where they are invalid.
	check := exec.Command(bin, "config", "--check", cfg)
	check.Env = env
	out, err := check.CombinedOutput()
	if err != nil || string(out) != cfg+": ok\n" {
		t.Fatalf("config --check: %v\n%s", err, out)
	}
	streams["config --check"] = string(out)
	bad := filepath.Join(dir, "bad.toml")
	// (A value written in clear where it is invalid is the user's own text
	// and is quoted; one from the environment never is.)
	os.WriteFile(bad, []byte("[agent]\nflush_interval = \"${LEAK_DURATION}\"\n[[outputs.influxdb]]\nurl = \"http://"+down+"\"\ndatabase = \"gpu\"\n"+
		"password = \""+leakSecrets["inline influx"]+"\"\nwrite_timeout = \"${LEAK_INFLUX_TOKEN}\"\n"), 0o600)
	for _, args := range [][]string{{"config", "--check", bad}, {"run", "--config", bad}} {
		c := exec.Command(bin, args...)
		c.Env = env
		out, err := c.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "${LEAK_DURATION}") || !strings.Contains(string(out), "${LEAK_INFLUX_TOKEN}") {
			t.Errorf("%s: want a refusal naming ${LEAK_DURATION} and ${LEAK_INFLUX_TOKEN}: %v\n%s", strings.Join(args, " "), err, out)
		}
		streams[strings.Join(args[:2], " ")+" (invalid secrets)"] = string(out)
	}

	cmd := exec.Command(bin, "run", "--config", cfg, "--stats", "--log-level", "debug")
	cmd.Env = env
	r := startE2E(t, cmd)
	// Each wait is for a line that appears once what it stands for has
	// happened: the order of the waits is not the order of the events.
	has := func(sub string) func(string) bool { return func(l string) bool { return strings.Contains(l, sub) } }
	addr := r.waitPromAddr()
	// Both webhook plugins failed a post and logged it; every sink's
	// connection error is in; several rounds of --stats went by.
	for _, o := range []string{"webhook-env", "webhook-inline"} {
		r.waitLine(o+"'s failed post", true, has(`msg="webhook post failed; alerts lost" output=`+o))
	}
	for _, o := range []string{"nats-user", "nats-token"} {
		r.waitLine(o+"'s connection error", true, has("output="+o))
	}
	r.waitLines("three rounds of --stats", true, 3, has("gpusampler stats:"))
	r.waitLine("self-metrics on stdout", false, has("gpusampler_self,"))
	for _, path := range []string{"/metrics", "/healthz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if path == "/metrics" && !strings.Contains(string(b), "gpusampler_self_output_published") {
			t.Errorf("/metrics carries no self-metrics:\n%.2000s", b)
		}
		streams[path] = string(b)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Every sink being down, what it was sent is counted as failed (the
	// final stats say so); each sink's error comes back within its
	// deadline, so the stop is in time. The exit status is 1 when a webhook
	// reports alerts lost at its Close (its close error) and 0 when a Write
	// reported them before: which one depends on when the last post failed.
	if err := r.exit(); err != nil && !isExitCode(err, 1) {
		t.Errorf("exit after SIGTERM: %v, want a stop in time (status 0, or 1 for a webhook's close error)", err)
	}
	r.waitLine("influx-v1's failures counted", true, func(l string) bool {
		return strings.Contains(l, `msg="final output stats" output=influx-v1`) && !strings.Contains(l, " failed=0 ")
	})
	r.mu.Lock()
	streams["run stdout"] = strings.Join(r.stdout, "\n")
	streams["run stderr (debug, --stats, plugin logs)"] = strings.Join(r.stderr, "\n")
	r.mu.Unlock()
	for stream, text := range streams {
		for name, secret := range leakSecrets {
			if n := strings.Count(text, secret); n > 0 {
				i := strings.Index(text, secret)
				t.Errorf("%s printed the secret of %s %d times, first at: %q", stream, name, n, text[max(0, i-200):min(len(text), i+len(secret)+50)])
			}
		}
	}
}

func isExitCode(err error, code int) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == code
}
