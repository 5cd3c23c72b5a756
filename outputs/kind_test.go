package outputs_test

import (
	"reflect"
	"testing"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
)

func TestRegistry(t *testing.T) {
	r := outputs.NewRegistry(outputs.Kind{Kind: "b", Exclusive: true}, outputs.Kind{Kind: "a"})
	if got, want := r.Kinds(), []string{"a", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Kinds() = %q, want %q", got, want)
	}
	if k, ok := r.Lookup("b"); !ok || k.Kind != "b" || !k.Exclusive {
		t.Errorf("Lookup(b) = %+v, %v", k, ok)
	}
	if k, ok := r.Lookup("c"); ok {
		t.Errorf("Lookup(c) = %+v, want none", k)
	}
}

// TestBlockErrorAt: a block built in code (no file) still names its key;
// one from a file places the key at its line, else at the block's header.
func TestBlockErrorAt(t *testing.T) {
	b := &outputs.Block{Kind: "sink", Name: "sink", Line: 0}
	want := &config.Error{File: "(config)", Key: "outputs.sink.config.url", Msg: "bad"}
	if got := b.ErrorAt("config.url", "bad"); !reflect.DeepEqual(got, want) {
		t.Errorf("ErrorAt without a file = %+v, want %+v", got, want)
	}
	if refs := b.EnvRefs(); refs != nil {
		t.Errorf("EnvRefs without a file = %q, want nil", refs)
	}

	root, err := config.Decode("f.toml", []byte("# header\n\n[sink]\nurl = \"x\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b = &outputs.Block{Kind: "sink", Line: 3, Table: root.Sub("sink")}
	for key, want := range map[string]*config.Error{
		"url":  {File: "f.toml", Line: 4, Key: "sink.url", Msg: "bad"},
		"none": {File: "f.toml", Line: 3, Key: "sink.none", Msg: "bad"},
	} {
		if got := b.ErrorAt(key, "bad"); !reflect.DeepEqual(got, want) {
			t.Errorf("ErrorAt(%q) = %+v, want %+v", key, got, want)
		}
	}
}
