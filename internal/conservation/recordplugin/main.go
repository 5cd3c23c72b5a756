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
	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/plugins/sdk"
)

func main() {
	sdk.ServeKind(conservation.RecordKind())
}
