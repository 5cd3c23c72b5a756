package opentelemetry

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// Protocols.
const (
	// ProtocolGRPC is OTLP/gRPC: MetricsService/Export.
	ProtocolGRPC = "grpc"
	// ProtocolHTTP is OTLP/HTTP with binary protobuf bodies: POST
	// <endpoint>/v1/metrics.
	ProtocolHTTP = "http/protobuf"
)

// Protocols lists the supported protocols.
var Protocols = []string{ProtocolGRPC, ProtocolHTTP}

// Compressions.
const (
	CompressionGzip = "gzip"
	CompressionNone = "none"
)

// Defaults: the OTLP exporter's (ports 4317 for gRPC and 4318 for HTTP,
// gzip, a 10 s exporter timeout shortened to fit the default
// write_timeout's budget).
const (
	DefaultGRPCEndpoint = "http://127.0.0.1:4317"
	DefaultHTTPEndpoint = "http://127.0.0.1:4318"
	DefaultTimeout      = 5 * time.Second
	// DefaultMaxRequestBytes keeps a request under the collector's
	// default gRPC message limit (4 MiB, after decompression).
	DefaultMaxRequestBytes = 4_000_000
)

// Config is a decoded [[outputs.opentelemetry]] block: plain data,
// validated without I/O (the TLS files are read when the output is built).
// Headers hold credentials: never print a Config.
type Config struct {
	// Endpoints: endpoint (one) or endpoints (failover, in order).
	Endpoints []string
	// Protocol: protocol, ProtocolGRPC or ProtocolHTTP.
	Protocol string
	// Headers: headers, sent with every export (gRPC metadata or HTTP
	// headers); values usually come from ${ENV}.
	Headers map[string]string
	// Compression: compression, CompressionGzip (default) or
	// CompressionNone.
	Compression string
	// Timeout: timeout, the bound of one export request.
	Timeout time.Duration
	// MaxRequestBytes: max_request_bytes, the size an export request
	// stays under (before compression); a larger batch goes in several.
	MaxRequestBytes int
	// ResourceAttributes: resource_attributes, added to every resource.
	ResourceAttributes map[string]string
	// TLS: tls_ca, tls_cert, tls_key, tls_server_name,
	// insecure_skip_verify.
	TLS outputs.TLSClient
}

// Kind describes the opentelemetry output to the config registry.
func Kind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[Config]{
		Kind:         "opentelemetry",
		SinkKeys:     []string{"endpoint", "endpoints"},
		OutOfProcess: true, // a network output: its own process (plugins.HostRegistry)
		SampleConfig: SampleConfig,
		// Aggregate windows carry their samples' distribution.
		SummaryHistograms: SummaryHistograms,
		Parse:             Parse,
		Timeouts: func(o *outputs.Block, c Config) outputs.KindTimeouts {
			return outputs.RequestTimeout(o, "timeout", c.Timeout)
		},
		Build: func(o *outputs.Block, c Config, env outputs.BuildEnv) (record.Output, error) {
			opts, err := c.Options(o.Name)
			if err != nil {
				return nil, err
			}
			opts.Host, opts.GlobalTags, opts.Catalog, opts.Logger = env.Host, env.GlobalTags, env.Catalog, env.Logger
			opts.Aggregate, opts.Version = o.Aggregate, env.Version
			return New(opts)
		},
		Check: func(o *outputs.Block, c Config) (_, warnings config.Errors) {
			def := DefaultGRPCEndpoint
			if c.Protocol == ProtocolHTTP {
				def = DefaultHTTPEndpoint
			}
			return nil, outputs.DefaultWarning(o, def, "endpoint", "endpoints")
		},
	})
}

// Parse decodes and checks an [[outputs.opentelemetry]] block's own keys.
func Parse(t *config.Table) Config {
	c := Config{Protocol: ProtocolGRPC, Compression: CompressionGzip, Timeout: DefaultTimeout, MaxRequestBytes: DefaultMaxRequestBytes}
	t.OneOf("protocol", &c.Protocol, Protocols...)
	def := []string{DefaultGRPCEndpoint}
	if c.Protocol == ProtocolHTTP {
		def = []string{DefaultHTTPEndpoint}
	}
	c.Endpoints = outputs.ParseServers(t, "endpoint", "endpoints", def, "collector")
	t.OneOf("compression", &c.Compression, CompressionGzip, CompressionNone)
	t.Duration("timeout", &c.Timeout)
	t.Int("max_request_bytes", &c.MaxRequestBytes, 64<<10, 1<<30)
	if t.Has("headers") {
		h := t.Sub("headers")
		c.Headers = h.StringMap()
		for k := range c.Headers {
			if msg := checkHeaderName(k); msg != "" {
				h.Errorf(k, "%s", msg)
			}
		}
	}
	if t.Has("resource_attributes") {
		c.ResourceAttributes = t.Sub("resource_attributes").StringMap()
	}
	c.TLS = outputs.ParseTLSClient(t)
	for i, e := range c.Endpoints {
		key := "endpoint"
		if t.Has("endpoints") {
			key = fmt.Sprintf("endpoints[%d]", i)
		}
		if _, err := parseEndpoint(c.Protocol, e, c.TLS != (outputs.TLSClient{})); err != nil {
			t.Errorf(key, "%v", err)
		}
	}
	return c
}

// checkHeaderName returns why name cannot be a header (an HTTP token,
// lower case for gRPC metadata), or "".
func checkHeaderName(name string) string {
	if name == "" {
		return "empty header name"
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.!#$%&'*+^`|~", r)
		if !ok {
			return fmt.Sprintf("header name %q: only letters, digits and - _ . ! # $ %% & ' * + ^ ` | ~", name)
		}
	}
	switch strings.ToLower(name) {
	case "content-type", "content-encoding", "content-length", "te", "grpc-timeout", "grpc-encoding", "user-agent":
		return fmt.Sprintf("header %q is set by the exporter itself", name)
	}
	if strings.HasPrefix(strings.ToLower(name), "grpc-") {
		return fmt.Sprintf("header %q: grpc- names are reserved by gRPC", name)
	}
	return ""
}

// endpoint is one parsed collector address.
type endpoint struct {
	// target is what the transport dials: host:port (gRPC) or the full
	// metrics URL (HTTP).
	target string
	// secure: TLS.
	secure bool
}

// parseEndpoint checks e for protocol. gRPC takes http://host:port (plain
// text), https://host:port (TLS) or host:port (plain text unless a tls_*
// key is set); HTTP takes http(s)://host:port[/prefix] and posts to
// /v1/metrics under it.
func parseEndpoint(protocol, e string, tlsSet bool) (endpoint, error) {
	if protocol == ProtocolGRPC && !strings.Contains(e, "://") {
		if e == "" || strings.ContainsAny(e, "/?#@") || !strings.Contains(e, ":") {
			return endpoint{}, fmt.Errorf("%q: want host:port, http://host:port or https://host:port", e)
		}
		return endpoint{target: e, secure: tlsSet}, nil
	}
	u, err := url.Parse(e)
	switch {
	case err != nil:
		return endpoint{}, fmt.Errorf("%q is not a URL: %v", e, errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return endpoint{}, fmt.Errorf("%q: want http://HOST:PORT or https://HOST:PORT", e)
	case u.User != nil:
		return endpoint{}, fmt.Errorf("credentials in the URL: use headers (with ${ENV})")
	case u.RawQuery != "" || u.Fragment != "":
		return endpoint{}, fmt.Errorf("%q: no query or fragment, please", u.Redacted())
	}
	if u.Scheme == "http" && tlsSet {
		return endpoint{}, fmt.Errorf("tls_* keys are set but the endpoint is http://: use https://")
	}
	if protocol == ProtocolGRPC {
		if u.Path != "" && u.Path != "/" {
			return endpoint{}, fmt.Errorf("%q: a gRPC endpoint has no path (the service is opentelemetry.proto.collector.metrics.v1.MetricsService)", e)
		}
		if u.Port() == "" {
			return endpoint{}, fmt.Errorf("%q: name the port (the OTLP/gRPC default is 4317)", e)
		}
		return endpoint{target: u.Host, secure: u.Scheme == "https"}, nil
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/v1/metrics"
	return endpoint{target: u.String(), secure: u.Scheme == "https"}, nil
}

// Options turns the config into output options for the block named name,
// reading the TLS files.
func (c Config) Options(name string) (Options, error) {
	tlsConf, err := c.TLS.Load()
	if err != nil {
		return Options{}, fmt.Errorf("opentelemetry %q: %w", name, err)
	}
	return Options{Name: name, Endpoints: c.Endpoints, Protocol: c.Protocol, Headers: c.Headers,
		Gzip: c.Compression == CompressionGzip, Timeout: c.Timeout, MaxRequestBytes: c.MaxRequestBytes, TLS: tlsConf,
		ResourceAttributes: c.ResourceAttributes}, nil
}
