package influxdb_test

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/influxdb"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

// sink is an httptest server that accepts every write and keeps the body.
type sink struct {
	mu   sync.Mutex
	body []byte
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var rd io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		rd = zr
	}
	b, _ := io.ReadAll(rd)
	s.mu.Lock()
	s.body = append(s.body, b...)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *sink) samples(t *testing.T) []record.Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, err := influxtest.DecodeSamples(s.body)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestConformance(t *testing.T) {
	for _, api := range influxdb.APIs {
		t.Run(api, func(t *testing.T) {
			var cur *sink
			outputtest.Run(t, outputtest.Harness{
				New: func(t *testing.T) record.Output {
					cur = &sink{}
					srv := httptest.NewServer(cur)
					t.Cleanup(srv.Close)
					out, err := influxdb.New(influxdb.Options{WriterOptions: influxdb.WriterOptions{URL: srv.URL, API: api,
						Database: "gpu", Bucket: "gpu", Organization: "o", Token: "t", Gzip: api == influxdb.APIv3,
						MaxPayloadBytes: 64 << 10}, Host: "node1"})
					if err != nil {
						t.Fatal(err)
					}
					return out
				},
				Received: func(t *testing.T) []record.Sample { return cur.samples(t) },
			})
		})
	}
}

func parse(t *testing.T, doc string) (*appconfig.Config, error) {
	t.Helper()
	reg := outputs.NewRegistry(influxdb.Kind())
	return appconfig.Parse("test.toml", []byte(doc), appconfig.Options{Registry: reg,
		LookupEnv: func(k string) (string, bool) { return map[string]string{"TOKEN": "s3cret"}[k], k == "TOKEN" }})
}

func TestConfig(t *testing.T) {
	cfg, err := parse(t, `
[[outputs.influxdb]]
name = "v2"
url = "https://influx.example:8086"
api = "v2"
organization = "org"
bucket = "gpu"
token = "${TOKEN}"
content_encoding = "gzip"
timeout = "2s"
insecure_skip_verify = true
`)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Outputs[0].Options.(influxdb.Config)
	if c.API != "v2" || c.Token != "s3cret" || c.Bucket != "gpu" || c.HTTP.ContentEncoding != "gzip" || !c.HTTP.TLS.InsecureSkipVerify {
		t.Fatalf("parsed %+v", c)
	}
	for _, tc := range []struct{ doc, want string }{
		{"url = \"ftp://x\"\ndatabase = \"d\"", `test.toml:3: outputs.influxdb[0].url: "ftp://x": want http://HOST:PORT`},
		{"api = \"v4\"", `outputs.influxdb[0].api: unknown value "v4" (want one of: v1, v2, v3)`},
		{"database = \"\"", `test.toml:3: outputs.influxdb[0].database: required for api = "v1"`},
		{"api = \"v2\"\nbucket = \"b\"", `outputs.influxdb[0].organization: required for api = "v2"`},
		{"database = \"d\"\ntoken = \"x\"", `outputs.influxdb[0].token: applies to api = "v2" or "v3"`},
		{"api = \"v3\"\ndatabase = \"d\"\nusername = \"u\"", `outputs.influxdb[0].username: applies to api = "v1" only`},
		{"database = \"d\"\ntls_ca = \"/ca.pem\"", `outputs.influxdb[0].url: tls_* keys are set but the URL is http://`},
		{"url = \"https://h\"\ndatabase = \"d\"\ntls_cert = \"c.pem\"", `outputs.influxdb[0].tls_key: tls_cert and tls_key go together`},
		{"database = \"d\"\ntimeout = 5", `outputs.influxdb[0].timeout: want a duration string`},
		{"database = \"d\"\npasword = \"x\"", `outputs.influxdb[0].pasword: unknown key`},
		{"url = \"http://u:p@h:8086\"\ndatabase = \"d\"", `outputs.influxdb[0].url: credentials in the URL`},
	} {
		_, err := parse(t, "\n[[outputs.influxdb]]\n"+tc.doc+"\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want %q", tc.doc, err, tc.want)
		}
	}
}

// Build reads the TLS files: a missing CA is an error naming the output.
func TestBuildTLSError(t *testing.T) {
	cfg, err := parse(t, "[[outputs.influxdb]]\nname = \"secure\"\nurl = \"https://h:8086\"\ndatabase = \"d\"\ntls_ca = \"/nonexistent/ca.pem\"\n")
	if err != nil {
		t.Fatal(err)
	}
	_, err = influxdb.Kind().Build(&cfg.Outputs[0].Block, outputs.BuildEnv{})
	if err == nil || !strings.Contains(err.Error(), `influxdb "secure": tls_ca:`) {
		t.Fatalf("Build = %v", err)
	}
}

// TLS with the server's CA verifies; without it the error says why.
func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(&sink{})
	defer srv.Close()
	caFile := t.TempDir() + "/ca.pem"
	writePEM(t, caFile, srv.Certificate().Raw)
	ctx := context.Background()
	b := &record.Batch{Samples: outputtest.Samples(3)}
	for _, tc := range []struct {
		name    string
		tls     influxdb.TLSConfig
		wantErr string
	}{
		{"ca", influxdb.TLSConfig{CA: caFile}, ""},
		{"skip-verify", influxdb.TLSConfig{InsecureSkipVerify: true}, ""},
		{"unknown-ca", influxdb.TLSConfig{}, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := influxdb.Config{URLs: []string{srv.URL}, API: "v1", Database: "d", HTTP: influxdb.HTTPConfig{TLS: tc.tls}}
			opts, err := c.Options("influxdb", tc.name)
			if err != nil {
				t.Fatal(err)
			}
			out, err := influxdb.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			// generous: a certificate error comes back at once, not at
			// the deadline
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			err = out.Write(wctx, b)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Write = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

// ReportStats (record.StatsReporter) carries the writer's and encoder's
// counters as self-metrics.
func TestReportStats(t *testing.T) {
	srv := httptest.NewServer(&sink{})
	defer srv.Close()
	out, err := influxdb.New(influxdb.Options{WriterOptions: influxdb.WriterOptions{URL: srv.URL, API: influxdb.APIv1,
		Database: "gpu"}, Host: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := out.Write(context.Background(), &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device},
		Samples: outputtest.Samples(3)}); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	var keys []string
	for _, f := range record.ReportStats(out, nil) {
		if !f.Int {
			t.Errorf("%s: not an integer field", f.Key)
		}
		got[f.Key] = f.Value
		keys = append(keys, f.Key)
	}
	if want := "http_requests http_retries bytes_sent partial_writes rejected_points batches lines encode_refused_batches failovers"; strings.Join(keys, " ") != want {
		t.Errorf("keys %v, want %s", keys, want)
	}
	if got["http_requests"] != 1 || got["batches"] != 1 || got["lines"] == 0 || got["bytes_sent"] == 0 {
		t.Errorf("stats %v", got)
	}
}
