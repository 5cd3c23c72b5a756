package prometheus

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// The generated files of this package: the name mapping and the dashboard
// in the prometheus naming. -update-docs rewrites them from the catalog
// and the dcgm-named dashboard; without it a test fails when they differ.
var updateDocs = flag.Bool("update-docs", false, "rewrite METRICS.md and deploy/grafana-dashboard-prometheus.json")

const (
	metricsDoc    = "METRICS.md"
	dashboardDCGM = "deploy/grafana-dashboard.json"
	dashboardProm = "deploy/grafana-dashboard-prometheus.json"
)

// scaleText writes the factor from the catalog's unit to an exposed one.
func scaleText(f float64) string {
	switch {
	case f == 1:
		return "1"
	case f > 1:
		return "×" + strconv.FormatFloat(f, 'f', -1, 64)
	}
	return "÷" + strconv.FormatFloat(1/f, 'f', -1, 64)
}

// seriesText writes a series' name with its constant label, if any.
func seriesText(s series) string {
	if s.label[0] == "" {
		return s.name
	}
	return fmt.Sprintf("%s{%s=%q}", s.name, s.label[0], s.label[1])
}

// promType is the exposed type of a series.
func promType(s series) string {
	if s.kind == catalog.Counter {
		return "counter"
	}
	return "gauge"
}

// renderMetricsDoc writes METRICS.md: every catalog metric under both
// namings, with units and the factor from the catalog's unit, and the
// series both namings add.
func renderMetricsDoc(t *testing.T, cat *catalog.Catalog) string {
	t.Helper()
	dcgm, err := buildSeries(cat, NamingDCGM)
	if err != nil {
		t.Fatal(err)
	}
	prom, err := buildSeries(cat, NamingPrometheus)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(`# Prometheus output: metric names in both namings

Generated from the metric catalog (` + "`go test ./outputs/prometheus -run TestGeneratedDocs -update-docs`" + `;
the test fails when this file differs from what the catalog says). For every catalog metric
(` + "`gpusampler metrics`" + `, in its unit): the series it is exposed as with ` + "`naming = \"dcgm\"`" + `
(the default) and with ` + "`naming = \"prometheus\"`" + `, each in its unit, and the factor from the catalog's
unit to it (exposed value = catalog value × factor; ÷ divides). Moving a dashboard or an alert from
one naming to the other means applying both factors, not only swapping names:
` + "`deploy/grafana-dashboard-prometheus.json`" + ` is ` + "`deploy/grafana-dashboard.json`" + ` translated so.

Labels: with ` + "`naming = \"dcgm\"`" + ` ` + labelList(deviceLabels(NamingDCGM, HostLabelLegacy)) + `; with
` + "`naming = \"prometheus\"`" + ` ` + labelList(deviceLabels(NamingPrometheus, HostLabelNew)) + ` (` + "`host_label`" + ` changes the
host label's spelling in either).

| ID | metric | unit | ` + "`naming = \"dcgm\"`" + ` | unit | factor | ` + "`naming = \"prometheus\"`" + ` | unit | factor | type |
|---|---|---|---|---|---|---|---|---|---|
`)
	byID := map[catalog.MetricID]series{}
	for _, s := range prom {
		byID[s.id] = s
	}
	for _, d := range dcgm {
		m, _ := cat.Get(d.id)
		p := byID[d.id]
		dname := "`" + seriesText(d) + "`"
		if d.avg1s {
			dname += " (1 s average)"
		}
		fmt.Fprintf(&b, "| %d | `%s` | %s | %s | %s | %s | `%s` | %s | %s | %s |\n", m.ID, m.Name, m.Unit,
			dname, unitOrDash(d.unit), scaleText(d.scale), seriesText(p), unitOrDash(p.unit), scaleText(p.scale), promType(p))
	}
	b.WriteString(`
Every gauge also has ` + "`_min`, `_max` and `_mean`" + ` series over the window, named the Prometheus way in
both namings (the "` + "`naming = \"prometheus\"`" + `" name plus the suffix, in its unit: ` + "`gpusampler_power_watts_max`" + `,
` + "`gpusampler_clock_sm_hertz_mean`" + `, ` + "`gpusampler_utilization_gpu_ratio_min`" + `).

Series that are not catalog metrics, the same in both namings unless two names are given:

| series | meaning |
|---|---|
| ` + "`" + nameXIDLastDCGM + "` / `" + nameXIDLastProm + "`" + ` | the last XID's code (a gauge, as dcgm-exporter) |
| ` + "`" + nameXIDTotal + "`" + ` | XID events counted |
| ` + "`" + nameSlowdownTemp + "`, `" + nameMemoryMaxTemp + "`, `" + nameShutdownTemp + "`, `" + nameMaxOpTemp + "`" + ` | the device's own temperature thresholds, °C |
| ` + "`" + nameUp + "`" + ` | 1 fresh, 0 stale or lost |
| ` + "`" + nameLastSample + "`" + ` | own time of the newest sample, Unix seconds |

dcgm-exporter 4.4.0-4.5.0's default counters that gpusampler does not expose:

| dcgm-exporter | why, and what instead |
|---|---|
`)
	for _, name := range slices.Sorted(maps.Keys(notExposed)) {
		fmt.Fprintf(&b, "| `%s` | %s |\n", name, notExposed[name])
	}
	return b.String()
}

func labelList(ls []string) string {
	q := make([]string, len(ls))
	for i, l := range ls {
		q[i] = "`" + l + "`"
	}
	return strings.Join(q, ", ")
}

func unitOrDash(u string) string {
	if u == "" {
		return "-"
	}
	return u
}

// checkGenerated compares a generated file with what is on disk, or
// rewrites it under -update-docs.
func checkGenerated(t *testing.T, path string, want []byte) {
	t.Helper()
	if *updateDocs {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what the catalog generates: go test ./outputs/prometheus -run TestGeneratedDocs -update-docs", path)
	}
}

// TestGeneratedDocs: METRICS.md and the prometheus-named dashboard are
// what the catalog and the dcgm-named dashboard generate now.
func TestGeneratedDocs(t *testing.T) {
	checkGenerated(t, metricsDoc, []byte(renderMetricsDoc(t, catalog.Default())))
	src, err := os.ReadFile(dashboardDCGM)
	if err != nil {
		t.Fatal(err)
	}
	dash, err := translateDashboard(src, catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, dashboardProm, dash)
}

// dcgmToProm says how a dcgm-named series is read under the prometheus
// naming: the series (with its constant label) and the factor that turns
// its value back into the dcgm-named one's unit.
type dcgmToProm struct {
	name   string
	label  [2]string
	factor float64
}

// dcgmTranslations maps every DCGM_FI_* name of the catalog to its
// prometheus-named series; metrics whose dcgm-named series has no
// prometheus-named equivalent (the 1 s power average) map to an error.
func dcgmTranslations(cat *catalog.Catalog) (map[string]dcgmToProm, map[string]string, error) {
	dcgm, err := buildSeries(cat, NamingDCGM)
	if err != nil {
		return nil, nil, err
	}
	prom, err := buildSeries(cat, NamingPrometheus)
	if err != nil {
		return nil, nil, err
	}
	byID := map[catalog.MetricID]series{}
	for _, s := range prom {
		byID[s.id] = s
	}
	out, none := map[string]dcgmToProm{}, map[string]string{}
	for _, d := range dcgm {
		if !strings.HasPrefix(d.name, "DCGM_FI_") {
			continue
		}
		if d.avg1s {
			none[d.name] = "its 1 s average has no prometheus-named series (gpusampler_power_watts is the newest sample, _mean the window's)"
			continue
		}
		p := byID[d.id]
		out[d.name] = dcgmToProm{name: p.name, label: p.label, factor: d.scale / p.scale}
	}
	out[nameXIDLastDCGM] = dcgmToProm{name: nameXIDLastProm, factor: 1}
	return out, none, nil
}

// Label names that differ between the namings.
var labelRenames = map[string]string{"UUID": "uuid", "modelName": "model_name", HostLabelLegacy: HostLabelNew}

var (
	dcgmRef     = regexp.MustCompile(`\bDCGM_FI_[A-Z0-9_]+\b`)
	identBefore = regexp.MustCompile(`[a-z_]+\s*$`)
)

// translateExpr rewrites one PromQL expression from the dcgm naming to the
// prometheus naming: names, label names and the unit factors. A factor is
// applied to the selector, or, for a range selector, to the function call
// around it (rate, increase and the *_over_time functions are linear).
func translateExpr(expr string, tr map[string]dcgmToProm, none map[string]string) (string, error) {
	for {
		loc := dcgmRef.FindStringIndex(expr)
		if loc == nil {
			break
		}
		name := expr[loc[0]:loc[1]]
		if why, ok := none[name]; ok {
			return "", fmt.Errorf("%s: %s", name, why)
		}
		p, ok := tr[name]
		if !ok {
			return "", fmt.Errorf("%s: not a series gpusampler exposes", name)
		}
		start, end := loc[0], loc[1]
		sel := ""
		if end < len(expr) && expr[end] == '{' {
			close := strings.IndexByte(expr[end:], '}')
			if close < 0 {
				return "", fmt.Errorf("%s: unterminated selector", name)
			}
			sel = expr[end+1 : end+close]
			end += close + 1
		}
		if p.label[0] != "" {
			if sel != "" {
				sel += ", "
			}
			sel += fmt.Sprintf("%s=%q", p.label[0], p.label[1])
		}
		repl := p.name
		if sel != "" {
			repl += "{" + sel + "}"
		}
		// a range selector: the factor goes around the enclosing call
		if end < len(expr) && expr[end] == '[' && p.factor != 1 {
			depth, open := 0, -1
			for i := start - 1; i >= 0; i-- {
				if expr[i] == ')' {
					depth++
				} else if expr[i] == '(' {
					if depth == 0 {
						open = i
						break
					}
					depth--
				}
			}
			fn := identBefore.FindString(expr[:max(open, 0)])
			if open < 0 || fn == "" {
				return "", fmt.Errorf("%s: a range selector outside a function call", name)
			}
			closeAt, depth := -1, 0
			for i := end; i < len(expr); i++ {
				if expr[i] == '(' {
					depth++
				} else if expr[i] == ')' {
					if depth == 0 {
						closeAt = i
						break
					}
					depth--
				}
			}
			if closeAt < 0 {
				return "", fmt.Errorf("%s: unbalanced parentheses", name)
			}
			callStart := open - len(fn)
			call := expr[callStart:start] + repl + expr[end:closeAt+1]
			expr = expr[:callStart] + "(" + call + factorText(p.factor) + ")" + expr[closeAt+1:]
			continue
		}
		if p.factor != 1 {
			repl = "(" + repl + factorText(p.factor) + ")"
		}
		expr = expr[:start] + repl + expr[end:]
	}
	return renameLabels(expr), nil
}

// factorText writes a factor as a PromQL multiplication or division.
func factorText(f float64) string {
	if f >= 1 {
		return " * " + strconv.FormatFloat(f, 'f', -1, 64)
	}
	return " / " + strconv.FormatFloat(1/f, 'f', -1, 64)
}

var labelRef = regexp.MustCompile(`\b(UUID|modelName|Hostname)\b`)

// renameLabels spells dcgm-exporter's label names the prometheus way.
func renameLabels(s string) string {
	return labelRef.ReplaceAllStringFunc(s, func(l string) string { return labelRenames[l] })
}

// translateDashboard returns the dashboard src (dcgm naming) for the
// prometheus naming: every query, legend and variable translated, another
// uid and title. The JSON is otherwise kept as it is (key order, layout).
func translateDashboard(src []byte, cat *catalog.Catalog) ([]byte, error) {
	tr, none, err := dcgmTranslations(cat)
	if err != nil {
		return nil, err
	}
	var dash map[string]any
	if err := json.Unmarshal(src, &dash); err != nil {
		return nil, fmt.Errorf("parse %s: %w", dashboardDCGM, err)
	}
	var walkErr error
	var walk func(key string, v any) any
	walk = func(key string, v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				x[k] = walk(k, e)
			}
		case []any:
			for i, e := range x {
				x[i] = walk(key, e)
			}
		case string:
			switch key {
			case "expr", "definition", "query":
				out, err := translateExpr(x, tr, none)
				if err != nil && walkErr == nil {
					walkErr = fmt.Errorf("%s: %q: %w", key, x, err)
				}
				return out
			case "legendFormat":
				return renameLabels(x)
			}
		}
		return v
	}
	walk("", dash)
	if walkErr != nil {
		return nil, walkErr
	}
	dash["uid"] = fmt.Sprint(dash["uid"]) + "-prom"
	dash["title"] = fmt.Sprint(dash["title"]) + ` (naming = "prometheus")`
	dash["description"] = fmt.Sprint(dash["description"]) + " Generated from grafana-dashboard.json for naming = \"prometheus\" (names, labels and unit factors from the catalog: outputs/prometheus/METRICS.md)."
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(dash); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// The translation of expressions: names, labels, factors on selectors and
// around range functions, and no translation where there is no equivalent.
func TestTranslateExpr(t *testing.T) {
	tr, none, err := dcgmTranslations(catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ in, want string }{
		{`max by (Hostname, gpu) (DCGM_FI_DEV_FB_USED{Hostname=~"$host"})`, `max by (hostname, gpu) ((gpusampler_memory_used_bytes{hostname=~"$host"} / 1048576))`},
		{`sum(rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"}[5m])) / 1000`, `sum((rate(gpusampler_energy_joules_total{gpu="0"}[5m]) * 1000)) / 1000`},
		{`DCGM_FI_DEV_SM_CLOCK`, `(gpusampler_clock_sm_hertz / 1000000)`},
		{`DCGM_FI_PROF_SM_ACTIVE{UUID="x"}`, `gpusampler_sm_active_ratio{uuid="x"}`},
		{`rate(DCGM_FI_DEV_THERMAL_VIOLATION[1m])`, `(rate(gpusampler_violation_seconds_total{policy="thermal"}[1m]) * 1000000)`},
		{`gpusampler_power_watts_max{modelName="H200"}`, `gpusampler_power_watts_max{model_name="H200"}`},
	} {
		got, err := translateExpr(c.in, tr, none)
		if err != nil || got != c.want {
			t.Errorf("translateExpr(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{`DCGM_FI_DEV_POWER_USAGE`, `DCGM_FI_DEV_NO_SUCH_FIELD`} {
		if got, err := translateExpr(in, tr, none); err == nil {
			t.Errorf("translateExpr(%q) = %q, want an error", in, got)
		}
	}
}

// The README's DCGM names are what the catalog exposes: every DCGM_FI_*
// the README mentions is exposed (in a scrape), except those of its "Not
// exposed" line, which are exactly the notExposed counters (and the
// driver version label) and are not exposed.
func TestReadmeDCGMNamesAreExposed(t *testing.T) {
	exposed := map[string]bool{nameXIDLastDCGM: true}
	for _, m := range catalog.Default().All() {
		if m.DCGM.Name != "" {
			exposed[m.DCGM.Name] = true
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	expand := regexp.MustCompile(`([A-Z0-9_]*)\{([A-Z0-9_,]+)\}([A-Z0-9_]*)`)
	names := func(text string) []string {
		var out []string
		for _, tok := range regexp.MustCompile(`DCGM_FI_[A-Z0-9_{},*]+`).FindAllString(text, -1) {
			tok = strings.TrimRight(tok, ",")
			if m := expand.FindStringSubmatch(tok); m != nil {
				for _, alt := range strings.Split(m[2], ",") {
					out = append(out, m[1]+alt+m[3])
				}
				continue
			}
			out = append(out, tok)
		}
		return out
	}
	var notLine string
	for _, para := range strings.Split(string(readme), "\n- ") {
		if strings.HasPrefix(para, "Not exposed:") {
			notLine, _, _ = strings.Cut(para, "\n\n")
		}
	}
	if notLine == "" {
		t.Fatal(`README.md has no "- Not exposed:" line`)
	}
	listed := map[string]bool{}
	for _, n := range names(notLine) {
		listed[n] = true
		if exposed[n] {
			t.Errorf("README.md lists %s as not exposed; it is", n)
		}
	}
	for n := range notExposed {
		if !listed[n] {
			t.Errorf("README.md's Not exposed line lacks %s (%s)", n, notExposed[n])
		}
	}
	for _, n := range names(strings.Replace(string(readme), notLine, "", 1)) {
		if strings.HasSuffix(n, "*") {
			prefix := strings.TrimSuffix(n, "*")
			if !slices.ContainsFunc(slices.Collect(maps.Keys(exposed)), func(e string) bool { return strings.HasPrefix(e, prefix) }) {
				t.Errorf("README.md names %s; no exposed metric matches", n)
			}
			continue
		}
		if !exposed[n] {
			t.Errorf("README.md names %s outside its Not exposed line; it is not exposed", n)
		}
	}
	if strings.Contains(string(readme), "once GPM metrics land") {
		t.Error("README.md says DCGM_FI_PROF_* are still to come; the catalog has them")
	}
}

// dashboardExprs returns the PromQL of every panel target of a dashboard,
// in panel order, and its template variables' definitions.
func dashboardExprs(t *testing.T, path string) (exprs, vars []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
		Templating struct{ List []struct{ Definition string } }
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			vars = append(vars, v.Definition)
		}
	}
	return exprs, vars
}

// seriesLines renders the families of a scrape that exprs name as promtool
// input series: gauges constant, counters growing by a hundredth of their
// value a minute (the same growth in every unit, so both namings' rates
// agree).
func seriesLines(fams map[string]*dto.MetricFamily, names map[string]bool) []map[string]string {
	var out []map[string]string
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		if !names[name] {
			continue
		}
		f := fams[name]
		for _, m := range f.GetMetric() {
			ls := labelsOf(m)
			var pairs []string
			for _, k := range slices.Sorted(maps.Keys(ls)) {
				pairs = append(pairs, fmt.Sprintf("%s=%q", k, ls[k]))
			}
			v := valueOf(m)
			step := 0.0
			if m.Counter != nil {
				step = v / 100
			}
			out = append(out, map[string]string{
				"series": name + "{" + strings.Join(pairs, ",") + "}",
				"values": strconv.FormatFloat(v, 'f', -1, 64) + "+" + strconv.FormatFloat(step, 'f', -1, 64) + "x30",
			})
		}
	}
	return out
}

// TestDashboardsAgree: the two dashboards (dcgm naming, and the one
// generated for the prometheus naming) read the same samples the same way.
// One batch of every catalog metric on two GPUs goes into an output of
// each naming; promtool evaluates every target of both dashboards over the
// two scrapes, and each pair must agree (within 1e-9, relative): a name
// swapped without its unit factor (MHz against Hz, mJ against J, % against
// a ratio) differs by 10^3 to 10^6, and a query of a series a scrape lacks
// has no value at all. Variables' series and labels must exist too.
func TestDashboardsAgree(t *testing.T) {
	bin := promtool(t)
	batch := fullBatch(devices(2), t0.UnixNano())
	xid := &record.Batch{Events: []record.Event{{Kind: record.EventXID, Device: 1, StartNS: t0.UnixNano(), Attrs: []record.Attr{{Key: "xid", Value: "79"}}}}}
	scrapes := map[string]map[string]*dto.MetricFamily{}
	for _, naming := range Namings {
		o, _ := newTest(t, Options{Naming: naming})
		o.Write(context.Background(), batch)
		o.Write(context.Background(), xid)
		scrapes[naming] = scrape(t, o)
	}
	dExprs, dVars := dashboardExprs(t, dashboardDCGM)
	pExprs, pVars := dashboardExprs(t, dashboardProm)
	if len(dExprs) != len(pExprs) || len(dExprs) < 10 {
		t.Fatalf("%d targets in %s, %d in %s", len(dExprs), dashboardDCGM, len(pExprs), dashboardProm)
	}
	// Variables: label_values(SERIES, LABEL) — the series exists with the label.
	labelValues := regexp.MustCompile(`^label_values\(([a-zA-Z_:]+)(?:\{[^}]*\})?, *([a-zA-Z_]+)\)$`)
	for naming, vars := range map[string][]string{NamingDCGM: dVars, NamingPrometheus: pVars} {
		for _, v := range vars {
			m := labelValues.FindStringSubmatch(v)
			if m == nil {
				t.Errorf("%s: variable %q is not label_values(SERIES, LABEL)", naming, v)
				continue
			}
			f := scrapes[naming][m[1]]
			if f == nil || len(f.GetMetric()) == 0 || labelsOf(f.GetMetric()[0])[m[2]] == "" {
				t.Errorf("%s: variable %q: no series %s with label %s in a scrape", naming, v, m[1], m[2])
			}
		}
	}
	subst := strings.NewReplacer(`"$host"`, `".+"`, `"$gpu"`, `".+"`, "$__rate_interval", "5m")
	names := map[string]bool{}
	for _, e := range append(slices.Clone(dExprs), pExprs...) {
		for _, n := range metricRef.FindAllString(e, -1) {
			names[n] = true
		}
	}
	var input []map[string]string
	for _, naming := range Namings {
		input = append(input, seriesLines(scrapes[naming], names)...)
	}
	var cases []map[string]any
	for i := range dExprs {
		d, p := "sum("+subst.Replace(dExprs[i])+")", "sum("+subst.Replace(pExprs[i])+")"
		cases = append(cases, map[string]any{
			"expr":        fmt.Sprintf("abs(%s - %s) <= bool (abs(%s) * 1e-9 + 1e-9)", d, p, d),
			"eval_time":   "20m",
			"exp_samples": []map[string]any{{"labels": "{}", "value": 1}},
		})
	}
	doc := map[string]any{
		"rule_files": []string{"rules.yml"},
		"tests":      []map[string]any{{"interval": "1m", "input_series": input, "promql_expr_test": cases}},
	}
	dir := t.TempDir()
	b, err := json.MarshalIndent(doc, "", "  ") // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string][]byte{"rules.yml": []byte("groups: []\n"), "dashboards_test.yml": b} {
		if err := os.WriteFile(filepath.Join(dir, name), text, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "test", "rules", "dashboards_test.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: the dashboards disagree or read missing series: %v\n%s", err, out)
	}
	t.Logf("%d targets agree between %s and %s (%d input series)", len(dExprs), dashboardDCGM, dashboardProm, len(input))
}
