// Package nvidiasmitest checks metrics that claim to be a drop-in for
// Telegraf's nvidia_smi input against that input itself: Reference runs
// Telegraf's own nvidia_smi plugin on its own nvidia-smi XML fixtures (and
// reads the field types its parsers declare), and Compare lays the
// metrics' tags and fields beside Telegraf's, one row per name, with their
// types. A name both sides write must have the same kind (tag or field)
// and type, and every tag Telegraf writes must be there too: a type clash
// is an HTTP 400 in a database that already holds Telegraf's data, and a
// missing tag empties a dashboard's GROUP BY.
//
// The Telegraf version is the one the calling module pins; its source
// (parsers and fixtures) is located with `go list -m`. The package imports
// Telegraf's plugin packages, not telegraf/testutil (which pulls in Docker
// libraries), so that test modules importing it stay lean.
//
// Everything here is for tests: functions take a testing.TB and fail it
// when Telegraf's source cannot be read.
package nvidiasmitest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/metric"
	"github.com/influxdata/telegraf/plugins/inputs/nvidia_smi"
)

// Measurement is the measurement Telegraf's nvidia_smi input writes per GPU.
const Measurement = "nvidia_smi"

// TagType is the type column's value for a tag.
const TagType = "tag"

// Reference is what Telegraf's nvidia_smi input writes.
type Reference struct {
	// Tags are the tag keys it wrote on its fixtures.
	Tags map[string]bool
	// Fields are the fields its parsers (both nvidia-smi XML schemas) can
	// write, with their Go types ("int64", "float64", "string").
	Fields map[string]string
	// Seen are the fields it wrote on its fixtures, in Measurement.
	Seen map[string]bool
	// Elsewhere are the fields it wrote on its fixtures only in another
	// measurement (nvidia_smi_process' pid, nvidia_smi_mig's memory_fb_*),
	// each with that measurement.
	Elsewhere map[string]string
	// Fixtures are the fixture files' base names.
	Fixtures []string
}

// Load runs Telegraf's nvidia_smi input on each of its fixtures and reads
// its parsers' field list. It fails tb when the source cannot be
// read, when a fixture does not parse, or when the input writes a field
// its parsers' list lacks or types differently (the list would be stale).
func Load(tb testing.TB) Reference {
	tb.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-m", "-f", "{{.Dir}}", "github.com/influxdata/telegraf").Output()
	if err != nil {
		tb.Fatalf("nvidiasmitest: locate the telegraf module: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "plugins", "inputs", "nvidia_smi")
	ref := Reference{Tags: map[string]bool{}, Fields: parserFields(tb, dir), Seen: map[string]bool{}, Elsewhere: map[string]string{}}
	fixtures, _ := filepath.Glob(filepath.Join(dir, "testdata", "*.xml"))
	if len(fixtures) == 0 {
		tb.Fatalf("nvidiasmitest: no nvidia_smi fixtures in %s", dir)
	}
	for _, fx := range fixtures {
		name := filepath.Base(fx)
		ref.Fixtures = append(ref.Fixtures, name)
		script := filepath.Join(tb.TempDir(), "nvidia-smi")
		if err := os.WriteFile(script, fmt.Appendf(nil, "#!/bin/sh\ncat %q\n", fx), 0o755); err != nil {
			tb.Fatal(err)
		}
		in := &nvidia_smi.NvidiaSMI{BinPath: script, Timeout: config.Duration(time.Minute), Log: discard{}}
		var acc Accumulator
		if err := in.Gather(&acc); err != nil {
			tb.Fatalf("nvidiasmitest: %s: %v", name, err)
		}
		if len(acc.errs) > 0 {
			tb.Fatalf("nvidiasmitest: %s: %v", name, acc.errs)
		}
		for _, m := range acc.metrics {
			for _, f := range m.FieldList() {
				typ := fmt.Sprintf("%T", f.Value)
				if want, ok := ref.Fields[f.Key]; !ok || want != typ {
					tb.Fatalf("nvidiasmitest: %s: Telegraf wrote %s (%s) in %s, its parsers' list says %q", name, f.Key, typ, m.Name(), want)
				}
				if m.Name() == Measurement {
					ref.Seen[f.Key] = true
				} else {
					ref.Elsewhere[f.Key] = m.Name()
				}
			}
			if m.Name() != Measurement {
				continue
			}
			for _, tag := range m.TagList() {
				ref.Tags[tag.Key] = true
			}
		}
	}
	for f := range ref.Elsewhere {
		if ref.Seen[f] {
			delete(ref.Elsewhere, f)
		}
	}
	if len(ref.Tags) == 0 || len(ref.Seen) == 0 {
		tb.Fatalf("nvidiasmitest: Telegraf's nvidia_smi wrote no %s metrics on %d fixtures", Measurement, len(fixtures))
	}
	return ref
}

// parserFields reads the fields Telegraf's nvidia_smi parsers can write,
// with their types, from the parsers' source.
func parserFields(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	fields := map[string]string{}
	set := regexp.MustCompile(`SetIfUsed\("(int|float|str)", fields, "([a-z0-9_]+)"`)
	goType := map[string]string{"int": "int64", "float": "float64", "str": "string"}
	for _, schema := range []string{"schema_v11", "schema_v12"} {
		src, err := os.ReadFile(filepath.Join(dir, schema, "parser.go"))
		if err != nil {
			tb.Fatalf("nvidiasmitest: %v", err)
		}
		for _, m := range set.FindAllStringSubmatch(string(src), -1) {
			fields[m[2]] = goType[m[1]]
		}
	}
	if len(fields) < 30 {
		tb.Fatalf("nvidiasmitest: found only %d fields in Telegraf's nvidia_smi parsers: has their source changed shape?", len(fields))
	}
	return fields
}

// Row is one tag or field name: its type as Telegraf's nvidia_smi writes
// it and as the compared metrics carry it ("tag" for a tag; "" where that
// side never writes the name; types joined by "|" where the metrics
// disagree among themselves).
type Row struct {
	Name       string
	Telegraf   string
	GPUSampler string
}

// Status is the row's verdict: "yes" (both sides, same kind and type),
// "NO" (both sides, different), "Telegraf only" or "gpusampler only".
func (r Row) Status() string {
	switch {
	case r.Telegraf == "":
		return "gpusampler only"
	case r.GPUSampler == "":
		return "Telegraf only"
	case r.Telegraf == r.GPUSampler:
		return "yes"
	}
	return "NO"
}

// Comparison is the result of Compare.
type Comparison struct {
	// Rows are tags first, then fields, each by name.
	Rows []Row
	// Problems are the mismatches, one sentence each: a name typed or
	// kinded differently, or a tag of Telegraf's the metrics lack.
	// Empty when the metrics are a drop-in.
	Problems []string
}

// Compare lays the tags and fields of ms' nvidia_smi metrics beside ref's
// (leaving out ref's fields of other measurements that ms' lack).
// Names only Telegraf writes (fields gpusampler has no data for) and names
// only gpusampler writes (its own additions) are rows, not problems; a tag
// Telegraf writes that ms lack is a problem, as is any name both sides
// write with a different kind or type.
func Compare(ref Reference, ms []telegraf.Metric) Comparison {
	ours := map[string]map[string]bool{} // name → the kinds/types seen
	note := func(name, typ string) {
		if ours[name] == nil {
			ours[name] = map[string]bool{}
		}
		ours[name][typ] = true
	}
	for _, m := range ms {
		if m.Name() != Measurement {
			continue
		}
		for _, tag := range m.TagList() {
			note(tag.Key, TagType)
		}
		for _, f := range m.FieldList() {
			note(f.Key, fmt.Sprintf("%T", f.Value))
		}
	}
	theirs := map[string]string{}
	for name, typ := range ref.Fields {
		if _, other := ref.Elsewhere[name]; other && ours[name] == nil {
			continue
		}
		theirs[name] = typ
	}
	for name := range ref.Tags {
		theirs[name] = TagType
	}
	var c Comparison
	names := map[string]bool{}
	for name := range theirs {
		names[name] = true
	}
	for name := range ours {
		names[name] = true
	}
	for name := range names {
		types := make([]string, 0, len(ours[name]))
		for typ := range ours[name] {
			types = append(types, typ)
		}
		slices.Sort(types)
		c.Rows = append(c.Rows, Row{Name: name, Telegraf: theirs[name], GPUSampler: strings.Join(types, "|")})
	}
	slices.SortFunc(c.Rows, func(a, b Row) int {
		if ta, tb := isTag(a), isTag(b); ta != tb {
			if ta {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, r := range c.Rows {
		switch {
		case r.Status() == "NO":
			c.Problems = append(c.Problems, fmt.Sprintf("%s: Telegraf's nvidia_smi writes %s, the metrics carry %s", r.Name, r.Telegraf, r.GPUSampler))
		case r.Telegraf == TagType && r.GPUSampler == "":
			c.Problems = append(c.Problems, fmt.Sprintf("%s: Telegraf's nvidia_smi writes this tag, the metrics lack it", r.Name))
		}
	}
	return c
}

// TelegrafOnly returns the names only Telegraf's nvidia_smi writes, in the
// rows' order: what a dashboard would miss.
func (c Comparison) TelegrafOnly() []string {
	var names []string
	for _, r := range c.Rows {
		if r.Status() == "Telegraf only" {
			names = append(names, r.Name)
		}
	}
	return names
}

func isTag(r Row) bool { return r.Telegraf == TagType || strings.Contains(r.GPUSampler, TagType) }

// Table renders the rows as a Markdown table: tag or field name, Telegraf
// nvidia_smi's type, gpusampler's, and the verdict.
func (c Comparison) Table() string {
	var b strings.Builder
	b.WriteString("| tag/field | Telegraf nvidia_smi | gpusampler drop-in | equal? |\n|---|---|---|---|\n")
	dash := func(s string) string {
		if s == "" {
			return "—"
		}
		return s
	}
	for _, r := range c.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Name, dash(r.Telegraf), dash(r.GPUSampler), r.Status())
	}
	return b.String()
}

// Check compares ms with ref (Compare), logs the table, and fails tb once
// per problem. It returns the comparison for further checks.
func Check(tb testing.TB, ref Reference, ms []telegraf.Metric) Comparison {
	tb.Helper()
	c := Compare(ref, ms)
	both := 0
	for _, r := range c.Rows {
		if r.Telegraf != "" && r.GPUSampler != "" {
			both++
		}
	}
	tb.Logf("%s metrics vs Telegraf's nvidia_smi on its fixtures (%s): %d names on both sides\n%s",
		Measurement, strings.Join(ref.Fixtures, ", "), both, c.Table())
	for _, p := range c.Problems {
		tb.Errorf("not a drop-in for Telegraf's nvidia_smi: %s", p)
	}
	return c
}

// Accumulator collects what an input gathers: a stand-in for Telegraf's
// agent, without telegraf/testutil and what that links. The mutex covers
// an input that adds from goroutines of its own.
type Accumulator struct {
	mu      sync.Mutex
	metrics []telegraf.Metric
	errs    []error
}

func (a *Accumulator) add(name string, fields map[string]any, tags map[string]string, ts ...time.Time) {
	tm := time.Now()
	if len(ts) > 0 {
		tm = ts[0]
	}
	a.AddMetric(metric.New(name, tags, fields, tm))
}

// AddFields adds a metric (telegraf.Accumulator).
func (a *Accumulator) AddFields(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}

// AddGauge adds a metric (telegraf.Accumulator).
func (a *Accumulator) AddGauge(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}

// AddCounter adds a metric (telegraf.Accumulator).
func (a *Accumulator) AddCounter(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}

// AddSummary adds a metric (telegraf.Accumulator).
func (a *Accumulator) AddSummary(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}

// AddHistogram adds a metric (telegraf.Accumulator).
func (a *Accumulator) AddHistogram(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}

// AddMetric adds m (telegraf.Accumulator).
func (a *Accumulator) AddMetric(m telegraf.Metric) {
	a.mu.Lock()
	a.metrics = append(a.metrics, m)
	a.mu.Unlock()
}

// SetPrecision does nothing: metrics keep their timestamps.
func (*Accumulator) SetPrecision(time.Duration) {}

// AddError records err (telegraf.Accumulator).
func (a *Accumulator) AddError(err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
}

// WithTracking is not supported: the inputs tested here do not track
// metrics (a test that needs tracking wraps the Accumulator).
func (a *Accumulator) WithTracking(int) telegraf.TrackingAccumulator {
	panic("nvidiasmitest: tracking accumulator not supported")
}

// Snapshot returns copies of the metrics and errors added so far.
func (a *Accumulator) Snapshot() ([]telegraf.Metric, []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]telegraf.Metric(nil), a.metrics...), append([]error(nil), a.errs...)
}

// discard is a telegraf.Logger that drops everything: the input's own log
// lines say nothing a failed Load does not.
type discard struct{}

func (discard) Level() telegraf.LogLevel { return telegraf.Error }
func (discard) AddAttribute(string, any) {}
func (discard) Errorf(string, ...any)    {}
func (discard) Error(...any)             {}
func (discard) Warnf(string, ...any)     {}
func (discard) Warn(...any)              {}
func (discard) Infof(string, ...any)     {}
func (discard) Info(...any)              {}
func (discard) Debugf(string, ...any)    {}
func (discard) Debug(...any)             {}
func (discard) Tracef(string, ...any)    {}
func (discard) Trace(...any)             {}
