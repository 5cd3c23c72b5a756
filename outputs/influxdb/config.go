package influxdb

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// Config is a decoded [[outputs.influxdb]] block: plain data, validated
// without I/O (the TLS files are read when the output is built).
type Config struct {
	// URLs are the servers, tried in turn (Telegraf's urls); url is the
	// one-server spelling of the same key.
	URLs                      []string
	API                       string
	Database, RetentionPolicy string
	Username, Password        string
	Organization, Bucket      string
	Token                     string
	// SkipDatabaseCreation (v1): never send CREATE DATABASE for a missing
	// database (Telegraf's key; default false: a write that finds it
	// missing creates it).
	SkipDatabaseCreation bool
	HTTP                 HTTPConfig
}

// HTTPConfig holds the transport keys shared with outputs/telegraf.
type HTTPConfig struct {
	// ContentEncoding is "identity" (default) or "gzip".
	ContentEncoding string
	// Timeout bounds one request.
	Timeout time.Duration
	// MaxPayloadBytes splits larger bodies.
	MaxPayloadBytes int
	TLS             TLSConfig
}

// TLSConfig names the client's TLS files and settings; outputs.TLSClient
// loads them, as for every network output.
type TLSConfig = outputs.TLSClient

// Kind describes the influxdb output to the config registry.
func Kind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[Config]{
		Kind:         "influxdb",
		SinkKeys:     []string{"url", "urls", "api", "database", "retention_policy", "organization", "bucket"},
		OutOfProcess: true, // a network output: its own process (plugins.HostRegistry)
		SampleConfig: SampleConfig,
		Parse:        Parse,
		Timeouts: func(o *outputs.Block, c Config) outputs.KindTimeouts {
			return outputs.RequestTimeout(o, "timeout", c.HTTP.Timeout)
		},
		Build: func(o *outputs.Block, c Config, env outputs.BuildEnv) (record.Output, error) {
			opts, err := c.Options("influxdb", o.Name)
			if err != nil {
				return nil, err
			}
			opts.Host, opts.GlobalTags, opts.Catalog, opts.Logger = env.Host, env.GlobalTags, env.Catalog, env.Logger
			return New(opts)
		},
		Check: func(o *outputs.Block, _ Config) (_, warnings config.Errors) {
			return nil, outputs.DefaultWarning(o, DefaultURL, "url", "urls")
		},
	})
}

// Parse decodes and checks an [[outputs.influxdb]] block's own keys.
func Parse(t *config.Table) Config {
	c := Config{API: APIv1}
	c.URLs = outputs.ParseServers(t, "url", "urls", []string{DefaultURL}, "server")
	t.OneOf("api", &c.API, APIs...)
	t.String("database", &c.Database)
	t.String("retention_policy", &c.RetentionPolicy)
	t.String("username", &c.Username)
	t.String("password", &c.Password)
	t.String("organization", &c.Organization)
	t.String("bucket", &c.Bucket)
	t.String("token", &c.Token)
	t.Bool("skip_database_creation", &c.SkipDatabaseCreation)
	c.HTTP = ParseHTTP(t)
	for i, u := range c.URLs {
		key := "url"
		if t.Has("urls") {
			key = fmt.Sprintf("urls[%d]", i)
		}
		CheckURLAt(t, key, u, c.HTTP)
	}
	only := func(api string, keys ...string) {
		for _, k := range keys {
			if t.Has(k) && c.API != api {
				t.Errorf(k, "applies to api = %q only (this block has api = %q)", api, c.API)
			}
		}
	}
	only(APIv1, "retention_policy", "username", "password", "skip_database_creation")
	only(APIv2, "organization", "bucket")
	switch c.API {
	case APIv1:
		if c.Database == "" {
			t.Errorf("database", "required for api = \"v1\"")
		}
		if t.Has("token") {
			t.Errorf("token", "applies to api = \"v2\" or \"v3\" (v1 uses username and password)")
		}
	case APIv2:
		if t.Has("database") {
			t.Errorf("database", "applies to api = \"v1\" or \"v3\" (v2 writes to bucket)")
		}
		if c.Bucket == "" {
			t.Errorf("bucket", "required for api = \"v2\"")
		}
		if c.Organization == "" {
			t.Errorf("organization", "required for api = \"v2\"")
		}
	case APIv3:
		if c.Database == "" {
			t.Errorf("database", "required for api = \"v3\"")
		}
	}
	return c
}

// ParseHTTP decodes the transport keys: content_encoding, timeout,
// max_payload_bytes, tls_ca, tls_cert, tls_key, tls_server_name,
// insecure_skip_verify.
func ParseHTTP(t *config.Table) HTTPConfig {
	h := HTTPConfig{ContentEncoding: "identity", Timeout: DefaultTimeout, MaxPayloadBytes: DefaultMaxPayloadBytes}
	t.OneOf("content_encoding", &h.ContentEncoding, "identity", "gzip")
	t.Duration("timeout", &h.Timeout)
	t.Int("max_payload_bytes", &h.MaxPayloadBytes, 1<<10, 1<<30)
	h.TLS = outputs.ParseTLSClient(t)
	return h
}

// DefaultURL is the server an influxdb block without url or urls writes to.
const DefaultURL = "http://127.0.0.1:8086"

// CheckURL reports a URL that cannot work, at the url key.
func CheckURL(t *config.Table, raw string, h HTTPConfig) { CheckURLAt(t, "url", raw, h) }

// CheckURLAt reports a URL that cannot work, at key (url, urls[i]).
func CheckURLAt(t *config.Table, key, raw string, h HTTPConfig) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		t.Errorf(key, "%q is not a URL: %v", raw, errors.Unwrap(err))
		return
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		t.Errorf(key, "%q: want http://HOST:PORT or https://HOST:PORT", raw)
		return
	case u.User != nil:
		t.Errorf(key, "credentials in the URL: use username/password or token (with ${ENV})")
	}
	if u.Scheme == "http" && (h.TLS != TLSConfig{}) {
		t.Errorf(key, "tls_* keys are set but the URL is http://: use https://")
	}
}

// Options turns the config into writer options for output kind/name,
// reading the TLS files.
func (c Config) Options(kind, name string) (Options, error) {
	tlsConf, err := c.HTTP.TLS.Load()
	if err != nil {
		return Options{}, fmt.Errorf("%s %q: %w", kind, name, err)
	}
	return Options{URLs: c.URLs, WriterOptions: WriterOptions{Kind: kind, Name: name, URL: c.URLs[0], API: c.API,
		Database: c.Database, RetentionPolicy: c.RetentionPolicy, Username: c.Username, Password: c.Password,
		Organization: c.Organization, Bucket: c.Bucket, Token: c.Token, Gzip: c.HTTP.ContentEncoding == "gzip",
		Timeout: c.HTTP.Timeout, MaxPayloadBytes: c.HTTP.MaxPayloadBytes, TLS: tlsConf,
		CreateDatabase: c.API == APIv1 && !c.SkipDatabaseCreation}}, nil
}
