package registry_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
)

var update = flag.Bool("update", false, "rewrite config.example.toml from the sample.conf fragments")

const exampleFile = "../../config.example.toml"

// TestExampleUpToDate fails when the checked-in config.example.toml is not
// what `gpusampler config` prints (a sample.conf changed without
// regenerating: go generate ./internal/registry, or go test ./internal/registry -update).
func TestExampleUpToDate(t *testing.T) {
	want := appconfig.Example(registry.Builtin())
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
		t.Errorf("config.example.toml is stale: run go generate ./internal/registry (or go test ./internal/registry -update)")
	}
}

// TestExampleParses: the example is a valid config whose only active
// outputs are the ExampleActive kinds (stdout: it runs as is), every
// other kind's block is there commented out, and every fragment parses on
// its own.
func TestExampleParses(t *testing.T) {
	reg := registry.Builtin()
	example := appconfig.Example(reg)
	c, err := appconfig.Parse("config.example.toml", []byte(example), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	var active []string
	for _, o := range c.Outputs {
		active = append(active, o.Kind)
	}
	if strings.Join(active, " ") != "stdout" {
		t.Errorf("active outputs in the example: %v, want only stdout", active)
	}
	for _, k := range reg.Kinds() {
		kind, _ := reg.Lookup(k)
		header := "[[outputs." + k + "]]"
		if !kind.ExampleActive {
			header = "# " + header
		}
		if !strings.Contains(example, "\n"+header+"\n") {
			t.Errorf("kind %s: the example lacks %q", k, header)
		}
		// Uncommenting gives the fragment back.
		frag := strings.TrimRight(kind.SampleConfig, "\n")
		var un []string
		on := false
		for _, l := range strings.Split(appconfig.CommentOutFragment(frag), "\n") {
			on = on || strings.HasPrefix(l, "# [")
			if on {
				if l == "#" {
					l = ""
				}
				l = strings.TrimPrefix(l, "# ")
			}
			un = append(un, l)
		}
		if got := strings.Join(un, "\n"); got != frag && !kind.ExampleActive {
			t.Errorf("kind %s: uncommenting does not restore the fragment:\n%s", k, got)
		}
	}
	for _, k := range reg.Kinds() {
		kind, _ := reg.Lookup(k)
		if kind.SampleConfig == "" || kind.Build == nil {
			t.Errorf("kind %s: missing sample config or build", k)
		}
		if _, err := appconfig.Parse(k+"/sample.conf", []byte(kind.SampleConfig), appconfig.Options{Registry: reg}); err != nil {
			t.Errorf("kind %s: %v", k, err)
		}
	}
}
