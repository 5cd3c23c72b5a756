package opentelemetry

import (
	"slices"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// jobMetrics are the OTLP metrics of a per-job account's running totals
// (record.EventJob): cumulative Sums from the account's start, gauges for
// what is not a running total. The owner's attribution is the resource's
// (like a process's), the account's owner name the attribute
// gpusampler.job.owner. A job_end record goes out as an event point
// (EventMetric) carrying the final totals.
var jobMetrics = record.JobFields()

// jobInstrument is a job field's instrument.
func jobInstrument(f record.JobFieldInfo) catalog.Instrument {
	if f.Total {
		return catalog.OTelCounter
	}
	return catalog.OTelGauge
}

// jobEvent adds an EventJob's totals.
func (e *encoder) jobEvent(ev *record.Event, res func(record.Attribution) *resBuild) {
	dev := e.device(ev.Device)
	owner, _ := record.ProcessAttribution(*ev) // the attribution keys of its Attrs
	attrs := slices.Clone(dev.attrs)
	start := ev.StartNS
	for _, a := range ev.Attrs {
		switch a.Key {
		case record.AttrOwner:
			attrs = append(attrs, kvString("gpusampler.job.owner", a.Value))
		case record.AttrJobStarted:
			if t, err := time.Parse(time.RFC3339Nano, a.Value); err == nil {
				start = t.UnixNano()
			}
		}
	}
	r := res(owner)
	for _, jm := range jobMetrics {
		p := &metricspb.NumberDataPoint{Attributes: attrs, TimeUnixNano: uint64(ev.StartNS)}
		in := jobInstrument(jm)
		if in == catalog.OTelCounter {
			p.StartTimeUnixNano = uint64(start)
		}
		number(p, catalog.Float, record.FieldValue(ev.Fields, jm.Key))
		addNumber(r.metric(jm.OTel, jm.OTelUnit, in, numberShape), p)
		e.points++
	}
}
