package prometheus

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
)

// TestWebConfigTLSAndBasicAuth: an exporter-toolkit web config turns on
// TLS and basic auth, as with any Prometheus exporter.
func TestWebConfigTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	der := writeServerCert(t, dir)
	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	webConfig := filepath.Join(dir, "web.yml")
	os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prom: "+string(hash)+"\n"), 0o600)

	o, _ := newTest(t, Options{WebConfig: webConfig})
	o.Write(context.Background(), fullBatch(devices(1), t0.UnixNano()))
	pool := x509.NewCertPool()
	pool.AddCert(must(x509.ParseCertificate(der)))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + o.Addr().String() + "/metrics"
	for _, c := range []struct {
		user, pass string
		want       int
	}{{"", "", http.StatusUnauthorized}, {"prom", "wrong", http.StatusUnauthorized}, {"prom", "s3cret", http.StatusOK}} {
		req, _ := http.NewRequest("GET", url, nil)
		if c.user != "" {
			req.SetBasicAuth(c.user, c.pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("user %q: %d, want %d", c.user, resp.StatusCode, c.want)
		}
	}
	if resp, err := http.Get("http://" + o.Addr().String() + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served metrics with TLS configured")
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestHealthUnauthenticated: with health_unauthenticated a probe without
// credentials reaches /healthz (its real answer, 200 with a fresh device),
// while /metrics still asks for them; without it both do.
func TestHealthUnauthenticated(t *testing.T) {
	dir := t.TempDir()
	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	webConfig := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webConfig, []byte("basic_auth_users:\n  prom: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	status := func(url, user string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		if user != "" {
			req.SetBasicAuth(user, "s3cret")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		unauth            bool
		healthNoAuth      int
		metricsNoAuth     int
		healthWithAuth    int
		metricsWithAuthOK bool
	}{
		{unauth: true, healthNoAuth: http.StatusOK, metricsNoAuth: http.StatusUnauthorized, healthWithAuth: http.StatusOK},
		{unauth: false, healthNoAuth: http.StatusUnauthorized, metricsNoAuth: http.StatusUnauthorized, healthWithAuth: http.StatusOK},
	} {
		o, clk := newTest(t, Options{WebConfig: webConfig, HealthUnauthenticated: c.unauth})
		o.Write(context.Background(), fullBatch(devices(1), clk.Now().UnixNano()))
		base := "http://" + o.Addr().String()
		if got, body := status(base+"/healthz", ""); got != c.healthNoAuth {
			t.Errorf("health_unauthenticated=%v: /healthz without credentials: %d %q, want %d", c.unauth, got, body, c.healthNoAuth)
		} else if got == http.StatusOK && body != "ok: 1 devices sampled within 10s\n" {
			t.Errorf("health_unauthenticated=%v: /healthz body %q", c.unauth, body)
		}
		if got, _ := status(base+"/metrics", ""); got != c.metricsNoAuth {
			t.Errorf("health_unauthenticated=%v: /metrics without credentials: %d, want %d", c.unauth, got, c.metricsNoAuth)
		}
		if got, _ := status(base+"/healthz", "prom"); got != c.healthWithAuth {
			t.Errorf("health_unauthenticated=%v: /healthz with credentials: %d, want %d", c.unauth, got, c.healthWithAuth)
		}
		if got, _ := status(base+"/metrics", "prom"); got != http.StatusOK {
			t.Errorf("health_unauthenticated=%v: /metrics with credentials: %d, want 200", c.unauth, got)
		}
		o.Close()
	}

	reg := outputs.NewRegistry(Kind())
	_, err := appconfig.Parse("g.toml", []byte("[[outputs.prometheus]]\n listen = \"127.0.0.1:0\"\n health_unauthenticated = true\n"), appconfig.Options{Registry: reg})
	if err == nil || err.Error() != "g.toml:3: outputs.prometheus[0].health_unauthenticated: applies only with web_config (without one, nothing is authenticated)" {
		t.Errorf("health_unauthenticated without web_config: %v", err)
	}
	c, err := appconfig.Parse("g.toml", []byte("[[outputs.prometheus]]\n web_config = \"/etc/w.yml\"\n health_unauthenticated = true\n"), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Outputs[0].Options.(Options); !got.HealthUnauthenticated || got.WebConfig != "/etc/w.yml" {
		t.Errorf("parsed %+v", got)
	}
}
