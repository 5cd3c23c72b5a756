package telegraf_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/outputs/telegraf"
	"github.com/gpusampler/gpusampler/record"
)

func parse(t *testing.T, doc string) (*appconfig.Config, error) {
	t.Helper()
	return appconfig.Parse("test.toml", []byte(doc), appconfig.Options{Registry: outputs.NewRegistry(telegraf.Kind())})
}

// Conformance against a stand-in listener; Telegraf's real listeners run
// in test/telegraf.
func TestConformance(t *testing.T) {
	for _, listener := range []string{telegraf.ListenerV1, telegraf.ListenerV2} {
		t.Run(listener, func(t *testing.T) {
			var mu sync.Mutex
			var body []byte
			var paths []string
			outputtest.Run(t, outputtest.Harness{
				New: func(t *testing.T) record.Output {
					mu.Lock()
					body, paths = nil, nil
					mu.Unlock()
					srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						b, _ := io.ReadAll(r.Body)
						mu.Lock()
						body = append(body, b...)
						paths = append(paths, r.URL.Path)
						mu.Unlock()
						w.WriteHeader(http.StatusNoContent)
					}))
					t.Cleanup(srv.Close)
					cfg, err := parse(t, "[[outputs.telegraf]]\nurl = \""+srv.URL+"\"\nlistener = \""+listener+"\"\n")
					if err != nil {
						t.Fatal(err)
					}
					out, err := telegraf.Kind().Build(&cfg.Outputs[0].Block, outputs.BuildEnv{Host: "node1"})
					if err != nil {
						t.Fatal(err)
					}
					return out
				},
				Received: func(t *testing.T) []record.Sample {
					mu.Lock()
					defer mu.Unlock()
					want := "/write"
					if listener == telegraf.ListenerV2 {
						want = "/api/v2/write"
					}
					for _, p := range paths {
						if p != want {
							t.Fatalf("posted to %s, want %s", p, want)
						}
					}
					s, err := influxtest.DecodeSamples(body)
					if err != nil {
						t.Fatal(err)
					}
					return s
				},
			})
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"listener = \"http_listener\"", `test.toml:3: outputs.telegraf[0].listener: unknown value "http_listener"`},
		{"token = \"x\"", `outputs.telegraf[0].token: applies to listener = "influxdb_v2_listener" only`},
		{"listener = \"influxdb_v2_listener\"\npassword = \"x\"", `outputs.telegraf[0].password: applies to listener = "influxdb_listener" only`},
		{"url = \"127.0.0.1:8186\"", `outputs.telegraf[0].url:`},
		{"org = \"x\"", `outputs.telegraf[0].org: unknown key`},
	} {
		_, err := parse(t, "\n[[outputs.telegraf]]\n"+tc.doc+"\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.doc, err, tc.want)
		}
	}
}
