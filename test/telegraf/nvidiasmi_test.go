package telegraf_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/telegraf/nvidiasmitest"
)

// Every metric the catalog names as Telegraf's is a field Telegraf's
// nvidia_smi parser really emits, with the same type; `gpusampler metrics`
// prints that column. The parsers' list is cross-checked by running the
// real input on Telegraf's own nvidia-smi XML fixtures (nvidiasmitest.Load).
func TestCatalogTelegrafNamesAreNvidiaSMIFields(t *testing.T) {
	ref := nvidiasmitest.Load(t)
	goType := map[catalog.ValueType]string{catalog.Int: "int64", catalog.Float: "float64"}
	for _, m := range catalog.Default().All() {
		// Two-state metrics Telegraf writes as text: string fields.
		for _, name := range []string{m.TelegrafText.Name, m.TelegrafText.Also} {
			if typ := ref.Fields[name]; name != "" && typ != "string" {
				t.Errorf("catalog: %s names Telegraf text field %q, which Telegraf's nvidia_smi writes as %q", m.Name, name, typ)
			}
		}
		if m.Telegraf.Name == "" {
			continue
		}
		typ, ok := ref.Fields[m.Telegraf.Name]
		switch {
		case !ok:
			t.Errorf("catalog: %s names Telegraf field %q, which Telegraf's nvidia_smi never emits", m.Name, m.Telegraf.Name)
		case typ != goType[m.Telegraf.Type]:
			t.Errorf("catalog: %s: Telegraf's %s is %s, the catalog says %s", m.Name, m.Telegraf.Name, typ, goType[m.Telegraf.Type])
		}
	}
	t.Logf("%d fields in Telegraf's parsers, %d seen on its %d fixtures", len(ref.Fields), len(ref.Seen), len(ref.Fixtures))
}

// Telegraf's inputs.execd runs `gpusampler run --execd nvidia_smi`: each
// gather is one nvidia_smi point per GPU with Telegraf's own tags, field
// names and types (nvidiasmitest compares them with Telegraf's nvidia_smi
// on its fixtures and logs the table), every field on one timestamp, no
// host tag (Telegraf's agent adds its own), and memory_used beside
// memory_total, so a dashboard's memory_used/memory_total has rows.
func TestExecdNvidiaSMIDropIn(t *testing.T) {
	ref := nvidiasmitest.Load(t)
	bin := buildBinary(t)
	e, acc := startExecd(t, bin, "nvidia_smi", "STDIN")
	// Two gathers that each wrote both GPUs with their memory: the first
	// gathers may come before the engine's first reads.
	complete := func(ms []telegraf.Metric) int {
		withMemory := map[time.Time]int{}
		for _, m := range ms {
			if m.Name() == "nvidia_smi" && m.HasField("memory_used") && m.HasField("memory_total") {
				withMemory[m.Time()]++
			}
		}
		n := 0
		for _, k := range withMemory {
			if k == 2 {
				n++
			}
		}
		return n
	}
	gatherUntil(t, e, acc, "2 gathers with both GPUs' memory", func(ms []telegraf.Metric) bool { return complete(ms) >= 2 })
	stopOnStdinClose(t, e)
	ms, errs := acc.Snapshot()
	if errs = withoutShutdownRace(errs); len(errs) > 0 {
		t.Fatalf("accumulator errors: %v", errs)
	}
	c := nvidiasmitest.Check(t, ref, ms)
	// What the simulated H200 SXM lacks (nvidia-smi shows N/A for it on
	// such a board): a fan, Grace-Hopper module power, page retirement.
	if got, want := c.TelegrafOnly(), []string{"fan_speed", "module_power_draw", "retired_pages_blacklist", "retired_pages_pending"}; !slices.Equal(got, want) {
		t.Errorf("names only Telegraf's nvidia_smi writes: %v, want %v", got, want)
	}
	byTime := map[time.Time][]string{}
	for _, m := range ms {
		if m.Name() != "nvidia_smi" {
			continue
		}
		idx, _ := m.GetTag("index")
		byTime[m.Time()] = append(byTime[m.Time()], idx)
		if _, ok := m.GetTag("host"); ok {
			t.Fatalf("host tag in the drop-in shape: %v", m.Tags())
		}
		for k := range ref.Tags {
			if _, ok := m.GetTag(k); !ok {
				t.Fatalf("tag %s missing: %v", k, m.Tags())
			}
		}
		// nvidia_smi's arch and compute_mode tags, spelled as its parser
		// passes on nvidia-smi's (the simulator is H100-like).
		for k, want := range map[string]string{"arch": "Hopper", "compute_mode": "Default"} {
			if got, _ := m.GetTag(k); got != want {
				t.Fatalf("tag %s = %q, want %q: %v", k, got, want, m.Tags())
			}
		}
		// nvidia_smi's string fields the simulator has data for, as
		// Telegraf's parser writes them.
		for k, want := range map[string]string{"driver_version": "sim", "cuda_version": "12.8", "vbios_version": "96.00.89.00.01", "current_ecc": "Enabled"} {
			if got, ok := m.GetField(k); !ok || got != want {
				t.Fatalf("field %s = %#v, want %q: %v", k, got, want, m.Fields())
			}
		}
		if s, ok := m.GetField("serial"); !ok || !strings.HasPrefix(fmt.Sprint(s), "SIM") {
			t.Fatalf("field serial = %#v, want the simulator's SIM…: %v", s, m.Fields())
		}
		own := 0
		for _, f := range m.FieldList() {
			if _, ok := ref.Fields[f.Key]; ok {
				own++
			}
			_, telegrafs := ref.Fields[f.Key] // encoder_stats_session_count is Telegraf's own
			if strings.HasSuffix(f.Key, "_mean") || strings.HasSuffix(f.Key, "_count") && !telegrafs {
				t.Fatalf("summary field %s in the drop-in shape", f.Key)
			}
		}
		used, ok1 := m.GetField("memory_used")
		total, ok2 := m.GetField("memory_total")
		if ok1 && ok2 {
			if r := float64(used.(int64)) / float64(total.(int64)) * 100; r <= 0 || r > 100 {
				t.Fatalf("memory_used/memory_total*100 = %v: %v", r, m.Fields())
			}
		}
		if own < 10 {
			t.Fatalf("only %d of nvidia_smi's fields: %v", own, m.Fields())
		}
	}
	for ts, idx := range byTime {
		slices.Sort(idx)
		if len(idx) != len(slices.Compact(slices.Clone(idx))) {
			t.Fatalf("GPUs %v at %v, want one point per GPU per gather", idx, ts)
		}
	}
}
