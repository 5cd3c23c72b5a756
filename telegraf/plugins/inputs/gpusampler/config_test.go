package gpusampler

import (
	"reflect"
	"strings"
	"testing"

	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/testutil"

	"github.com/gpusampler/gpusampler/catalog"
)

// TestTelegrafConfig loads [[inputs.gpusampler]] tables with Telegraf's own
// config loader, as a Telegraf build with the plugin compiled in does: the
// keys reach the plugin, and an unknown key is Telegraf's error.
func TestTelegrafConfig(t *testing.T) {
	c := config.NewConfig()
	err := c.LoadConfigData([]byte(`
[[inputs.gpusampler]]
  backend = "sim"
  sim_gpus = 3
  sim_profile = "training"
  sim_seed = 9
  devices = ["0", "2"]
  metrics_include = ["power*"]
  metrics_exclude = ["power_limit"]
  shape = "nvidia_smi"
  min_max = true
`), config.EmptySourcePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Inputs) != 1 {
		t.Fatalf("%d inputs loaded, want 1", len(c.Inputs))
	}
	got, ok := c.Inputs[0].Input.(*GPUSampler)
	if !ok {
		t.Fatalf("input is %T", c.Inputs[0].Input)
	}
	got.Log = nil
	want := &GPUSampler{Backend: BackendSim, SimGPUs: 3, SimProfile: "training", SimSeed: 9, Devices: []string{"0", "2"},
		MetricsInclude: []string{"power*"}, MetricsExclude: []string{"power_limit"}, Shape: ShapeNvidiaSMI, MinMax: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %+v\nwant   %+v", got, want)
	}

	c = config.NewConfig()
	err = c.LoadConfigData([]byte("[[inputs.gpusampler]]\n  sahpe = \"raw\"\n"), config.EmptySourcePath)
	if err == nil || !strings.Contains(err.Error(), "sahpe") {
		t.Errorf("unknown key: %v, want an error naming it", err)
	}
}

// TestSelection runs the plugin with devices and metrics_include set: every
// sample it writes is of GPU 1 and of the power group.
func TestSelection(t *testing.T) {
	p := New()
	p.Backend, p.SimSeed, p.SimGPUs, p.Devices, p.MetricsInclude = BackendSim, 5, 2, []string{"1"}, []string{"power"}
	if err := p.Init(); err != nil {
		t.Fatal(err)
	}
	power := map[string]bool{}
	for _, m := range catalog.Default().All() {
		if m.Group == catalog.GroupPower {
			power[m.Influx().Name] = true
		}
	}
	acc := &testutil.Accumulator{}
	if err := p.Start(acc); err != nil {
		t.Fatal(err)
	}
	acc.Wait(20)
	p.Stop()
	var samples int
	for _, m := range acc.GetTelegrafMetrics() {
		if m.Name() != "nvidia_smi" {
			continue
		}
		samples++
		if idx, _ := m.GetTag("index"); idx != "1" {
			t.Errorf("a metric of GPU %q, want only GPU 1: %v", idx, m)
		}
		for _, f := range m.FieldList() {
			if !power[f.Key] {
				t.Errorf("field %s is not in the power group: %v", f.Key, m)
			}
		}
	}
	if samples == 0 {
		t.Fatalf("no nvidia_smi metrics among %v", acc.GetTelegrafMetrics())
	}
}

func TestInitRejectsBadPattern(t *testing.T) {
	p := New()
	p.MetricsExclude = []string{"power["}
	if err := p.Init(); err == nil || !strings.Contains(err.Error(), `metrics_exclude "power["`) {
		t.Fatalf("Init() = %v, want the bad pattern named", err)
	}
}
