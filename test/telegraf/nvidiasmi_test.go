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

	"github.com/gpusampler/gpusampler/sampler"
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
	goType := map[sampler.ValueType]string{sampler.Int: "int64", sampler.Float: "float64"}
	for _, m := range sampler.DefaultCatalog.All() {
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
