package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
	// Every sink is down: a loopback port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()

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
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	var mu sync.Mutex
	var outText, errText strings.Builder
	var wg sync.WaitGroup
	read := func(r io.Reader, dst *strings.Builder) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			mu.Lock()
			dst.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}
	wg.Add(2)
	go read(stdout, &outText)
	go read(stderr, &errText)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Minute)
		for {
			mu.Lock()
			ok := cond()
			mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("no %s within 5 minutes (prometheus listening %v, webhook-env failed %v, webhook-inline failed %v, "+
					"nats-user %v, nats-token %v, stats rounds %d, self-metrics on stdout %v); stderr ends:\n%s", what,
					strings.Contains(errText.String(), `msg="Listening on" output=prometheus`),
					strings.Contains(errText.String(), `msg="webhook post failed; alerts lost" output=webhook-env`),
					strings.Contains(errText.String(), `msg="webhook post failed; alerts lost" output=webhook-inline`),
					strings.Contains(errText.String(), "output=nats-user"), strings.Contains(errText.String(), "output=nats-token"),
					strings.Count(errText.String(), "gpusampler stats:"), strings.Contains(outText.String(), "gpusampler_self,"),
					tail(errText.String(), 8000))
			}
			time.Sleep(20 * time.Millisecond) // polling the process's output, not timing it
		}
	}
	addrRE := regexp.MustCompile(`msg="Listening on" output=prometheus address=(127\.0\.0\.1:\d+)`)
	var addr string
	// Both webhook plugins failed a post and logged it; every sink's
	// connection error is in; several rounds of --stats went by.
	waitFor("the outputs' failures and three rounds of --stats", func() bool {
		s := errText.String()
		if m := addrRE.FindStringSubmatch(s); m != nil {
			addr = m[1]
		}
		return addr != "" && strings.Count(s, `msg="webhook post failed; alerts lost" output=webhook-env`) > 0 &&
			strings.Count(s, `msg="webhook post failed; alerts lost" output=webhook-inline`) > 0 &&
			strings.Contains(s, "output=nats-user") && strings.Contains(s, "output=nats-token") &&
			strings.Count(s, "gpusampler stats:") >= 3 && strings.Contains(outText.String(), "gpusampler_self,")
	})
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
	cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { wg.Wait(); cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(3 * time.Minute):
		// A hang, not slowness: dump the goroutines to stderr for the report.
		cmd.Process.Signal(syscall.SIGQUIT)
		<-exited
		mu.Lock()
		t.Fatalf("gpusampler did not exit within 3 minutes of SIGTERM; stderr ends:\n%s", tail(errText.String(), 20000))
	}
	streams["run stdout"], streams["run stderr (debug, --stats, plugin logs)"] = outText.String(), errText.String()
	for stream, text := range streams {
		for name, secret := range leakSecrets {
			if n := strings.Count(text, secret); n > 0 {
				i := strings.Index(text, secret)
				t.Errorf("%s printed the secret of %s %d times, first at: %q", stream, name, n, text[max(0, i-200):min(len(text), i+len(secret)+50)])
			}
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
