package prometheus

import (
	_ "embed"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/sampler"
)

// SampleConfig is the kind's fragment of the example config.
//
//go:embed sample.conf
var SampleConfig string

// Kind describes the prometheus output to the config registry.
func Kind() outputs.Kind {
	return outputs.Kind{
		Kind:         "prometheus",
		Exclusive:    true, // binds its listen address
		OutOfProcess: true, // a network output: its own process (plugins.HostRegistry)
		SampleConfig: SampleConfig,
		Parse:        Parse,
		Build: func(o *outputs.Block, env outputs.BuildEnv) (sampler.Output, error) {
			opts, _ := o.Options.(Options)
			opts.Host, opts.GlobalTags, opts.Logger, opts.Catalog = env.Host, env.GlobalTags, env.Logger, env.Catalog
			return New(opts)
		},
	}
}

// Parse decodes a [[outputs.prometheus]] block's own keys into Options. It
// does no I/O: the web config file is read, and the address bound, by New.
func Parse(t *config.Table) any {
	o := Options{Listen: DefaultListen, Path: DefaultPath, Naming: NamingDCGM,
		Window: DefaultWindow, Stale: DefaultStale}
	t.String("listen", &o.Listen)
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
