package agent

import (
	"fmt"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// The output set that scopes the drain cursors: the same outputs in any
// order are one set; another kind, name or sink is another.
func TestOutputSet(t *testing.T) {
	reg := registry.Builtin()
	out := func(kind, name string, raw map[string]any) *appconfig.Output {
		return &appconfig.Output{Block: outputs.Block{Kind: kind, Name: name, Raw: raw}}
	}
	a := out("stdout", "stdout", map[string]any{"format": "json"})
	b := out("influxdb", "influxdb", map[string]any{"urls": []any{"http://db:8086"}, "database": "gpu"})
	base := outputSet(reg, []*appconfig.Output{a, b})
	if got := outputSet(reg, []*appconfig.Output{b, a}); got != base {
		t.Errorf("same outputs in another order: set %s, want %s", got, base)
	}
	for name, outs := range map[string][]*appconfig.Output{
		"one output fewer":  {a},
		"another url":       {a, out("influxdb", "influxdb", map[string]any{"urls": []any{"http://other:8086"}, "database": "gpu"})},
		"another database":  {a, out("influxdb", "influxdb", map[string]any{"urls": []any{"http://db:8086"}, "database": "gpu2"})},
		"another name":      {a, out("influxdb", "influxdb.2", b.Raw)},
		"another kind":      {out("execd", "stdout", a.Raw), b},
		"no outputs at all": nil,
	} {
		if got := outputSet(reg, outs); got == base || len(got) != 16 {
			t.Errorf("%s: set %q, want one of its own (not %s)", name, got, base)
		}
	}
}

// What keeps the set and what does not, on blocks parsed from a config
// file: a rotated secret (${NAME}'s value), a timeout or a tag keep it,
// another sink (a URL, a subject) does not; a kind without sink keys (a
// plugin) counts with its block as written, ${NAME} unexpanded.
func TestOutputSetIgnoresSecretsAndSettings(t *testing.T) {
	reg := registry.Builtin()
	set := func(doc string, env map[string]string) string {
		t.Helper()
		c, err := appconfig.Parse("test.toml", []byte(doc), appconfig.Options{Registry: reg,
			LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
		if err != nil {
			t.Fatalf("parse: %v\n%s", err, doc)
		}
		return outputSet(reg, c.Outputs)
	}
	const influx = `
[[outputs.influxdb]]
  url = "%s"
  api = "v2"
  organization = "o"
  bucket = "gpu"
  token = "${INFLUX_TOKEN}"
  timeout = "%s"
  flush_interval = "%s"
[[outputs.nats]]
  servers = ["nats://127.0.0.1:4222"]
  subject = "%s"
  password = "${NATS_PASSWORD}"
  username = "u"
[[outputs.plugin]]
  path = "/usr/bin/true"
  allow_unverified = true
  [outputs.plugin.config]
    url = "%s"
    token = "${PLUGIN_TOKEN}"
`
	env1 := map[string]string{"INFLUX_TOKEN": "t1", "NATS_PASSWORD": "p1", "PLUGIN_TOKEN": "x1"}
	env2 := map[string]string{"INFLUX_TOKEN": "t2", "NATS_PASSWORD": "p2", "PLUGIN_TOKEN": "x2"}
	doc := func(url, timeout, flush, subject, purl string) string {
		return fmt.Sprintf(influx, url, timeout, flush, subject, purl)
	}
	base := set(doc("http://db:8086", "5s", "1s", "gpu.{host}", "http://p:1"), env1)
	for name, c := range map[string]struct {
		doc  string
		env  map[string]string
		same bool
	}{
		"rotated secrets":         {doc("http://db:8086", "5s", "1s", "gpu.{host}", "http://p:1"), env2, true},
		"another timeout":         {doc("http://db:8086", "3s", "1s", "gpu.{host}", "http://p:1"), env1, true},
		"another flush interval":  {doc("http://db:8086", "5s", "2s", "gpu.{host}", "http://p:1"), env1, true},
		"another influxdb url":    {doc("http://db2:8086", "5s", "1s", "gpu.{host}", "http://p:1"), env1, false},
		"another nats subject":    {doc("http://db:8086", "5s", "1s", "gpu2.{host}", "http://p:1"), env1, false},
		"another plugin config":   {doc("http://db:8086", "5s", "1s", "gpu.{host}", "http://p:2"), env1, false},
		"rotated, another plugin": {doc("http://db:8086", "5s", "1s", "gpu.{host}", "http://p:2"), env2, false},
	} {
		if got := set(c.doc, c.env); (got == base) != c.same {
			t.Errorf("%s: set %s, base %s, want same=%v", name, got, base, c.same)
		}
	}
}

// notSim is a simulated source under another name: the agent keeps drain
// cursors for it (it keeps none for simulated GPUs).
type notSim struct{ *sim.Source }

func (notSim) Name() string { return "fake" }

// A reload that changes the outputs moves the run's drain cursors to the
// new output set, so that a restart with the reloaded config resumes
// where the run is instead of delivering the buffers' history again.
func TestReloadRescopesCursors(t *testing.T) {
	src, err := sim.New(sim.Options{GPUs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.Builtin()
	dir := t.TempDir()
	parse := func(format string) *appconfig.Config {
		t.Helper()
		doc := fmt.Sprintf("[agent]\n  state_dir = %q\n[[outputs.stdout]]\n  format = \"json\"\n[[outputs.stdout]]\n  name = \"second\"\n  format = %q\n", dir, format)
		c, err := appconfig.Parse("test.toml", []byte(doc), appconfig.Options{Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	one := parse("json")
	two := parse("json")
	two.Outputs = two.Outputs[:1] // the second output removed
	a, err := New(notSim{src}, one, Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if a.cursors == nil {
		t.Fatal("no cursor file")
	}
	if err := a.Reload(two); err != nil {
		t.Fatal(err)
	}
	if err := a.cursors.Save(map[string]map[catalog.BufferType]uint64{"GPU-a": {catalog.BufferTotalPower: 7}}); err != nil {
		t.Fatal(err)
	}
	a.cursors.Close()
	f, _, err := sampler.OpenCursorFileScoped(dir, outputSet(reg, two.Outputs))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Load("GPU-a")[catalog.BufferTotalPower]; got != 7 {
		t.Errorf("the reloaded config's output set has power cursor %d, want the run's 7", got)
	}
}
