package stdout

import (
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/sampler"
)

// Kind describes the stdout output to the config registry.
func Kind() config.OutputKind {
	return config.OutputKind{
		Kind:         "stdout",
		SampleConfig: SampleConfig,
		Parse: func(t *config.Table) any {
			o := Options{Format: "influx"}
			t.OneOf("format", &o.Format, Formats...)
			return o
		},
		Build: func(o *config.Output, env config.BuildEnv) (sampler.Output, error) {
			opts, _ := o.Options.(Options)
			opts.Host, opts.GlobalTags = env.Host, env.GlobalTags
			return New(env.Stdout, opts)
		},
	}
}
