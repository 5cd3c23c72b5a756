package stdout

import (
	"io"
	"os"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// Kind describes the stdout output to the config registry.
func Kind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[Options]{
		Kind:          "stdout",
		SinkKeys:      []string{}, // the process's stdout
		SampleConfig:  SampleConfig,
		ExampleActive: true, // the example config runs as is, printing to stdout
		Parse: func(t *config.Table) Options {
			o := Options{Format: "influx"}
			t.OneOf("format", &o.Format, Formats...)
			return o
		},
		Build: func(o *outputs.Block, opts Options, env outputs.BuildEnv) (record.Output, error) {
			opts.Host, opts.GlobalTags, opts.Catalog = env.Host, env.GlobalTags, env.Catalog
			opts.Color = opts.Format == "table" && isTerminal(env.Stdout)
			out, err := New(env.Stdout, opts)
			if err != nil || opts.Format != "table" || o.Aggregate > 0 {
				return out, err // an aggregate interval is applied by the caller
			}
			return aggregate.New(out, aggregate.Options{Interval: DefaultTableInterval, Catalog: opts.Catalog})
		},
	})
}

// isTerminal reports whether w is a character device (a TTY): the table is
// colored only there.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
