// Command recordplugin serves the "record" output kind (a
// conservation.Recorder) as a gpusampler plugin, so that the conservation
// matrix records what crosses the real plugin boundary:
//
//	[[outputs.plugin]]
//	  path = "/path/to/recordplugin"
//	  [outputs.plugin.config]
//	    file = "/tmp/x.jsonl"
//	    control = "/tmp/x.ctl"
package main

import (
	"os"

	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/plugins/sdk"
)

// With the argument "shared" it serves the "sharedrecord", "nats" and
// "opentelemetry" kinds as a shared process (every output an instance of its own, as
// `gpusampler plugin serve` does for the built-in network outputs).
func main() {
	if len(os.Args) > 1 && os.Args[1] == "shared" {
		sdk.ServeKinds(conservation.SharedRecordKind(), nats.Kind(), opentelemetry.Kind())
		return
	}
	sdk.ServeKind(conservation.RecordKind())
}
