package opentelemetry_test

import (
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
)

func parseConfig(t *testing.T, doc string) (*appconfig.Config, error) {
	t.Helper()
	reg := outputs.NewRegistry(opentelemetry.Kind())
	return appconfig.Parse("test.toml", []byte(doc), appconfig.Options{Registry: reg,
		LookupEnv: func(k string) (string, bool) { return map[string]string{"TOKEN": "s3cret"}[k], k == "TOKEN" }})
}

func TestConfig(t *testing.T) {
	cfg, err := parseConfig(t, `
[[outputs.opentelemetry]]
protocol = "http/protobuf"
endpoints = ["https://otel-a:4318", "https://otel-b:4318/prefix"]
compression = "none"
timeout = "2s"
headers = { authorization = "Bearer ${TOKEN}" }
resource_attributes = { "deployment.environment.name" = "prod" }
insecure_skip_verify = true

[[outputs.opentelemetry]]
name = "defaults"
`)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Outputs[0].Options.(opentelemetry.Config)
	if c.Protocol != opentelemetry.ProtocolHTTP || len(c.Endpoints) != 2 || c.Compression != "none" || c.Timeout.String() != "2s" ||
		c.Headers["authorization"] != "Bearer s3cret" || c.ResourceAttributes["deployment.environment.name"] != "prod" || !c.TLS.InsecureSkipVerify {
		t.Fatalf("parsed %+v", c)
	}
	d := cfg.Outputs[1].Options.(opentelemetry.Config)
	if d.Protocol != "grpc" || d.Endpoints[0] != opentelemetry.DefaultGRPCEndpoint || d.Compression != "gzip" || d.Timeout != opentelemetry.DefaultTimeout {
		t.Fatalf("defaults %+v", d)
	}
	for _, tc := range []struct{ doc, want string }{
		{"protocol = \"http/json\"", `test.toml:3: outputs.opentelemetry[0].protocol: unknown value "http/json" (want one of: grpc, http/protobuf)`},
		{"endpoint = \"ftp://x:1\"", `test.toml:3: outputs.opentelemetry[0].endpoint: "ftp://x:1": want http://HOST:PORT`},
		{"endpoint = \"collector\"", `outputs.opentelemetry[0].endpoint: "collector": want host:port`},
		{"endpoint = \"http://c\"", `outputs.opentelemetry[0].endpoint: "http://c": name the port`},
		{"endpoint = \"http://c:4317/v1\"", `outputs.opentelemetry[0].endpoint: "http://c:4317/v1": a gRPC endpoint has no path`},
		{"endpoint = \"a:1\"\nendpoints = [\"b:1\"]", `outputs.opentelemetry[0].endpoints: set endpoint or endpoints, not both`},
		{"endpoints = []", `outputs.opentelemetry[0].endpoints: empty`},
		{"endpoints = [\"a:1\", \"ftp://b\"]", `test.toml:3: outputs.opentelemetry[0].endpoints[1]: "ftp://b": want`},
		{"compression = \"zstd\"", `outputs.opentelemetry[0].compression: unknown value "zstd"`},
		{"timeout = 5", `outputs.opentelemetry[0].timeout: want a duration string`},
		{"headers = { \"bad name\" = \"${TOKEN}\" }", `outputs.opentelemetry[0].headers."bad name": header name "bad name"`},
		{"headers = { content-type = \"x\" }", `outputs.opentelemetry[0].headers.content-type: header "content-type" is set by the exporter`},
		{"headers = { authorization = 5 }", `outputs.opentelemetry[0].headers.authorization: want a string`},
		{"tls_ca = \"/ca.pem\"\nendpoint = \"http://c:4317\"", `outputs.opentelemetry[0].endpoint: tls_* keys are set but the endpoint is http://`},
		{"tls_cert = \"c.pem\"\nendpoint = \"https://c:4317\"", `outputs.opentelemetry[0].tls_key: tls_cert and tls_key go together`},
		{"endpiont = \"c:4317\"", `test.toml:3: outputs.opentelemetry[0].endpiont: unknown key`},
		{"endpoint = \"http://user:pw@c:4318\"\nprotocol = \"http/protobuf\"", `credentials in the URL`},
	} {
		_, err := parseConfig(t, "\n[[outputs.opentelemetry]]\n"+tc.doc+"\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q: error %v, want %q", tc.doc, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("config %q: the error shows a header's value: %v", tc.doc, err)
		}
	}
}

// Build reads the TLS files: a missing CA is an error naming the output.
func TestBuildTLSError(t *testing.T) {
	cfg, err := parseConfig(t, "[[outputs.opentelemetry]]\nname = \"secure\"\nendpoint = \"https://h:4317\"\ntls_ca = \"/nonexistent/ca.pem\"\n")
	if err != nil {
		t.Fatal(err)
	}
	_, err = opentelemetry.Kind().Build(&cfg.Outputs[0].Block, outputs.BuildEnv{})
	if err == nil || !strings.Contains(err.Error(), `opentelemetry "secure": tls_ca:`) {
		t.Fatalf("Build = %v", err)
	}
}
