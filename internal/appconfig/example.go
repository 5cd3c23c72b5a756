package appconfig

import (
	"strings"

	_ "embed"

	"github.com/gpusampler/gpusampler/outputs"
)

//go:embed sample.conf
var headerSample string

// Example returns the whole commented example config: the agent,
// global_tags and sampler sections followed by every output kind's
// fragment, in kind order. Fragments of kinds without ExampleActive are
// commented out from their [[outputs.KIND]] line on (see
// CommentOutFragment). config.example.toml is this text.
func Example(r *outputs.Registry) string {
	var b strings.Builder
	b.WriteString(headerSample)
	for _, k := range r.Kinds() {
		kind, _ := r.Lookup(k)
		frag := strings.TrimRight(kind.SampleConfig, "\n")
		if !kind.ExampleActive {
			frag = CommentOutFragment(frag)
		}
		b.WriteString("\n")
		b.WriteString(frag)
		b.WriteString("\n")
	}
	return b.String()
}

// CommentOutFragment comments out a sample fragment from its first table
// header ("[[outputs.KIND]]") on, Telegraf style: "# " before every line
// (the description comments above the header stay as they are). Removing
// that "# " from those lines gives the fragment back.
func CommentOutFragment(frag string) string {
	lines := strings.Split(frag, "\n")
	on := false
	for i, l := range lines {
		if !on && strings.HasPrefix(strings.TrimSpace(l), "[") {
			on = true
		}
		if on {
			lines[i] = strings.TrimRight("# "+l, " ")
		}
	}
	return strings.Join(lines, "\n")
}
