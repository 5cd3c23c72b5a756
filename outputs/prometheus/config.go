package prometheus

import (
	_ "embed"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// SampleConfig is the kind's fragment of the example config.
//
//go:embed sample.conf
var SampleConfig string

// Kind describes the prometheus output to the config registry.
func Kind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[Options]{
		Kind:         "prometheus",
		SinkKeys:     []string{"listen", "path"},
		Exclusive:    true, // binds its listen address
		OutOfProcess: true, // a network output: its own process (plugins.HostRegistry)
		SampleConfig: SampleConfig,
		Parse:        Parse,
		Check:        Check,
		Build: func(_ *outputs.Block, opts Options, env outputs.BuildEnv) (record.Output, error) {
			opts.Host, opts.GlobalTags, opts.Logger, opts.Catalog = env.Host, env.GlobalTags, env.Logger, env.Catalog
			return New(opts)
		},
	})
}

// Parse decodes a [[outputs.prometheus]] block's own keys into Options. It
// does no I/O: the web config file is read, and the address bound, by New.
func Parse(t *config.Table) Options {
	o := Options{Listen: DefaultListen, Path: DefaultPath, Naming: NamingDCGM,
		Window: DefaultWindow, Stale: DefaultStale}
	t.String("listen", &o.Listen)
	if err := checkListen(o.Listen); err != nil {
		t.Errorf("listen", "%q: %v", o.Listen, err)
	}
	t.String("path", &o.Path)
	if t.Has("path") && (len(o.Path) == 0 || o.Path[0] != '/' || o.Path == "/healthz") {
		t.Errorf("path", "%q: want an absolute path other than /healthz", o.Path)
	}
	t.OneOf("naming", &o.Naming, Namings...)
	t.OneOf("host_label", &o.HostLabel, HostLabels...)
	t.Duration("window", &o.Window)
	t.Duration("stale", &o.Stale)
	t.String("web_config", &o.WebConfig)
	t.Bool("health_unauthenticated", &o.HealthUnauthenticated)
	t.Bool("health_fail_on_outputs", &o.HealthFailOnOutputs)
	if o.HealthUnauthenticated && o.WebConfig == "" {
		t.Errorf("health_unauthenticated", "applies only with web_config (without one, nothing is authenticated)")
	}
	return o
}

// ListenAddress returns the listen key's address (outputs.Listener: two
// blocks may not listen on one address).
func (o Options) ListenAddress() string { return o.Listen }

// checkListen checks a listen address as net.Listen would take it, without
// binding it: host:port, the host empty, an IP address or a name that is
// not a malformed address, the port a number 0-65535.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port (\":9400\", \"127.0.0.1:9400\", \"[::1]:9400\")")
	}
	if host != "" && net.ParseIP(host) == nil && strings.Trim(host, "0123456789.") == "" {
		return fmt.Errorf("%s is not an IP address", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q: want a number 0-65535", port)
	}
	return nil
}

// Check checks, for config --check, the web config file: that it exists
// and is valid (TLS files, bcrypt hashes), as New will, and what
// webConfigFindings reports (an empty file is a problem; basic auth
// without TLS, neither, and TLS before 1.2 are warnings).
func Check(o *outputs.Block, opts Options) (problems, warnings config.Errors) {
	if opts.WebConfig == "" {
		return nil, nil
	}
	if err := web.Validate(opts.WebConfig); err != nil {
		return config.Errors{o.ErrorAt("web_config", fmt.Sprintf("%s: %v", opts.WebConfig, err))}, nil
	}
	p, w, err := webConfigFindings(opts.WebConfig)
	if err != nil {
		return config.Errors{o.ErrorAt("web_config", fmt.Sprintf("%s: %v", opts.WebConfig, err))}, nil
	}
	for _, m := range p {
		problems = append(problems, o.ErrorAt("web_config", m))
	}
	for _, m := range w {
		warnings = append(warnings, o.ErrorAt("web_config", m))
	}
	return problems, warnings
}
