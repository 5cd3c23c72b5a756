package telegraf_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/plugins/inputs/nvidia_smi"

	"github.com/gpusampler/gpusampler/catalog"
)

// nvidiaSMIFields reads the fields Telegraf's nvidia_smi parsers (both
// nvidia-smi XML schemas) can emit, with their types, from the parser
// source of the Telegraf version this module pins.
func nvidiaSMIFields(t *testing.T) (dir string, fields map[string]string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/influxdata/telegraf").Output()
	if err != nil {
		t.Fatalf("locate the telegraf module: %v", err)
	}
	dir = filepath.Join(strings.TrimSpace(string(out)), "plugins", "inputs", "nvidia_smi")
	fields = map[string]string{}
	set := regexp.MustCompile(`SetIfUsed\("(int|float|str)", fields, "([a-z0-9_]+)"`)
	for _, schema := range []string{"schema_v11", "schema_v12"} {
		src, err := os.ReadFile(filepath.Join(dir, schema, "parser.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range set.FindAllStringSubmatch(string(src), -1) {
			fields[m[2]] = map[string]string{"int": "int64", "float": "float64", "str": "string"}[m[1]]
		}
	}
	if len(fields) < 30 {
		t.Fatalf("found only %d fields in Telegraf's nvidia_smi parsers: has their source changed shape?", len(fields))
	}
	return dir, fields
}

// Every metric the catalog names as Telegraf's is a field Telegraf's
// nvidia_smi parser really emits, with the same type; `gpusampler metrics`
// prints that column. The parsed list is cross-checked by running the real
// input on Telegraf's own nvidia-smi XML fixtures.
func TestCatalogTelegrafNamesAreNvidiaSMIFields(t *testing.T) {
	dir, fields := nvidiaSMIFields(t)
	fixtures, _ := filepath.Glob(filepath.Join(dir, "testdata", "*.xml"))
	if len(fixtures) == 0 {
		t.Fatal("no nvidia_smi fixtures in the telegraf module")
	}
	seen := map[string]bool{}
	for _, fx := range fixtures {
		script := filepath.Join(t.TempDir(), "nvidia-smi")
		os.WriteFile(script, []byte(fmt.Sprintf("#!/bin/sh\ncat %q\n", fx)), 0o755)
		in := &nvidia_smi.NvidiaSMI{BinPath: script, Timeout: config.Duration(10 * time.Second), Log: testLogger{t}}
		var acc accumulator
		if err := in.Gather(&acc); err != nil {
			t.Fatalf("%s: %v", filepath.Base(fx), err)
		}
		ms, errs := acc.snapshot()
		if len(errs) > 0 {
			t.Fatalf("%s: %v", filepath.Base(fx), errs)
		}
		for _, m := range ms {
			if m.Name() != "nvidia_smi" {
				continue
			}
			for _, f := range m.FieldList() {
				typ := fmt.Sprintf("%T", f.Value)
				if want, ok := fields[f.Key]; !ok || want != typ {
					t.Errorf("%s: Telegraf emitted %s (%s), not in the parsed list (%q)", filepath.Base(fx), f.Key, typ, want)
				}
				seen[f.Key] = true
			}
		}
	}
	goType := map[catalog.ValueType]string{catalog.Int: "int64", catalog.Float: "float64"}
	for _, m := range catalog.Default().All() {
		if m.Telegraf.Name == "" {
			continue
		}
		typ, ok := fields[m.Telegraf.Name]
		switch {
		case !ok:
			t.Errorf("catalog: %s names Telegraf field %q, which Telegraf's nvidia_smi never emits", m.Name, m.Telegraf.Name)
		case typ != goType[m.Telegraf.Type]:
			t.Errorf("catalog: %s: Telegraf's %s is %s, the catalog says %s", m.Name, m.Telegraf.Name, typ, goType[m.Telegraf.Type])
		}
	}
	t.Logf("%d fields in Telegraf's parsers, %d seen on its %d fixtures", len(fields), len(seen), len(fixtures))
}

// Telegraf's inputs.execd runs `gpusampler run --execd nvidia_smi`: each
// gather is one nvidia_smi point per GPU with Telegraf's own field names and
// types (checked against its parser), every field on one timestamp, no host
// tag (Telegraf's agent adds its own), and memory_used beside memory_total,
// so a dashboard's memory_used/memory_total has rows.
func TestExecdNvidiaSMIDropIn(t *testing.T) {
	_, fields := nvidiaSMIFields(t)
	bin := buildBinary(t)
	e, acc := startExecd(t, bin, "nvidia_smi", "STDIN")
	time.Sleep(2500 * time.Millisecond)
	for range 2 {
		if err := e.Gather(acc); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	waitFor(t, 10*time.Second, "2 gathers × 2 GPUs", func() bool {
		ms, _ := acc.snapshot()
		n := 0
		for _, m := range ms {
			if m.Name() == "nvidia_smi" {
				n++
			}
		}
		return n >= 4
	})
	stopWithin(t, e)
	ms, errs := acc.snapshot()
	if errs = withoutShutdownRace(errs); len(errs) > 0 {
		t.Fatalf("accumulator errors: %v", errs)
	}
	byTime := map[time.Time]int{}
	n := 0
	for _, m := range ms {
		if m.Name() != "nvidia_smi" {
			continue
		}
		n++
		byTime[m.Time()]++
		if _, ok := m.GetTag("host"); ok {
			t.Fatalf("host tag in the drop-in shape: %v", m.Tags())
		}
		for _, k := range []string{"index", "name", "uuid", "pci_bus_id", "pstate"} {
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
		for k, want := range map[string]string{"driver_version": "sim", "current_ecc": "Enabled"} {
			if got, ok := m.GetField(k); !ok || got != want {
				t.Fatalf("field %s = %#v, want %q: %v", k, got, want, m.Fields())
			}
		}
		if s, ok := m.GetField("serial"); !ok || !strings.HasPrefix(fmt.Sprint(s), "SIM") {
			t.Fatalf("field serial = %#v, want the simulator's SIM…: %v", s, m.Fields())
		}
		own := 0
		for _, f := range m.FieldList() {
			if want, ok := fields[f.Key]; ok {
				own++
				if got := fmt.Sprintf("%T", f.Value); got != want {
					t.Errorf("%s is %s, Telegraf's nvidia_smi writes %s", f.Key, got, want)
				}
			}
			if strings.HasSuffix(f.Key, "_mean") || strings.HasSuffix(f.Key, "_count") {
				t.Fatalf("summary field %s in the drop-in shape", f.Key)
			}
		}
		used, ok1 := m.GetField("memory_used")
		total, ok2 := m.GetField("memory_total")
		if !ok1 || !ok2 || total.(int64) <= 0 {
			t.Fatalf("memory_used/memory_total not both on the line: %v", m.Fields())
		}
		if r := float64(used.(int64)) / float64(total.(int64)) * 100; r <= 0 || r > 100 {
			t.Fatalf("memory_used/memory_total*100 = %v", r)
		}
		if own < 10 {
			t.Fatalf("only %d of nvidia_smi's fields: %v", own, m.Fields())
		}
	}
	if n < 4 {
		t.Fatalf("%d nvidia_smi points", n)
	}
	for ts, k := range byTime {
		if k != 2 {
			t.Fatalf("%d points at %v, want one per GPU per gather (2)", k, ts)
		}
	}
}
