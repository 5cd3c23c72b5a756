package doctor

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText renders r for a terminal: a header, one section per device and
// the recommendations.
func WriteText(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	backend := r.Backend
	if r.Simulated {
		backend += " (SIMULATED: these are not real GPUs; versions, depths and latencies describe the simulator)"
	}
	p("backend:\t%s\n", backend)
	p("driver:\t%s\n", orUnknown(r.Driver))
	p("nvml:\t%s\n", orUnknown(r.NVML))
	for _, n := range r.Notices {
		p("notice:\t%s\n", n)
	}
	p("devices:\t%d\n", len(r.Devices))
	for _, d := range r.Devices {
		p("\ngpu %d:\t%s %s %s\n", d.Device.Index, d.Device.Name, d.Device.UUID, d.Device.PCIBusID)
		if d.Err != "" {
			p("  error:\t%s\n", d.Err)
			continue
		}
		perm := "ok"
		if d.NoPermission > 0 {
			perm = fmt.Sprintf("%d metrics refused (NO_PERMISSION): run as root or grant access to /dev/nvidia*", d.NoPermission)
		}
		p("  permissions:\t%s\n", perm)
		p("  metric groups:\n")
		for _, g := range d.Groups {
			line := fmt.Sprintf("%d/%d", g.Supported, g.Total)
			if len(g.PointReads) > 0 {
				line += "  point reads (no sample buffer): " + strings.Join(g.PointReads, ", ")
			}
			if len(g.Unsupported) > 0 {
				line += "  not supported by the device: " + strings.Join(g.Unsupported, ", ")
			}
			if len(g.OldDriver) > 0 {
				line += "  absent from this driver: " + strings.Join(g.OldDriver, ", ") + " (" + g.OldDriverWhy + ")"
			}
			if len(g.NoPermission) > 0 {
				line += "  no permission: " + strings.Join(g.NoPermission, ", ")
			}
			if len(g.Failed) > 0 {
				line += "  failed: " + strings.Join(g.Failed, "; ")
			}
			p("    %s\t%s\n", g.Group, line)
		}
		p("  sample buffers:\n")
		for _, b := range d.Buffers {
			var s string
			switch {
			case !b.Supported && b.PointReads != "" && isMedia(b.Type):
				s = "not supported: " + b.PointReads + " comes from point reads at the rare interval"
			case !b.Supported && b.PointReads != "":
				s = "not supported: " + b.PointReads + " comes from point reads at the field interval"
			case !b.Supported:
				s = "not supported"
			case b.Err != "":
				s = "error: " + b.Err
			case b.Empty:
				s = "empty (idle engine: depth and period unknown)"
			default:
				s = fmt.Sprintf("depth %d, period %v, span %v, clock %s", b.Depth, b.Period, b.Span, b.Clock)
				if b.Duplicates > 0 {
					s += fmt.Sprintf(", %d duplicate timestamps", b.Duplicates)
				}
			}
			p("    %s\t%s\n", b.Type, s)
		}
		p("  timestamp clock:\t%s\n", d.Clock)
		l := d.Latency
		if l.Calls == 0 {
			p("  call latency:\t%s: no successful calls\n", l.Op)
		} else {
			p("  call latency:\t%s × %d: p50 %v, p99 %v, max %v\n", l.Op, l.Calls, l.P50, l.P99, l.Max)
		}
	}
	p("\nrecommended:\n")
	rc := r.Recommend
	p("  drain interval\t%v\n", rc.DrainInterval)
	p("  secondary drain interval\t%v\n", rc.SecondaryDrainInterval)
	p("  field interval\t%v\n", rc.FieldInterval)
	p("  slow interval\t%v\n", rc.SlowInterval)
	p("  rare interval\t%v\n", rc.RareInterval)
	if rc.GPMInterval > 0 {
		p("  gpm interval\t%v\n", rc.GPMInterval)
	}
	for _, why := range rc.Why {
		p("  - %s\n", why)
	}
	return tw.Flush()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
