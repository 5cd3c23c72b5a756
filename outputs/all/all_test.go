package all_test

import (
	"flag"
	"os"
	"testing"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs/all"
)

var update = flag.Bool("update", false, "rewrite config.example.toml from the sample.conf fragments")

const exampleFile = "../../config.example.toml"

// TestExampleUpToDate fails when the checked-in config.example.toml is not
// what `gpusampler config` prints (a sample.conf changed without
// regenerating: go generate ./outputs/all, or go test ./outputs/all -update).
func TestExampleUpToDate(t *testing.T) {
	want := config.Example(all.Registry())
	if *update {
		if err := os.WriteFile(exampleFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("config.example.toml is stale: run go generate ./outputs/all (or go test ./outputs/all -update)")
	}
}

// TestExampleParses: the example is a valid config, and so is every
// output's fragment on its own.
func TestExampleParses(t *testing.T) {
	reg := all.Registry()
	c, err := config.Parse("config.example.toml", []byte(config.Example(reg)), config.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Outputs) != len(reg.Kinds()) {
		t.Errorf("%d outputs in the example, want one per kind (%v)", len(c.Outputs), reg.Kinds())
	}
	for _, k := range reg.Kinds() {
		kind, _ := reg.Lookup(k)
		if kind.SampleConfig == "" || kind.Build == nil {
			t.Errorf("kind %s: missing sample config or build", k)
		}
		if _, err := config.Parse(k+"/sample.conf", []byte(kind.SampleConfig), config.Options{Registry: reg}); err != nil {
			t.Errorf("kind %s: %v", k, err)
		}
	}
}
