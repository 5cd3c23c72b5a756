// Package registry lists every built-in output kind of the gpusampler
// command. A new output adds one line to Builtin. Kinds marked
// OutOfProcess are built in process from this registry; the gpusampler
// command wraps it with plugins.HostRegistry so that they run as plugins.
package registry

import (
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/execd"
	"github.com/gpusampler/gpusampler/outputs/influxdb"
	"github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/outputs/prometheus"
	"github.com/gpusampler/gpusampler/outputs/stdout"
	"github.com/gpusampler/gpusampler/outputs/telegraf"
	"github.com/gpusampler/gpusampler/plugins"
)

// Builtin returns a registry of every built-in output kind. Each call
// returns a new value; nothing is shared.
func Builtin() *outputs.Registry {
	return outputs.NewRegistry(
		execd.Kind(),
		influxdb.Kind(),
		nats.Kind(),
		opentelemetry.Kind(),
		plugins.Kind(),
		prometheus.Kind(),
		stdout.Kind(),
		telegraf.Kind(),
	)
}

//go:generate sh -c "cd ../.. && go run ./cmd/gpusampler config > config.example.toml"
