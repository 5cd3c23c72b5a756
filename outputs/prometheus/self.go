package prometheus

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpusampler/gpusampler/record"
)

// selfEntry is the newest self-metrics event of one scope and identity (one
// output, one device): every field becomes a gauge
// gpusampler_self_<scope>_<field>.
type selfEntry struct {
	scope  string
	output string // the "output" attribute, if any
	values []string
	pairs  []*dto.LabelPair
	fields []record.Field
	descs  []*prometheus.Desc
	// arrive and period (between the last two events) on the output's
	// clock: an entry not refreshed within 3 periods disappears (a removed
	// output's counters do not freeze).
	arrive, period int64
}

// defaultSelfPeriod is assumed until a second event shows the real one.
const defaultSelfPeriod = int64(20e9)

// selfEvent stores a self-metrics event.
func (o *Output) selfEvent(e *record.Event, now int64) {
	scope, output := "agent", ""
	var names, values []string
	for _, a := range e.Attrs {
		if a.Key == "scope" {
			scope = a.Value
			continue
		}
		if a.Key == "output" {
			output = a.Value
		}
		n := sanitizeLabel(a.Key)
		if n == "uuid" && o.opts.Naming == NamingDCGM {
			n = "UUID" // as on the device series
		}
		names, values = append(names, n), append(values, a.Value)
	}
	names, values = append(names, o.opts.HostLabel), append(values, o.opts.Host)
	for i, n := range o.baseLabels[len(deviceLabels(o.opts.Naming, o.opts.HostLabel)):] {
		names, values = append(names, n), append(values, o.tagValues[i])
	}
	key := scope + "\xff" + strings.Join(values, "\xff")
	ent := o.self[key]
	if ent == nil {
		ent = &selfEntry{}
		o.self[key] = ent
	}
	if ent.arrive != 0 && now > ent.arrive {
		ent.period = now - ent.arrive
	}
	ent.arrive, ent.values, ent.pairs = now, values, labelPairs(names, values)
	ent.scope, ent.output = scope, output
	ent.fields = append(ent.fields[:0], e.Fields...)
	ent.descs = ent.descs[:0]
	prefix := "gpusampler_self_" + sanitizeLabel(scope) + "_"
	for _, f := range e.Fields {
		ent.descs = append(ent.descs, prometheus.NewDesc(prefix+sanitizeLabel(f.Key),
			"gpusampler's own "+f.Key+" ("+scope+" scope, self-metrics event).", names, nil))
	}
}

// collectSelf sends the self-metrics that are still being refreshed.
func (o *Output) collectSelf(ch chan<- prometheus.Metric, now int64) {
	for _, ent := range o.self {
		if ent.expired(now) {
			continue // deleted by the next Write (scrapes hold only the read lock)
		}
		for i, f := range ent.fields {
			emit(ch, ent.descs[i], prometheus.GaugeValue, f.Value, ent.pairs)
		}
	}
}

// expired reports whether the entry missed three of its periods.
func (e *selfEntry) expired(now int64) bool {
	period := e.period
	if period <= 0 {
		period = defaultSelfPeriod
	}
	return now-e.arrive > 3*period
}

// failingOutputs describes the outputs that the newest self-metrics report
// failing (scope "output_health", failing 1), in name order: "NAME (not
// started, N failed attempts)" or "NAME (failing)". Read lock held.
func (o *Output) failingOutputs(now int64) []string {
	var out []string
	for _, ent := range o.self {
		if ent.scope != "output_health" || ent.expired(now) {
			continue
		}
		if record.FieldValue(ent.fields, "failing") == 0 {
			continue
		}
		why := "failing (plugin crash storm)"
		if record.FieldValue(ent.fields, "buffer_degraded") != 0 {
			why = "disk buffer cannot write to disk; new batches held in memory (lost on a crash)"
		}
		if record.FieldValue(ent.fields, "started") == 0 {
			why = fmt.Sprintf("not started, %d failed attempts", int64(record.FieldValue(ent.fields, "start_failures")))
		}
		out = append(out, fmt.Sprintf("output %s: %s", ent.output, why))
	}
	slices.Sort(out)
	return out
}
