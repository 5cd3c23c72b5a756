package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/doctor"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

func cmdMetrics(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("metrics", stderr)
	var bf backendFlags
	bf.register(fs)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	probe := false
	fs.Visit(func(f *flag.Flag) { probe = probe || f.Name == "backend" })
	if !probe {
		return printCatalog(stdout, catalog.Default())
	}
	if err := bf.validate(); err != nil {
		return err
	}
	log := slog.New(slog.DiscardHandler)
	src, err := bf.open(stderr, log)
	if err != nil {
		return err
	}
	defer src.Close()
	return printSupport(stdout, src, catalog.Default())
}

// probeMetric asks a device for one metric once (doctor.ProbeSupport) and
// says "yes", "point reads" (no sample buffer: point reads at the field
// interval instead), "no (driver too old)" (absent from the installed
// driver), "no" (not supported by the device) or the error.
func probeMetric(d sampler.DeviceSource, m *catalog.Metric) string {
	switch point, err := doctor.ProbeSupport(d, m); {
	case err == nil && point:
		return "point reads"
	case err == nil:
		return "yes"
	case errors.Is(err, sampler.ErrOldDriver):
		return "no (driver too old)"
	case errors.Is(err, sampler.ErrNotSupported):
		return "no"
	default:
		return "error: " + err.Error()
	}
}

// printSupport prints, per metric, whether each device of src supports it
// (each metric probed once per device).
func printSupport(w io.Writer, src sampler.Source, c *catalog.Catalog) error {
	devs, err := src.Devices()
	if err != nil {
		return fmt.Errorf("open %s devices: %w", src.Name(), err)
	}
	// A GPU that does not answer (lost) is named and left out of the table.
	var ids []record.Device
	var silent []string
	answering := devs[:0:0]
	for i, d := range devs {
		id, err := d.Identity()
		if err != nil {
			silent = append(silent, fmt.Sprintf("gpu %d: does not answer: %v\n", i, err))
			continue
		}
		ids = append(ids, id)
		answering = append(answering, d)
	}
	if len(ids) == 0 && len(silent) > 0 {
		return fmt.Errorf("open %s devices: none answers: %s", src.Name(), strings.TrimSpace(strings.Join(silent, "; ")))
	}
	devs = answering
	for _, line := range silent {
		fmt.Fprint(w, line)
	}
	for _, id := range ids {
		sim := ""
		if id.Simulated {
			sim = " SIMULATED"
		}
		fmt.Fprintf(w, "gpu %d: %s %s%s\n", id.Index, id.Name, id.UUID, sim)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "METRIC\tGROUP\tSOURCE")
	for _, id := range ids {
		fmt.Fprintf(tw, "\tGPU %d", id.Index)
	}
	fmt.Fprintln(tw)
	for _, m := range c.All() {
		fmt.Fprintf(tw, "%s\t%s\t%s", m.Name, m.Group, m.Src)
		for _, d := range devs {
			fmt.Fprintf(tw, "\t%s", probeMetric(d, &m))
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "%s\t%s\t%s", "processes", "process", "per-process")
	for _, d := range devs {
		fmt.Fprintf(tw, "\t%s", probeProcesses(d))
	}
	fmt.Fprintln(tw)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, id := range ids {
		if id.MIG {
			fmt.Fprintf(w, "gpu %d (MIG instance %s of gpu %d): utilization buffers and per-process utilization are not available under MIG\n",
				id.Index, id.MIGProfile, id.Parent)
		}
	}
	return nil
}

// probeProcesses asks a device for its processes once: "yes", "no" (not a
// ProcessSource, or ErrNotSupported) or the error.
func probeProcesses(d sampler.DeviceSource) string {
	ps, ok := d.(sampler.ProcessSource)
	if !ok {
		return "no"
	}
	_, err := ps.Processes(sampler.ProcessQuery{}, nil)
	switch {
	case err == nil:
		return "yes"
	case errors.Is(err, sampler.ErrOldDriver):
		return "no (driver too old)"
	case errors.Is(err, sampler.ErrNotSupported):
		return "no"
	}
	return "error: " + err.Error()
}

// telegrafNaming is the TELEGRAF column: the numeric naming, or for a
// two-state metric Telegraf writes as text its field(s) and strings
// ("remapped_rows_pending (string, No/Yes)"), which the nvidia_smi drop-in
// writes.
func telegrafNaming(m *catalog.Metric) string {
	t := m.TelegrafText
	if t.Name == "" {
		return naming(m.Telegraf)
	}
	name := t.Name
	if t.Also != "" {
		name += "+" + t.Also
	}
	return name + " (string, " + t.Values[0] + "/" + t.Values[1] + ")"
}

func naming(n catalog.Naming) string {
	if n.Name == "" {
		return "-"
	}
	s := n.Name + " (" + n.Type.String()
	if n.Unit != "" {
		s += ", " + n.Unit
	}
	if n.Scale != 1 {
		s += fmt.Sprintf(", ×%g", n.Scale)
	}
	return s + ")"
}

// otelNaming is the OPENTELEMETRY column: the name, its fixed attributes
// in braces, the instrument, type, unit and scale
// ("hw.gpu.utilization{hw.gpu.task=general} (gauge, float, 1, ×0.01)").
func otelNaming(n catalog.OTelNaming) string {
	name := n.Name
	if len(n.Attrs) > 0 {
		kv := make([]string, len(n.Attrs))
		for i, a := range n.Attrs {
			kv[i] = a[0] + "=" + a[1]
		}
		name += "{" + strings.Join(kv, ",") + "}"
	}
	s := naming(n.Naming)
	return name + " (" + n.Instrument.String() + ", " + strings.TrimPrefix(s, n.Name+" (")
}

// printCatalog prints one row per metric: our name, unit, group, kind,
// source, and with their type, unit and scale: the field Telegraf's
// nvidia_smi input emits ("-" where it has none; its string for two-state
// metrics it writes as text), the field our line
// protocol writes (Telegraf's where it has one), dcgm-exporter's name and
// the OpenTelemetry output's.
func printCatalog(w io.Writer, c *catalog.Catalog) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// ID is the metric's number on the wire (records.proto's MetricId).
	fmt.Fprintln(tw, "ID\tMETRIC\tUNIT\tGROUP\tKIND\tSOURCE\tTELEGRAF nvidia_smi\tLINE PROTOCOL\tDCGM\tOPENTELEMETRY")
	for _, m := range c.All() {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Name, m.Unit, m.Group, m.Kind, m.Src, telegrafNaming(&m),
			naming(m.Influx()), naming(m.DCGM), otelNaming(m.OTel()))
	}
	return tw.Flush()
}
