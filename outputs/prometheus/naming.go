package prometheus

import (
	"fmt"
	"strings"

	"github.com/gpusampler/gpusampler/catalog"
)

// Naming schemes.
const (
	// NamingDCGM spells metrics as dcgm-exporter does (DCGM_FI_*), with its
	// units and semantics, where the catalog has a DCGM name; the other
	// metrics keep their Prometheus-style gpusampler_* names.
	NamingDCGM = "dcgm"
	// NamingPrometheus spells every metric the Prometheus way, with base
	// units in the name (gpusampler_power_watts, ..._joules_total).
	NamingPrometheus = "prometheus"
)

// Namings lists the naming schemes.
var Namings = []string{NamingDCGM, NamingPrometheus}

// Host label spellings: dcgm-exporter releases before 4.6.0-4.8.3 write
// "Hostname" (and the official Grafana dashboard 12239 queries it); from
// 4.6.0-4.8.3 on they write "hostname".
const (
	HostLabelLegacy = "Hostname"
	HostLabelNew    = "hostname"
)

// HostLabels lists the host label spellings.
var HostLabels = []string{HostLabelLegacy, HostLabelNew}

// promUnit is how a catalog base unit appears in a Prometheus-style name,
// and the factor from the base unit to it.
type promUnit struct {
	suffix string
	scale  float64
}

// promUnits maps the catalog's base units to Prometheus base units
// (https://prometheus.io/docs/practices/naming/#base-units). Units absent
// here (bit masks, states, counts) get no suffix.
var promUnits = map[string]promUnit{
	"W":   {"watts", 1},
	"mJ":  {"joules", 1e-3},
	"%":   {"ratio", 0.01},
	"MHz": {"hertz", 1e6},
	"MiB": {"bytes", 1 << 20},
	"°C":  {"celsius", 1},
	"ns":  {"seconds", 1e-9},
	"B":   {"bytes", 1},
	"B/s": {"bytes_per_second", 1},
}

// promBase renames catalog names whose Prometheus-style name reads better
// shorter. Names not listed keep the catalog's name.
var promBase = map[string]string{
	"power_draw":              "power",
	"power_draw_instant":      "power_instant",
	"module_power_draw":       "module_power",
	"energy_consumption":      "energy",
	"clocks_current_sm":       "clock_sm",
	"clocks_current_memory":   "clock_memory",
	"clocks_current_graphics": "clock_graphics",
	"clocks_current_video":    "clock_video",
	"pcie_replay_counter":     "pcie_replays",
	"pcie_tx_bytes":           "pcie_tx",
	"pcie_rx_bytes":           "pcie_rx",
	"nvlink_tx_bytes":         "nvlink_tx",
	"nvlink_rx_bytes":         "nvlink_rx",
}

// labelFamilies fold several catalog counters into one family with a label:
// throttle time per reason, perf-policy violation time per policy.
var labelFamilies = []struct{ prefix, family, label, help string }{
	{"throttle_", "throttle", "reason", "Time clocks were held down, per clock event reason (driver counter)."},
	{"violation_", "violation", "policy", "Time the performance policy limited clocks, per policy (driver counter)."},
}

// series is how one catalog metric is exposed: its family name, type, scale
// and, for gauges, the names of its window families.
type series struct {
	id     catalog.MetricID
	name   string
	help   string
	unit   string // the exposed unit, for help texts and tests
	scale  float64
	round  bool // the scheme types the value as an integer
	kind   catalog.Kind
	label  [2]string // optional constant label (name, value): throttle reason
	avg1s  bool      // expose the 1 s average of the samples (DCGM_FI_DEV_POWER_USAGE)
	window bool      // gauge: _min/_max/_mean over the window
	// winName is the Prometheus-style base of the window families
	// (winName+"_min" ...), the same in both schemes; winScale converts the
	// base unit to it.
	winName  string
	winScale float64
}

// PromName returns the Prometheus-style name of m, its scale from the base
// unit, the constant label it carries in its family (if any) and the help
// shared by the family.
func PromName(m *catalog.Metric) (name string, scale float64, label [2]string, help string) {
	base, help := m.Name, m.Help
	for _, f := range labelFamilies {
		if v, ok := strings.CutPrefix(m.Name, f.prefix); ok && m.Kind == catalog.Counter {
			base, label, help = f.family, [2]string{f.label, v}, f.help
			break
		}
	}
	if r, ok := promBase[base]; ok {
		base = r
	}
	u, ok := promUnits[m.Unit]
	if !ok {
		u = promUnit{"", 1}
	}
	name = "gpusampler_" + base
	if u.suffix != "" && !strings.HasSuffix(name, "_"+u.suffix) {
		name += "_" + u.suffix
	}
	if m.Kind == catalog.Counter {
		name += "_total"
	}
	return name, u.scale, label, help
}

// buildSeries returns how every catalog metric is exposed under naming.
func buildSeries(cat *catalog.Catalog, naming string) ([]series, error) {
	if naming != NamingDCGM && naming != NamingPrometheus {
		return nil, fmt.Errorf("prometheus: unknown naming scheme %q (want one of: %s)", naming, strings.Join(Namings, ", "))
	}
	all := cat.All()
	out := make([]series, 0, len(all))
	seen := map[string]catalog.MetricID{}
	for i := range all {
		m := &all[i]
		if m.ID == catalog.MetricXIDCount {
			// XIDs are exposed from the xid events themselves: the counter
			// gpusampler_xid_errors_total and DCGM's last-XID gauge.
			continue
		}
		pname, pscale, label, phelp := PromName(m)
		s := series{id: m.ID, name: pname, help: phelp, unit: m.Unit, scale: pscale, kind: m.Kind, label: label}
		if u, ok := promUnits[m.Unit]; ok {
			s.unit = u.suffix
		}
		if naming == NamingDCGM && m.DCGM.Name != "" {
			s.name, s.scale, s.round, s.unit, s.label = m.DCGM.Name, m.DCGM.Scale, m.DCGM.Type == catalog.Int, m.DCGM.Unit, [2]string{}
			s.help = fmt.Sprintf("%s (in %s).", strings.TrimSuffix(m.Help, "."), m.DCGM.Unit)
			s.avg1s = m.ID == catalog.MetricPowerDraw
			if s.avg1s {
				s.help = "Power draw, 1 s average of the driver's power samples (in W)."
			}
		}
		if m.Kind == catalog.Gauge {
			s.window = true
			s.winName, s.winScale = pname, pscale
		}
		// a family name may repeat only with distinct constant labels
		if prev, ok := seen[s.name]; ok && s.label[0] == "" {
			return nil, fmt.Errorf("prometheus: metrics %s and %s both map to %s", cat.Name(prev), m.Name, s.name)
		}
		seen[s.name] = m.ID
		out = append(out, s)
	}
	return out, nil
}
