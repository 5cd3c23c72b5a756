// Package telegraf is the output that pushes line protocol to a running
// Telegraf: to its inputs.influxdb_listener (default; InfluxDB v1 /write) or
// its inputs.influxdb_v2_listener (/api/v2/write). It is the InfluxDB
// output's writer (outputs/influxdb) pointed at Telegraf: same encoding
// (Telegraf nvidia_smi names and types, ns timestamps), gzip, TLS, retries
// and error classification.
//
// For the other direction — Telegraf running gpusampler as an inputs.execd
// program — see `gpusampler run --execd` (outputs/execd).
package telegraf

import (
	_ "embed"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/influxdb"
	"github.com/gpusampler/gpusampler/record"
)

// SampleConfig is this output's fragment of the example configuration.
//
//go:embed sample.conf
var SampleConfig string

// Listeners are the Telegraf inputs this output can push to.
const (
	ListenerV1 = "influxdb_listener"
	ListenerV2 = "influxdb_v2_listener"
)

// Config is a decoded [[outputs.telegraf]] block.
type Config struct {
	URL      string
	Listener string
	// Database (v1 listener) and Bucket (v2 listener) are sent as the db /
	// bucket parameters: Telegraf turns them into a tag only when the
	// listener sets database_tag / bucket_tag.
	Database, Bucket string
	// Username and Password: the v1 listener's basic_username /
	// basic_password.
	Username, Password string
	// Token: the v2 listener's token.
	Token string
	HTTP  influxdb.HTTPConfig
}

// Kind describes the telegraf output to the config registry.
func Kind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[Config]{
		Kind:         "telegraf",
		SinkKeys:     []string{"url", "listener", "database", "bucket"},
		OutOfProcess: true, // a network output: its own process (plugins.HostRegistry)
		SampleConfig: SampleConfig,
		Parse:        Parse,
		Timeouts: func(o *outputs.Block, c Config) outputs.KindTimeouts {
			return outputs.RequestTimeout(o, "timeout", c.HTTP.Timeout)
		},
		Build: func(o *outputs.Block, c Config, env outputs.BuildEnv) (record.Output, error) {
			opts, err := c.Options(o.Name)
			if err != nil {
				return nil, err
			}
			opts.Host, opts.GlobalTags, opts.Catalog, opts.Logger = env.Host, env.GlobalTags, env.Catalog, env.Logger
			return influxdb.New(opts)
		},
		Check: func(o *outputs.Block, _ Config) (_, warnings config.Errors) {
			return nil, outputs.DefaultWarning(o, DefaultURL, "url")
		},
	})
}

// DefaultURL is where a telegraf block without url pushes (Telegraf's
// influxdb_listener on its usual port).
const DefaultURL = "http://127.0.0.1:8186"

// Parse decodes and checks an [[outputs.telegraf]] block's own keys.
func Parse(t *config.Table) Config {
	c := Config{URL: DefaultURL, Listener: ListenerV1}
	t.String("url", &c.URL)
	t.OneOf("listener", &c.Listener, ListenerV1, ListenerV2)
	t.String("database", &c.Database)
	t.String("bucket", &c.Bucket)
	t.String("username", &c.Username)
	t.String("password", &c.Password)
	t.String("token", &c.Token)
	c.HTTP = influxdb.ParseHTTP(t)
	influxdb.CheckURL(t, c.URL, c.HTTP)
	only := func(l string, keys ...string) {
		for _, k := range keys {
			if t.Has(k) && c.Listener != l {
				t.Errorf(k, "applies to listener = %q only (this block has listener = %q)", l, c.Listener)
			}
		}
	}
	only(ListenerV1, "database", "username", "password")
	only(ListenerV2, "bucket", "token")
	return c
}

// Options turns the config into the InfluxDB output's options for output
// name, reading the TLS files.
func (c Config) Options(name string) (influxdb.Options, error) {
	ic := influxdb.Config{URLs: []string{c.URL}, API: influxdb.APIv1, Database: c.Database, Username: c.Username,
		Password: c.Password, HTTP: c.HTTP}
	if c.Listener == ListenerV2 {
		ic.API, ic.Bucket, ic.Token = influxdb.APIv2, c.Bucket, c.Token
	}
	return ic.Options("telegraf", name)
}
