package outputs_test

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gpusampler/gpusampler/"

// deps returns the packages of this module that pkg (a path relative to
// the module root) links, pkg included, as paths relative to the root.
// Test files do not count: they are not linked into a program.
func deps(t *testing.T, root, pkg string) []string {
	t.Helper()
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		bp, err := build.ImportDir(filepath.Join(root, filepath.FromSlash(p)), 0)
		if err != nil {
			t.Fatalf("read package %s: %v", p, err)
		}
		for _, imp := range bp.Imports {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				walk(rel)
			}
		}
	}
	walk(pkg)
	return slices.Sorted(func(yield func(string) bool) {
		for p := range seen {
			if !yield(p) {
				return
			}
		}
	})
}

// TestLayering keeps the package graph layered: the leaves (config,
// catalog, record and its protobuf form and fixture) link nothing else of gpusampler but each other as
// documented; the contract, the sinks, the SDK, stream, the encoders and
// the output wrappers link no engine; a sink, the plugin host and SDK, a
// third-party plugin built on the SDK, stream and the encoders link
// neither the application (its config model, registry, agent, commands)
// nor the simulator nor the buffers.
func TestLayering(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for pkg, want := range map[string][]string{
		"config":              {"config"},
		"catalog":             {"catalog"},
		"record":              {"catalog", "record"},
		"record/recordpb":     {"catalog", "record", "record/recordpb"},
		"record/recordtest":   {"catalog", "record", "record/recordtest"},
		"internal/atomicfile": {"internal/atomicfile"},
		// Job accounting is fed records and emits records: no engine.
		"internal/accounting": {"catalog", "internal/accounting", "record"},
		"internal/dirlock":    {"internal/dirlock"},
	} {
		if got := deps(t, root, pkg); !slices.Equal(got, want) {
			t.Errorf("%s links %q, want %q", pkg, got, want)
		}
	}
	// The engine stays out of the contract, the sinks, the SDK, its
	// plugins, stream, the encoders and the output wrappers (aggregation,
	// buffering): they speak records, not samplers; the output contract's
	// constants (record.RetryableOffers, record.DefaultWriteTimeout) live
	// in the record leaf.
	for _, pkg := range []string{"outputs", "outputs/execd", "outputs/influxdb", "outputs/nats", "outputs/prometheus",
		"outputs/stdout", "outputs/telegraf", "outputs/outputtest", "plugins", "plugins/sdk",
		"plugins/examples/webhook/cmd/gpusampler-webhook", "stream",
		"internal/encoding/jsonl", "internal/encoding/lineproto", "internal/encoding/protobuf",
		"internal/pipeline/aggregate", "internal/pipeline/buffer"} {
		if slices.Contains(deps(t, root, pkg), "sampler") {
			t.Errorf("%s links the engine (sampler)", pkg)
		}
	}
	// The plugin tree sits above the layers it plugs into: the record
	// messages its protocol carries are generated under the record leaf
	// (record/recordpb), so no sink, wrapper, encoder or stream imports
	// from plugins/.
	for _, pkg := range []string{"outputs", "outputs/execd", "outputs/influxdb", "outputs/nats", "outputs/prometheus",
		"outputs/stdout", "outputs/telegraf", "outputs/outputtest", "stream",
		"internal/encoding/jsonl", "internal/encoding/lineproto", "internal/encoding/protobuf",
		"internal/pipeline/aggregate", "internal/pipeline/buffer"} {
		for _, d := range deps(t, root, pkg) {
			if d == "plugins" || strings.HasPrefix(d, "plugins/") {
				t.Errorf("%s links the plugin tree (%s)", pkg, d)
			}
		}
	}
	app := []string{"sampler/sim", "internal/pipeline/buffer", "internal/appconfig", "internal/registry", "internal/agent", "cmd"}
	for _, pkg := range []string{"outputs", "outputs/execd", "outputs/influxdb", "outputs/nats", "outputs/prometheus",
		"outputs/stdout", "outputs/telegraf", "outputs/outputtest", "plugins", "plugins/sdk", "plugins/examples/webhook/cmd/gpusampler-webhook",
		"stream", "internal/pipeline/aggregate", "internal/encoding/jsonl", "internal/encoding/lineproto", "internal/encoding/protobuf"} {
		for _, d := range deps(t, root, pkg) {
			for _, a := range app {
				if d == a || strings.HasPrefix(d, a+"/") {
					t.Errorf("%s links %s", pkg, d)
				}
			}
		}
	}
}

// TestConfigLinksNoBackend keeps the configuration model data: it
// validates simulator profile names against the leaf list
// (sampler/simprofile) and links no backend; the CLI wires them.
func TestConfigLinksNoBackend(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := deps(t, root, "sampler/simprofile"), []string{"sampler/simprofile"}; !slices.Equal(got, want) {
		t.Errorf("sampler/simprofile links %q, want %q", got, want)
	}
	for _, d := range deps(t, root, "internal/appconfig") {
		for _, backend := range []string{"sampler/sim", "sampler/nvml"} {
			if d == backend || strings.HasPrefix(d, backend+"/") {
				t.Errorf("internal/appconfig links %s", d)
			}
		}
	}
}
