package outputs_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/gpusampler/gpusampler/internal/readmegen"
)

// Every output's README (each directory under outputs/ with a sample.conf,
// a new one included), the plugin client's and the Telegraf input's shows
// its sample.conf as it is, in the block `make generate` writes: a README
// that drifted from its sample.conf, or lacks the block, fails here.
func TestReadmesEmbedSampleConf(t *testing.T) {
	dirs, err := readmegen.Dirs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"outputs/stdout", "outputs/influxdb", "plugins", "telegraf/plugins/inputs/gpusampler"} {
		if !slices.Contains(dirs, d) {
			t.Errorf("%s not among the READMEs checked: %q", d, dirs)
		}
	}
	for _, dir := range dirs {
		want, have, err := readmegen.File("..", dir)
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.Equal(want, have) {
			t.Errorf("%s/README.md does not show its sample.conf as it is: run `make generate`", dir)
		}
	}
}
