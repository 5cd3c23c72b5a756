package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpusampler/gpusampler/sampler"
)

func cmdMetrics(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("metrics", stderr)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	return printCatalog(stdout, sampler.DefaultCatalog)
}

func naming(n sampler.Naming) string {
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

// printCatalog prints one row per metric: our name, unit, group, kind,
// source, and the Telegraf and DCGM names with their type, unit and scale.
func printCatalog(w io.Writer, c *sampler.Catalog) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tUNIT\tGROUP\tKIND\tSOURCE\tTELEGRAF nvidia_smi\tDCGM")
	for _, m := range c.All() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Unit, m.Group, m.Kind, m.Src, naming(m.Telegraf), naming(m.DCGM))
	}
	return tw.Flush()
}
