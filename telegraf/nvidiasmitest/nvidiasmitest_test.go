package nvidiasmitest

import (
	"reflect"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/metric"
)

// Compare finds each kind of mismatch, and none in a drop-in.
func TestCompare(t *testing.T) {
	ref := Reference{Tags: map[string]bool{"index": true, "uuid": true},
		Fields:    map[string]string{"power_draw": "float64", "memory_used": "int64", "fan_speed": "int64", "pid": "int64"},
		Elsewhere: map[string]string{"pid": "nvidia_smi_process"}}
	at := time.Unix(1, 0)
	for _, tc := range []struct {
		name    string
		ms      []telegraf.Metric
		rows    []Row
		problem []string
	}{
		{"drop-in", []telegraf.Metric{
			metric.New("nvidia_smi", map[string]string{"index": "0", "uuid": "GPU-0", "pci_bus_id": "0"},
				map[string]any{"power_draw": 1.5, "memory_used": int64(3), "energy": 2.0}, at),
			metric.New("other", map[string]string{"index": "x"}, map[string]any{"power_draw": "not compared"}, at),
		}, []Row{
			{"index", "tag", "tag"}, {"pci_bus_id", "", "tag"}, {"uuid", "tag", "tag"},
			{"energy", "", "float64"}, {"fan_speed", "int64", ""}, {"memory_used", "int64", "int64"}, {"power_draw", "float64", "float64"},
		}, nil},
		{"clashes", []telegraf.Metric{
			metric.New("nvidia_smi", map[string]string{"index": "0", "memory_used": "3"}, map[string]any{"power_draw": int64(1)}, at),
			metric.New("nvidia_smi", map[string]string{"index": "1"}, map[string]any{"power_draw": 1.5, "pid": 1.0}, at),
		}, []Row{
			{"index", "tag", "tag"}, {"memory_used", "int64", "tag"}, {"uuid", "tag", ""},
			{"fan_speed", "int64", ""}, {"pid", "int64", "float64"}, {"power_draw", "float64", "float64|int64"},
		}, []string{
			"memory_used: Telegraf's nvidia_smi writes int64, the metrics carry tag",
			"uuid: Telegraf's nvidia_smi writes this tag, the metrics lack it",
			"pid: Telegraf's nvidia_smi writes int64, the metrics carry float64",
			"power_draw: Telegraf's nvidia_smi writes float64, the metrics carry float64|int64",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(ref, tc.ms)
			if !reflect.DeepEqual(c.Rows, tc.rows) {
				t.Errorf("rows\n got %v\nwant %v", c.Rows, tc.rows)
			}
			var only []string
			for _, r := range tc.rows {
				if r.GPUSampler == "" {
					only = append(only, r.Name)
				}
			}
			if got := c.TelegrafOnly(); !reflect.DeepEqual(got, only) {
				t.Errorf("Telegraf only %v, want %v", got, only)
			}
			if !reflect.DeepEqual(c.Problems, tc.problem) {
				t.Errorf("problems\n got %q\nwant %q", c.Problems, tc.problem)
			}
		})
	}
}

// The table has a row per name with its verdict.
func TestTable(t *testing.T) {
	c := Comparison{Rows: []Row{{"index", "tag", "tag"}, {"fan_speed", "int64", ""}, {"energy", "", "float64"}, {"power_draw", "float64", "int64"}}}
	want := "| tag/field | Telegraf nvidia_smi | gpusampler drop-in | equal? |\n|---|---|---|---|\n" +
		"| index | tag | tag | yes |\n| fan_speed | int64 | — | Telegraf only |\n" +
		"| energy | — | float64 | gpusampler only |\n| power_draw | float64 | int64 | NO |\n"
	if got := c.Table(); got != want {
		t.Errorf("table\n%s\nwant\n%s", got, want)
	}
}

// Load reads Telegraf's input on its fixtures: the tags nvidia_smi is known
// for, and fields of each type.
func TestLoad(t *testing.T) {
	ref := Load(t)
	for _, tag := range []string{"index", "name", "uuid", "pstate", "compute_mode", "arch"} {
		if !ref.Tags[tag] {
			t.Errorf("tag %s not among %v", tag, ref.Tags)
		}
	}
	for f, typ := range map[string]string{"power_draw": "float64", "memory_used": "int64", "driver_version": "string"} {
		if ref.Fields[f] != typ || !ref.Seen[f] {
			t.Errorf("field %s: %q (seen %v), want %s", f, ref.Fields[f], ref.Seen[f], typ)
		}
	}
	want := map[string]string{"pid": "nvidia_smi_process", "used_memory": "nvidia_smi_process", "sram_uncorrectable": "nvidia_smi_mig"}
	for _, f := range []string{"bar1_free", "bar1_total", "bar1_used", "fb_free", "fb_reserved", "fb_total", "fb_used"} {
		want["memory_"+f] = "nvidia_smi_mig"
	}
	if !reflect.DeepEqual(ref.Elsewhere, want) {
		t.Errorf("fields of other measurements: %v, want %v", ref.Elsewhere, want)
	}
}
