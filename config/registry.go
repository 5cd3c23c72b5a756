package config

import (
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"

	_ "embed"

	"github.com/gpusampler/gpusampler/sampler"
)

// OutputKind describes one kind of output to the config: its sample
// fragment, how to decode its own keys, and how to build it.
type OutputKind struct {
	// Kind is the name in [[outputs.KIND]].
	Kind string
	// SampleConfig is the kind's commented fragment of the example config
	// (its sample.conf).
	SampleConfig string
	// Parse decodes the kind's own keys from a block (the common keys are
	// already taken) into its typed options, reporting problems with
	// t.Errorf. It must do no I/O. Nil means the kind has no keys of its
	// own.
	Parse func(t *Table) any
	// Build makes the runtime output from a parsed block.
	Build func(o *Output, env BuildEnv) (sampler.Output, error)
	// Exclusive kinds hold a resource their replacement needs too (a
	// listening address): on reload the running output is closed before the
	// new one is built, instead of after.
	Exclusive bool
	// OutOfProcess marks a network output that the host runs in its own
	// process: plugins.HostRegistry replaces Build with a plugin client
	// that re-executes this binary as `gpusampler plugin serve KIND`,
	// whose side calls the original Build. Outputs that write the
	// process's own stdout must stay in process.
	OutOfProcess bool
	// ExampleActive keeps the kind's block active in the example config
	// (config.example.toml). The other kinds' blocks are commented out
	// there, so that the example runs as is — their placeholders (a
	// server, a plugin path) need editing first.
	ExampleActive bool
}

// BuildEnv is what outputs may use when they are built.
type BuildEnv struct {
	// Stdout is the process's standard output (in-process outputs only).
	Stdout io.Writer
	// Host is the host name for records ([agent] hostname or the machine's).
	Host string
	// GlobalTags are added to every record.
	GlobalTags map[string]string
	// Logger is the output's logger (output name attached).
	Logger *slog.Logger
	// Catalog is the metric catalog.
	Catalog *sampler.Catalog
}

// Registry maps output kinds to their descriptions. Build one per program
// (outputs/all.Registry); it is read-only once built and holds no global
// state, so two configs — or two blocks of one kind — never share anything.
type Registry struct {
	kinds map[string]OutputKind
}

// NewRegistry returns a registry of kinds.
func NewRegistry(kinds ...OutputKind) *Registry {
	r := &Registry{kinds: make(map[string]OutputKind, len(kinds))}
	for _, k := range kinds {
		r.kinds[k.Kind] = k
	}
	return r
}

// Lookup returns the kind named kind.
func (r *Registry) Lookup(kind string) (OutputKind, bool) {
	k, ok := r.kinds[kind]
	return k, ok
}

// Kinds returns every kind's name, sorted.
func (r *Registry) Kinds() []string { return slices.Sorted(maps.Keys(r.kinds)) }

//go:embed sample.conf
var headerSample string

// Example returns the whole commented example config: the agent,
// global_tags and sampler sections followed by every output kind's
// fragment, in kind order. Fragments of kinds without ExampleActive are
// commented out from their [[outputs.KIND]] line on (see
// CommentOutFragment). config.example.toml is this text.
func Example(r *Registry) string {
	var b strings.Builder
	b.WriteString(headerSample)
	for _, k := range r.Kinds() {
		kind := r.kinds[k]
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
