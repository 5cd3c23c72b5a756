package prometheus

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// dashboardQuery is one query of a dcgm-exporter dashboard: the series it
// reads and the labels it filters, groups or labels legends by.
type dashboardQuery struct {
	panel  string
	metric string
	labels []string
	// later says why the series cannot exist yet (e.g. a metric not yet
	// in the catalog); the sub-test is then skipped, visibly, until the
	// catalog has the metric, and must pass from then on.
	later string
}

// dcgmDashboardQueries are the panels of NVIDIA's official DCGM exporter
// dashboard (grafana.com 12239; grafana/dcgm-exporter-dashboard.json in
// NVIDIA/dcgm-exporter) and other common dcgm-exporter panels. MIG labels
// (GPU_I_ID, GPU_I_PROFILE) appear only on MIG devices, as with
// dcgm-exporter; the queries group by them, which works when they are
// absent.
var dcgmDashboardQueries = []dashboardQuery{
	{panel: "variable Hostname", metric: "DCGM_FI_DEV_FB_FREE", labels: []string{"Hostname"}},
	{panel: "variable gpu", metric: "DCGM_FI_DEV_FB_FREE", labels: []string{"Hostname", "gpu"}},
	{panel: "GPU Temperature", metric: "DCGM_FI_DEV_GPU_TEMP", labels: []string{"Hostname", "gpu", "UUID"}},
	{panel: "GPU Avg. Temp", metric: "DCGM_FI_DEV_GPU_TEMP", labels: []string{"Hostname", "gpu"}},
	{panel: "GPU Power Usage", metric: "DCGM_FI_DEV_POWER_USAGE", labels: []string{"Hostname", "gpu", "UUID"}},
	{panel: "GPU Power Total", metric: "DCGM_FI_DEV_POWER_USAGE", labels: []string{"Hostname", "gpu"}},
	{panel: "GPU SM Clocks", metric: "DCGM_FI_DEV_SM_CLOCK", labels: []string{"Hostname", "gpu", "UUID"}},
	{panel: "GPU Framebuffer Mem Used", metric: "DCGM_FI_DEV_FB_USED", labels: []string{"Hostname", "gpu"}},
	{panel: "GPU Utilization", metric: "DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels: []string{"Hostname", "gpu"}},
	{panel: "Tensor Core Utilization", metric: "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", labels: []string{"Hostname", "gpu"}},
	// common panels of other dcgm-exporter dashboards
	{panel: "GPU Utilization (DEV)", metric: "DCGM_FI_DEV_GPU_UTIL", labels: []string{"Hostname", "gpu", "UUID", "modelName"}},
	{panel: "Memory Copy Utilization", metric: "DCGM_FI_DEV_MEM_COPY_UTIL", labels: []string{"Hostname", "gpu"}},
	{panel: "Memory Clock", metric: "DCGM_FI_DEV_MEM_CLOCK", labels: []string{"Hostname", "gpu"}},
	{panel: "Memory Temperature", metric: "DCGM_FI_DEV_MEMORY_TEMP", labels: []string{"Hostname", "gpu"}},
	{panel: "Framebuffer Free", metric: "DCGM_FI_DEV_FB_FREE", labels: []string{"Hostname", "gpu", "pci_bus_id", "device"}},
	{panel: "Energy", metric: "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels: []string{"Hostname", "gpu"}},
	{panel: "XID Errors", metric: "DCGM_FI_DEV_XID_ERRORS", labels: []string{"Hostname", "gpu"}},
	{panel: "PCIe Replays", metric: "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", labels: []string{"Hostname", "gpu"}},
	{panel: "Remapped Rows", metric: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", labels: []string{"Hostname", "gpu"}},
	{panel: "SM Active", metric: "DCGM_FI_PROF_SM_ACTIVE", labels: []string{"Hostname", "gpu"}},
	{panel: "SM Occupancy", metric: "DCGM_FI_PROF_SM_OCCUPANCY", labels: []string{"Hostname", "gpu"}},
	{panel: "DRAM Active", metric: "DCGM_FI_PROF_DRAM_ACTIVE", labels: []string{"Hostname", "gpu"}},
	{panel: "PCIe TX", metric: "DCGM_FI_PROF_PCIE_TX_BYTES", labels: []string{"Hostname", "gpu"}},
	{panel: "PCIe RX", metric: "DCGM_FI_PROF_PCIE_RX_BYTES", labels: []string{"Hostname", "gpu"}},
}

// dcgmDefaultCounters are the metrics dcgm-exporter 4.4.0-4.5.0 collects
// by default (etc/default-counters.csv): each is exposed, or listed in
// notExposed with the reason.
var dcgmDefaultCounters = []string{"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
	"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
	"DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
	"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
	"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
	"DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
	"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"}

var notExposed = map[string]string{
	"DCGM_FI_DEV_PCIE_TX_THROUGHPUT":     "KB counter; gpusampler_pcie_tx_bytes_total (bytes) instead",
	"DCGM_FI_DEV_PCIE_RX_THROUGHPUT":     "KB counter; gpusampler_pcie_rx_bytes_total (bytes) instead",
	"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "gpusampler_nvlink_{tx,rx}_bytes_total instead",
	"DCGM_FI_DEV_VGPU_LICENSE_STATUS":    "vGPU licensing is not sampled",
}

// catalogHasDCGM reports whether a catalog metric carries the DCGM name.
func catalogHasDCGM(name string) bool {
	for _, m := range catalog.Default().All() {
		if m.DCGM.Name == name {
			return true
		}
	}
	return false
}

// TestDCGMDashboardCompatibility: every series the common dcgm-exporter
// dashboard queries need exists with the labels they use.
func TestDCGMDashboardCompatibility(t *testing.T) {
	o, _ := newTest(t, Options{})
	o.Write(context.Background(), fullBatch(devices(2), t0.UnixNano()))
	o.Write(context.Background(), &record.Batch{Events: []record.Event{{Kind: record.EventXID, StartNS: t0.UnixNano(), Attrs: []record.Attr{{Key: "xid", Value: "13"}}}}})
	fams := scrape(t, o)
	for _, q := range dcgmDashboardQueries {
		t.Run(q.panel+"/"+q.metric, func(t *testing.T) {
			if q.later != "" && !catalogHasDCGM(q.metric) {
				t.Skipf("EXPECTED LATER: %s", q.later)
			}
			f := fams[q.metric]
			if f == nil || len(f.Metric) != 2 {
				t.Fatalf("%s: want one series per GPU (2), got %v", q.metric, f)
			}
			for _, m := range f.Metric {
				ls := labelsOf(m)
				for _, l := range q.labels {
					if ls[l] == "" {
						t.Errorf("%s has no %s label: %v", q.metric, l, ls)
					}
				}
				// DCGM's profiling activities are ratios 0–1 (GPM gives
				// percent); its PCIe/NVLink _BYTES are bytes per second.
				if strings.HasPrefix(q.metric, "DCGM_FI_PROF_") && !strings.HasSuffix(q.metric, "_BYTES") && (valueOf(m) < 0 || valueOf(m) > 1) {
					t.Errorf("%s = %v, want a ratio 0-1", q.metric, valueOf(m))
				}
			}
		})
	}
	for _, name := range dcgmDefaultCounters {
		if why, ok := notExposed[name]; ok {
			if fams[name] != nil {
				t.Errorf("%s is exposed now: drop it from notExposed", name)
			}
			t.Logf("not exposed: %s (%s)", name, why)
			continue
		}
		if fams[name] == nil {
			t.Errorf("dcgm-exporter default counter %s not exposed", name)
		}
	}
}

var metricRef = regexp.MustCompile(`\b(DCGM_FI_[A-Z0-9_]+|gpusampler_[a-z0-9_]+)\b`)

// TestDeployReferencesExist: every metric the alert rules and the Grafana
// dashboard in deploy/ use exists in a scrape (default naming).
func TestDeployReferencesExist(t *testing.T) {
	o, _ := newTest(t, Options{})
	o.Write(context.Background(), fullBatch(devices(1), t0.UnixNano()))
	fams := scrape(t, o)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct{ List []struct{ Definition string } }
	}
	raw, err := os.ReadFile(filepath.Join("deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	rules, err := os.ReadFile(filepath.Join("deploy", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(rules), "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok {
			exprs = append(exprs, e)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	for _, e := range exprs {
		for _, name := range metricRef.FindAllString(e, -1) {
			if fams[name] == nil {
				t.Errorf("%q uses %s, which a scrape lacks", e, name)
			}
		}
	}
}

// promtool returns the promtool binary: a failure when it is missing,
// unless -short (then the test skips). Debian's prometheus package has it.
func promtool(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: promtool checks skipped")
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (apt-get install prometheus): %v", err)
	}
	return p
}

// TestPromtoolIntegration: the rules pass promtool check rules and their
// unit tests, and a scrape passes promtool check metrics — cleanly under
// the prometheus naming; under dcgm naming only with the findings that
// dcgm-exporter's own names and labels cause.
func TestPromtoolIntegration(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = "deploy"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	inherent := []*regexp.Regexp{
		regexp.MustCompile(`^DCGM_FI_\w+ counter metrics should have "_total" suffix$`),
		regexp.MustCompile(`^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'$`),
		regexp.MustCompile(`^\w+ label names should be written in 'snake_case' not 'camelCase'$`), // modelName
	}
	for _, naming := range Namings {
		t.Run(naming, func(t *testing.T) {
			o, _ := newTest(t, Options{Naming: naming, GlobalTags: map[string]string{"cluster": "a"}})
			o.Write(context.Background(), fullBatch(devices(2), t0.UnixNano()))
			o.Write(context.Background(), &record.Batch{Events: []record.Event{{Kind: record.EventSelf, Device: -1,
				Attrs: []record.Attr{{Key: "scope", Value: "output"}, {Key: "output", Value: "p"}}, Fields: []record.Field{{Key: "dropped", Value: 1}}}}})
			cmd := exec.Command(bin, "check", "metrics")
			cmd.Stdin = strings.NewReader(get(t, o, "/metrics", 200))
			out, err := cmd.CombinedOutput()
			if naming == NamingPrometheus {
				if err != nil {
					t.Errorf("promtool check metrics: %v\n%s", err, out)
				}
				return
			}
		lines:
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				for _, re := range inherent {
					if re.MatchString(line) {
						continue lines
					}
				}
				if line != "" {
					t.Errorf("promtool check metrics: %s", line)
				}
			}
		})
	}
}
