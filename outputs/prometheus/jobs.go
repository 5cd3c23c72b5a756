package prometheus

import (
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpusampler/gpusampler/record"
)

// jobSeries are the series /metrics exposes for the fields of a per-job
// account (record.EventJob), with the owner's labels (owner, pod,
// namespace, container, hpc_job) beside the device's gpu and UUID labels.
var jobSeries = record.JobFields()

// jobValueType is a job field's series type.
func jobValueType(f record.JobFieldInfo) prometheus.ValueType {
	if f.Total {
		return prometheus.CounterValue
	}
	return prometheus.GaugeValue
}

// jobEndedRetention is how long an ended job's series stay after its
// job-end record (so that a scrape sees the final totals), on the
// output's clock.
const jobEndedRetention = 5 * time.Minute

// jobEntry is the newest record of one owner's account on one device.
type jobEntry struct {
	pairs  []*dto.LabelPair
	values []float64 // by jobSeries index
	descs  []*prometheus.Desc
	// arrive and period on the output's clock; an entry not refreshed
	// within 3 periods (a lost GPU, a stopped agent) disappears, an ended
	// one jobEndedRetention after its end.
	arrive, period int64
	ended          bool
}

// jobEvent stores a per-job account.
func (o *Output) jobEvent(e *record.Event, now int64) {
	uuid := ""
	if d := o.device(e.Device); d != nil {
		uuid = d.id.UUID
	}
	uuidLabel := "UUID"
	if o.opts.Naming == NamingPrometheus {
		uuidLabel = "uuid"
	}
	names := []string{"gpu", uuidLabel, o.opts.HostLabel}
	values := []string{strconv.Itoa(e.Device), uuid, o.opts.Host}
	for i, n := range o.baseLabels[len(deviceLabels(o.opts.Naming, o.opts.HostLabel)):] {
		names, values = append(names, n), append(values, o.tagValues[i])
	}
	owner := map[string]string{}
	for _, a := range e.Attrs {
		if a.Key == record.AttrOwner || record.IsAttributionKey(a.Key) {
			owner[a.Key] = a.Value
		}
	}
	keys := record.AttributionKeys()
	for _, k := range append([]string{record.AttrOwner}, keys[:]...) {
		if !slices.Contains(names, k) { // a global tag of that name wins
			names, values = append(names, k), append(values, owner[k])
		}
	}
	key := strconv.Itoa(e.Device) + "\xff" + owner[record.AttrOwner]
	ent := o.jobs[key]
	if ent == nil {
		ent = &jobEntry{}
		o.jobs[key] = ent
		for _, s := range jobSeries {
			ent.descs = append(ent.descs, prometheus.NewDesc(s.Prometheus, s.Help, names, nil))
		}
	}
	if ent.arrive != 0 && now > ent.arrive {
		ent.period = now - ent.arrive
	}
	ent.arrive, ent.ended, ent.pairs = now, e.Kind == record.EventJobEnd, labelPairs(names, values)
	ent.values = ent.values[:0]
	for _, s := range jobSeries {
		ent.values = append(ent.values, record.FieldValue(e.Fields, s.Key))
	}
}

// expired reports whether the entry's series should go.
func (e *jobEntry) expired(now int64) bool {
	if e.ended {
		return now-e.arrive > int64(jobEndedRetention)
	}
	period := e.period
	if period <= 0 {
		period = defaultSelfPeriod
	}
	return now-e.arrive > 3*period
}

// collectJobs sends the per-job series.
func (o *Output) collectJobs(ch chan<- prometheus.Metric, now int64) {
	for _, ent := range o.jobs {
		if ent.expired(now) {
			continue // deleted by the next Write
		}
		for i, s := range jobSeries {
			emit(ch, ent.descs[i], jobValueType(s), ent.values[i], ent.pairs)
		}
	}
}
