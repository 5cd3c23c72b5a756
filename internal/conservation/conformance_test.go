package conservation_test

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/plugins/sdk"
	"github.com/gpusampler/gpusampler/plugins/sdktest"
	"github.com/gpusampler/gpusampler/record"
)

// recordsOf merges the accepted batches of a record file into one batch.
func recordsOf(t *testing.T, file string) *record.Batch {
	t.Helper()
	bs, _, err := conservation.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var all record.Batch
	for _, b := range bs {
		if b.State != conservation.StateOK {
			continue
		}
		all.Devices = append(all.Devices, b.Devices...)
		all.Samples = append(all.Samples, b.Samples...)
		all.Summaries = append(all.Summaries, b.Summaries...)
		all.Events = append(all.Events, b.Events...)
	}
	return &all
}

func samplesOf(t *testing.T, file string) []record.Sample { return recordsOf(t, file).Samples }

// TestRecorderConformance runs the output conformance suite, every record
// kind compared whole, on the recorder in process, behind the plugin
// protocol in memory (sdktest), and as a real plugin process behind the
// plugin client: what the matrix's plugin cells see is what crossed the
// boundary.
func TestRecorderConformance(t *testing.T) {
	var file string
	fresh := func(t *testing.T) string {
		file = filepath.Join(t.TempDir(), "rec.jsonl")
		return file
	}
	harness := func(newOut func(t *testing.T) record.Output) outputtest.Harness {
		return outputtest.Harness{New: newOut,
			Received: func(t *testing.T) []record.Sample { return samplesOf(t, file) },
			Records:  func(t *testing.T) *record.Batch { return recordsOf(t, file) }}
	}
	t.Run("inproc", func(t *testing.T) {
		outputtest.Run(t, harness(func(t *testing.T) record.Output {
			r, err := conservation.NewRecorder(fresh(t), "")
			if err != nil {
				t.Fatal(err)
			}
			return r
		}))
	})
	t.Run("protocol", func(t *testing.T) {
		outputtest.Run(t, harness(func(t *testing.T) record.Output {
			out, err := sdktest.StartFactory(t, sdk.KindFactory(conservation.RecordKind()),
				map[string]any{"file": fresh(t)}, sdktest.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return out
		}))
	})
	t.Run("plugin", func(t *testing.T) {
		outputtest.Run(t, harness(func(t *testing.T) record.Output {
			c, err := plugins.Start(plugins.Options{Name: "record", Kind: "plugin", Config: map[string]any{"file": fresh(t)},
				Command: func() *exec.Cmd { return exec.Command(pluginPath) }})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}))
	})
}
