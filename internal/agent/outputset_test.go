package agent

import (
	"testing"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
)

// The output set that scopes the drain cursors: the same outputs in any
// order are one set; another kind, name or option is another.
func TestOutputSet(t *testing.T) {
	out := func(kind, name string, raw map[string]any) *appconfig.Output {
		return &appconfig.Output{Block: outputs.Block{Kind: kind, Name: name, Raw: raw}}
	}
	a := out("stdout", "stdout", map[string]any{"format": "json"})
	b := out("influxdb", "influxdb", map[string]any{"urls": []any{"http://db:8086"}, "database": "gpu"})
	base := outputSet([]*appconfig.Output{a, b})
	if got := outputSet([]*appconfig.Output{b, a}); got != base {
		t.Errorf("same outputs in another order: set %s, want %s", got, base)
	}
	for name, outs := range map[string][]*appconfig.Output{
		"one output fewer":  {a},
		"another option":    {a, out("influxdb", "influxdb", map[string]any{"urls": []any{"http://other:8086"}, "database": "gpu"})},
		"another name":      {a, out("influxdb", "influxdb.2", b.Raw)},
		"another kind":      {out("execd", "stdout", a.Raw), b},
		"no outputs at all": nil,
	} {
		if got := outputSet(outs); got == base || len(got) != 16 {
			t.Errorf("%s: set %q, want one of its own (not %s)", name, got, base)
		}
	}
}
