package bench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// f formats a Num with prec decimals, or "—" when unknown.
func f(n Num, prec int) string {
	if !n.Known() {
		return "—"
	}
	return strconv.FormatFloat(float64(n), 'f', prec, 64)
}

// pm formats "mean ± sd".
func pm(s Stat, prec int, unit string) string {
	if !s.Mean.Known() {
		return "—"
	}
	return f(s.Mean, prec) + " ± " + f(s.SD, prec) + unit
}

// WriteTable writes the terminal report: per command the summary across
// runs, per-run and per-GPU detail, steps, diagnoses, the comparison, and
// warnings.
func WriteTable(w io.Writer, r *Result) error {
	bw := &errWriter{w: w}
	if r.Simulated {
		fmt.Fprintf(bw, "SIMULATED GPUs (profile %s): numbers describe the simulator, not hardware\n", r.Profile)
	}
	if r.Partial {
		fmt.Fprintln(bw, "PARTIAL: interrupted; the numbers below cover the completed runs only")
	}
	for _, d := range r.Devices {
		fmt.Fprintf(bw, "GPU %d  %s  %s  driver %s\n", d.Index, d.Name, d.UUID, d.DriverVersion)
	}
	if len(r.Baseline.Devices) > 0 {
		fmt.Fprintf(bw, "idle baseline (%s s):", f(r.Baseline.DurationS, 1))
		for _, b := range r.Baseline.Devices {
			fmt.Fprintf(bw, "  GPU %d %s W, %s%% util", b.Index, f(b.PowerW, 1), f(b.UtilPct, 0))
		}
		fmt.Fprintln(bw)
	}
	for i := range r.Benchmarks {
		b := &r.Benchmarks[i]
		s := &b.Summary
		how := ""
		if b.Shell {
			how = "  (started through sh -c)"
		}
		fmt.Fprintf(bw, "\nBenchmark %s: %s%s\n", b.Name, commandString(b), how)
		tw := tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  \tmean ± sd\tmin\tmax\n")
		row := func(name string, st Stat, prec int, unit string) {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", name, pm(st, prec, unit), f(st.Min, prec), f(st.Max, prec))
		}
		row("wall time [s]", s.WallS, 3, "")
		row("energy [J]", s.EnergyJ, 1, "")
		row("energy above idle [J]", s.EnergyAboveIdleJ, 1, "")
		row("mean power [W]", s.PowerMeanW, 1, "")
		row("utilization [%]", s.UtilMeanPct, 1, "")
		tw.Flush()
		fmt.Fprintf(bw, "  %d runs", s.WallS.N)
		if s.WallS.CI95.Known() {
			fmt.Fprintf(bw, ", wall time %s ± %s s (95%% CI)", f(s.WallS.Mean, 3), f(s.WallS.CI95, 3))
		}
		if len(s.Outliers) > 0 {
			fmt.Fprintf(bw, "; outliers (beyond 1.5 IQR):")
			sep := ""
			for _, run := range b.Runs {
				if !run.Outlier {
					continue
				}
				fmt.Fprint(bw, sep)
				sep = ","
				fmt.Fprintf(bw, " run %d", run.Index)
				if run.OutlierReason != "" {
					fmt.Fprintf(bw, " (%s)", run.OutlierReason)
				}
			}
		}
		if s.Failed > 0 {
			fmt.Fprintf(bw, "; %d run(s) with a non-zero exit status", s.Failed)
		}
		fmt.Fprintln(bw)
		tw = tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  run\tgpu\twall s\tenergy J\tsrc\tabove idle J\tpower W mean/peak\tutil %% mean p5/p50/p95\tSM MHz p5/p50/p95\tmem peak MiB\ttemp peak °C gpu/mem\tthrottled\n")
		for _, run := range b.Runs {
			for j, d := range run.Devices {
				label := strconv.Itoa(run.Index)
				if run.Outlier {
					label += "*"
				}
				if run.ExitCode != 0 {
					label += fmt.Sprintf("(exit %d)", run.ExitCode)
				}
				wall := f(run.WallS, 3)
				if j > 0 {
					label, wall = "", ""
				}
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s/%s\t%s %s/%s/%s\t%s/%s/%s\t%s\t%s/%s\t%s\n", label, d.Index, wall,
					f(d.Energy.J, 1), srcShort(d.Energy), f(d.EnergyAboveIdleJ, 1), f(d.PowerMeanW, 0), f(d.PowerPeakW, 0),
					f(d.Util.Mean, 0), f(d.Util.P5, 0), f(d.Util.P50, 0), f(d.Util.P95, 0),
					f(d.SMClock.P5, 0), f(d.SMClock.P50, 0), f(d.SMClock.P95, 0), f(d.MemoryPeakMiB, 0),
					f(d.TempPeakC, 0), f(d.MemTempPeakC, 0), throttleString(d.ThrottleMS))
			}
		}
		tw.Flush()
		for _, run := range b.Runs {
			if len(run.Steps) == 0 {
				continue
			}
			fmt.Fprintf(bw, "  steps of run %d:\n", run.Index)
			tw = tabwriter.NewWriter(bw, 2, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "    step\twall s\tenergy J\tpower W\tutil %%\n")
			for _, st := range run.Steps {
				fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\n", st.Name, f(st.WallS, 3), f(st.EnergyJ, 1), f(st.PowerMeanW, 0), f(st.UtilMeanPct, 0))
			}
			tw.Flush()
		}
		fmt.Fprintf(bw, "  diagnoses: ")
		if len(b.Diagnoses) == 0 {
			fmt.Fprintln(bw, "none found")
		} else {
			fmt.Fprintln(bw)
			for _, d := range b.Diagnoses {
				fmt.Fprintf(bw, "    %s on GPU %d (runs %v): %s [%s]\n", d.Kind, d.Device, d.Runs, d.Message, evidenceString(d.Evidence))
			}
		}
		for _, run := range b.Runs {
			for _, wr := range run.Warnings {
				fmt.Fprintf(bw, "  warning (run %d): %s\n", run.Index, wr)
			}
		}
	}
	if r.Comparison != nil {
		fmt.Fprintf(bw, "\n%s\n", r.Comparison.Summary)
		WriteComparisonDiagnoses(bw, r.Comparison)
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintln(bw)
		for _, wr := range r.Warnings {
			fmt.Fprintf(bw, "warning: %s\n", wr)
		}
	}
	return bw.err
}

// WriteComparisonDiagnoses writes a comparison's findings, one per line.
func WriteComparisonDiagnoses(w io.Writer, c *Comparison) {
	for _, d := range c.Diagnoses {
		fmt.Fprintf(w, "  %s on GPU %d (runs %v of %s): %s [%s]\n", d.Kind, d.Device, d.Runs, d.Evidence["slower"], d.Message, evidenceString(d.Evidence))
	}
}

func commandString(b *Benchmark) string {
	if b.Shell && len(b.Command) == 1 {
		return b.Command[0]
	}
	return strings.Join(b.Command, " ")
}

func srcShort(e Energy) string {
	switch e.Source {
	case "counter":
		return "ctr"
	case "integrated_power":
		return "int"
	}
	return "—"
}

func throttleString(m map[string]Num) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if v := m[k]; v.Known() && v > 0 && !strings.HasPrefix(k, "violation_low_util") {
			parts = append(parts, fmt.Sprintf("%s %.0fms", k, float64(v)))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func evidenceString(ev map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(ev) {
		parts = append(parts, k+"="+ev[k])
	}
	return strings.Join(parts, " ")
}

// WriteMarkdown writes the summary as Markdown tables.
func WriteMarkdown(w io.Writer, r *Result) error {
	bw := &errWriter{w: w}
	fmt.Fprintf(bw, "# gpusampler bench\n\n")
	if r.Simulated {
		fmt.Fprintf(bw, "> **Simulated GPUs** (profile `%s`): numbers describe the simulator, not hardware.\n\n", r.Profile)
	}
	if r.Partial {
		fmt.Fprintf(bw, "> **Partial**: interrupted; the numbers cover the completed runs only.\n\n")
	}
	fmt.Fprintf(bw, "| GPU | name | UUID | driver |\n|---|---|---|---|\n")
	for _, d := range r.Devices {
		fmt.Fprintf(bw, "| %d | %s | %s | %s |\n", d.Index, d.Name, d.UUID, d.DriverVersion)
	}
	fmt.Fprintf(bw, "\n| command | runs | wall time [s] | min | max | energy [J] | above idle [J] | power [W] | util [%%] | diagnoses |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range r.Benchmarks {
		b := &r.Benchmarks[i]
		s := &b.Summary
		var kinds []string
		for _, d := range b.Diagnoses {
			if !slices.Contains(kinds, d.Kind) {
				kinds = append(kinds, d.Kind)
			}
		}
		diag := "none found"
		if len(kinds) > 0 {
			diag = strings.Join(kinds, ", ")
		}
		fmt.Fprintf(bw, "| %s: `%s` | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", b.Name, commandString(b), s.WallS.N,
			pm(s.WallS, 3, ""), f(s.WallS.Min, 3), f(s.WallS.Max, 3), pm(s.EnergyJ, 1, ""), pm(s.EnergyAboveIdleJ, 1, ""),
			pm(s.PowerMeanW, 1, ""), pm(s.UtilMeanPct, 1, ""), diag)
	}
	if r.Comparison != nil {
		fmt.Fprintf(bw, "\n**%s**\n", r.Comparison.Summary)
		if len(r.Comparison.Diagnoses) > 0 {
			fmt.Fprintln(bw)
			for _, d := range r.Comparison.Diagnoses {
				fmt.Fprintf(bw, "- **%s** on GPU %d (runs %v of %s): %s\n", d.Kind, d.Device, d.Runs, d.Evidence["slower"], d.Message)
			}
		}
	}
	for i := range r.Benchmarks {
		b := &r.Benchmarks[i]
		if len(b.Diagnoses) == 0 {
			continue
		}
		fmt.Fprintf(bw, "\n## Diagnoses of %s\n\n", b.Name)
		for _, d := range b.Diagnoses {
			fmt.Fprintf(bw, "- **%s** on GPU %d (runs %v): %s — %s\n", d.Kind, d.Device, d.Runs, d.Message, evidenceString(d.Evidence))
		}
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintf(bw, "\n## Warnings\n\n")
		for _, wr := range r.Warnings {
			fmt.Fprintf(bw, "- %s\n", wr)
		}
	}
	return bw.err
}

// ErrNoSamples is returned by the exports that need the raw samples when
// the result was read back from JSON (which does not hold them).
var ErrNoSamples = errors.New("bench: the result holds no raw samples (only a live benchmark has them)")

// WriteCSV writes the raw samples: one row per sample with its time (Unix
// ns and seconds since the first run), GPU, metric, unit, value, whether
// it was a point read, and which run (command and index) it falls in.
func WriteCSV(w io.Writer, r *Result) error {
	if r.raw == nil {
		return ErrNoSamples
	}
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"time_ns", "t_s", "gpu", "metric", "unit", "value", "point_read", "command", "run"})
	t0 := r.t0()
	type win struct {
		name     string
		run      int
		from, to int64
	}
	var wins []win
	for _, b := range r.Benchmarks {
		for _, run := range b.Runs {
			wins = append(wins, win{b.Name, run.Index, run.StartNS, run.EndNS})
		}
	}
	cat := r.metricCatalog()
	for _, d := range r.Devices {
		for _, s := range r.raw[d.Index] {
			m, ok := cat.Get(s.Metric)
			if !ok {
				continue
			}
			cmd, run := "", ""
			for _, wn := range wins {
				if s.TimeNS >= wn.from && s.TimeNS <= wn.to {
					cmd, run = wn.name, strconv.Itoa(wn.run)
					break
				}
			}
			point := "0"
			if s.Flags&record.FlagPointRead != 0 {
				point = "1"
			}
			_ = cw.Write([]string{strconv.FormatInt(s.TimeNS, 10), strconv.FormatFloat(float64(s.TimeNS-t0)/1e9, 'f', 4, 64),
				strconv.Itoa(d.Index), m.Name, m.Unit, strconv.FormatFloat(s.Value, 'g', -1, 64), point, cmd, run})
		}
	}
	cw.Flush()
	return cw.Error()
}

// t0 is the first run's start (the time axis origin of the exports).
func (r *Result) t0() int64 {
	t := int64(math.MaxInt64)
	for _, b := range r.Benchmarks {
		for _, run := range b.Runs {
			t = min(t, run.StartNS)
		}
	}
	if t == math.MaxInt64 {
		return time.Now().UnixNano()
	}
	return t
}

// errWriter remembers the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	_, e.err = e.w.Write(p)
	return len(p), nil
}
