package prometheus

import (
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpusampler/gpusampler/record"
)

// jobSeries maps the fields of a per-job account (record.EventJob) to the
// series /metrics exposes, with the owner's labels (owner, pod, namespace,
// container, hpc_job) beside the device's gpu and UUID labels.
var jobSeries = []struct {
	field, name, help string
	vt                prometheus.ValueType
}{
	{record.JobFieldEnergy, "gpusampler_job_energy_joules_total", "Energy the owner used on the GPU, integrated from every power-buffer sample (trapezoid between driver timestamps; nothing across a gap).", prometheus.CounterValue},
	{record.JobFieldEnergyCounter, "gpusampler_job_energy_counter_joules_total", "The owner's share of the GPU's energy-counter deltas (split in proportion to the integrated energy between readings).", prometheus.CounterValue},
	{record.JobFieldEnergyDiff, "gpusampler_job_energy_diff_joules", "energy_counter minus energy: how far the counter and the integrated samples disagree.", prometheus.GaugeValue},
	{record.JobFieldBusy, "gpusampler_job_busy_seconds_total", "Seconds in which the owner's part of the GPU utilization was at least 1% (a kernel ran).", prometheus.CounterValue},
	{record.JobFieldIdleAllocated, "gpusampler_job_idle_allocated_seconds_total", "Seconds the GPU was allocated to the owner and the owner ran no kernel.", prometheus.CounterValue},
	{record.JobFieldAllocated, "gpusampler_job_allocated_seconds_total", "Seconds the owner held the GPU (along the power samples, gaps included).", prometheus.CounterValue},
	{record.JobFieldPointRead, "gpusampler_job_point_read_seconds_total", "Seconds of the owner's time whose utilization came from point reads, not the driver's samples.", prometheus.CounterValue},
	{record.JobFieldLost, "gpusampler_job_lost_seconds_total", "Seconds of the owner's time without power samples (a lost GPU, lost buffer samples).", prometheus.CounterValue},
	{record.JobFieldExactness, "gpusampler_job_exactness_ratio", "1 - (point-read + lost seconds) / allocated seconds.", prometheus.GaugeValue},
	{record.JobFieldMemoryPeak, "gpusampler_job_memory_peak_mib", "Peak GPU memory the owner used (MiB).", prometheus.GaugeValue},
	{record.JobFieldSamples, "gpusampler_job_power_samples_total", "Power samples integrated into the owner's energy.", prometheus.CounterValue},
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
			ent.descs = append(ent.descs, prometheus.NewDesc(s.name, s.help, names, nil))
		}
	}
	if ent.arrive != 0 && now > ent.arrive {
		ent.period = now - ent.arrive
	}
	ent.arrive, ent.ended, ent.pairs = now, e.Kind == record.EventJobEnd, labelPairs(names, values)
	ent.values = ent.values[:0]
	for _, s := range jobSeries {
		ent.values = append(ent.values, record.FieldValue(e.Fields, s.field))
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
			emit(ch, ent.descs[i], s.vt, ent.values[i], ent.pairs)
		}
	}
}
