package record

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
)

// Flags qualify a Sample.
type Flags uint16

const (
	// FlagPointRead marks a value read with a point query ("current value")
	// instead of drained from a driver sample buffer, e.g. the utilization
	// read that keeps an idle GPU's series from gapping.
	FlagPointRead Flags = 1 << iota
)

// Sample is one value of one metric on one device at one instant.
//
// Sample is a plain value (32 bytes with padding, no pointers) so that rings,
// batches and encoders can copy it without allocating. Value is in the
// catalog's base unit for Metric (see Metric.Unit); naming schemes scale it.
type Sample struct {
	// TimeNS is the sample's own timestamp in Unix nanoseconds: the driver's
	// timestamp for buffered samples, the read time for point queries.
	TimeNS int64
	// Value in the metric's base unit.
	Value float64
	// Device is the device's Index (see Device).
	Device uint16
	// Metric identifies the catalog entry.
	Metric catalog.MetricID
	// Flags qualify the value.
	Flags Flags
}

// Time returns the sample's timestamp as a time.Time.
func (s Sample) Time() time.Time { return time.Unix(0, s.TimeNS) }

// Device is the identity of one GPU. It travels once per output and again
// whenever it changes (Generation increases).
type Device struct {
	// Index is the device's position as the backend enumerated it. Samples
	// refer to devices by Index.
	Index int `json:"index"`
	// UUID is the driver's stable identifier ("GPU-...").
	UUID string `json:"uuid"`
	// Name is the product name ("NVIDIA H200").
	Name string `json:"name"`
	// PCIBusID in the driver's domain:bus:device.function form.
	PCIBusID string `json:"pci_bus_id"`
	// Serial is the board serial number, empty when the driver has none.
	Serial string `json:"serial,omitempty"`
	// MemoryTotalMiB is the framebuffer size.
	MemoryTotalMiB uint64 `json:"memory_total_mib"`
	// DriverVersion is the kernel driver's version.
	DriverVersion string `json:"driver_version"`
	// CUDAVersion is the CUDA version the driver supports, as nvidia-smi
	// prints it ("12.8"); VBIOSVersion is the board's video BIOS version
	// ("96.00.89.00.01"). Each is empty when the driver does not say.
	CUDAVersion  string `json:"cuda_version,omitempty"`
	VBIOSVersion string `json:"vbios_version,omitempty"`
	// Backend names the source that produced the device ("nvml", "sim").
	Backend string `json:"backend"`
	// Simulated is true for devices that are not real GPUs. Every output
	// marks their records visibly (tag simulated=true or equivalent).
	Simulated bool `json:"simulated,omitempty"`
	// Temperature thresholds in °C as the device reports them; 0 when
	// unknown (then the catalog's generic thresholds apply).
	SlowdownTempC     float64 `json:"slowdown_temp_c,omitempty"`
	ShutdownTempC     float64 `json:"shutdown_temp_c,omitempty"`
	MaxOperatingTempC float64 `json:"max_operating_temp_c,omitempty"`
	MemoryMaxTempC    float64 `json:"memory_max_temp_c,omitempty"`
	// MIG is set for a MIG instance (a GPU partition sampled as a device
	// of its own). Parent is then the Index of the physical GPU it belongs
	// to; GPUInstanceID and ComputeInstanceID identify the partition on it
	// (nvidia-smi's GI and CI; Prometheus labels GPU_I_ID); MIGProfile is
	// its profile name ("1g.18gb"; label GPU_I_PROFILE). Under MIG the
	// driver keeps no utilization sample buffers and no per-process
	// utilization: those answer sampler.ErrNotSupported.
	MIG               bool   `json:"mig,omitempty"`
	Parent            int    `json:"parent,omitempty"`
	GPUInstanceID     int    `json:"gpu_instance_id,omitempty"`
	ComputeInstanceID int    `json:"compute_instance_id,omitempty"`
	MIGProfile        string `json:"mig_profile,omitempty"`
	// PersistenceMode, ECCMode and MIGMode are the device's current
	// settings as the driver reports them: ModeEnabled, ModeDisabled,
	// ModeUnsupported (the device has no such setting), or "" when
	// unknown (the driver lacks the call, or the read failed). MIGMode is
	// read on physical GPUs only. Persistence mode off makes the first
	// call after idle slow and lets clocks ramp; ECC costs some memory
	// bandwidth and capacity.
	PersistenceMode string `json:"persistence_mode,omitempty"`
	ECCMode         string `json:"ecc_mode,omitempty"`
	MIGMode         string `json:"mig_mode,omitempty"`
	// Architecture and ComputeMode are the GPU's architecture and compute
	// mode as nvidia-smi spells them ("Hopper", "Ada Lovelace"; "Default",
	// "Exclusive_Process", "Prohibited"), "" when unknown. A MIG instance
	// reports its parent GPU's.
	Architecture string `json:"architecture,omitempty"`
	ComputeMode  string `json:"compute_mode,omitempty"`
	// Attribution names whose work the device runs (Kubernetes pod, Slurm
	// job); empty when unattributed. A change is an identity change.
	Attribution
	// Generation increases each time the identity changes.
	Generation uint64 `json:"generation"`
}

// SimulatedMark is what DisplayName appends to a simulated device's name.
const SimulatedMark = "(simulated)"

// DisplayName returns the device's name for people to read: Name, followed
// by SimulatedMark when the device is simulated and its name does not
// already say so (the simulator names its devices "NVIDIA H200
// (simulated)"; a device is marked once, never twice).
func (d *Device) DisplayName() string {
	if !d.Simulated || strings.Contains(d.Name, SimulatedMark) {
		return d.Name
	}
	if d.Name == "" {
		return SimulatedMark
	}
	return d.Name + " " + SimulatedMark
}

// Attribution says whose work runs on a device: the Kubernetes pod,
// namespace and container it is allocated to, or the HPC (Slurm) job. The
// names follow dcgm-exporter's labels. Every field is empty when unknown.
type Attribution struct {
	Pod       string `json:"pod,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Container string `json:"container,omitempty"`
	HPCJob    string `json:"hpc_job,omitempty"`
}

// Attribution keys, as labels, tags and record fields.
const (
	AttrPod       = "pod"
	AttrNamespace = "namespace"
	AttrContainer = "container"
	AttrHPCJob    = "hpc_job"
)

// attributionKeys are the attribution keys in Values order.
var attributionKeys = [...]string{AttrPod, AttrNamespace, AttrContainer, AttrHPCJob}

// AttributionKeys returns the attribution keys in the order Values and
// Attrs return them (a copy: an array, like Values).
func AttributionKeys() [4]string { return attributionKeys }

// IsZero reports whether a attributes nothing.
func (a Attribution) IsZero() bool { return a == Attribution{} }

// Values returns the four values in AttributionKeys order.
func (a Attribution) Values() [4]string {
	return [4]string{a.Pod, a.Namespace, a.Container, a.HPCJob}
}

// Attrs returns the non-empty attribution values as key/value pairs in
// AttributionKeys order.
func (a Attribution) Attrs() []Attr {
	var out []Attr
	for i, v := range a.Values() {
		if v != "" {
			out = append(out, Attr{attributionKeys[i], v})
		}
	}
	return out
}

// EventKind names what happened.
type EventKind string

// Values of Device.PersistenceMode, ECCMode and MIGMode ("" is unknown).
const (
	ModeEnabled     = "enabled"
	ModeDisabled    = "disabled"
	ModeUnsupported = "unsupported"
)

// Event kinds known to the core. Backends and detectors may add others.
const (
	EventXID            EventKind = "xid"
	EventECC            EventKind = "ecc"
	EventThrottle       EventKind = "throttle"
	EventThreshold      EventKind = "threshold"
	EventDeviceLost     EventKind = "device_lost"
	EventDeviceRecovery EventKind = "device_recovered"
	EventSampleLoss     EventKind = "sample_loss"
	// EventDeviceHung: a driver call on the device has not returned within
	// sampler.Config.CallTimeout; the device's sampling is stalled (others are not).
	// The device_recovered event with attr from=hung ends it.
	EventDeviceHung EventKind = "device_hung"
	// EventPowerSource: the board switched power source (driver event).
	EventPowerSource EventKind = "power_source"
	// EventClockChange: the driver reported a clock or P-state change.
	EventClockChange EventKind = "clock_change"
	// EventFinding is a live diagnosis (package diagnose): a problem seen
	// in a window of samples, with evidence in Attrs and Fields and a start
	// and end.
	EventFinding EventKind = "finding"
	// EventSelf carries gpusampler's own metrics (one output's or one
	// device's counters) in Fields, identified by Attrs: scope=output
	// (the pump's accounting), scope=output_detail (the output's own
	// counters, see StatsReporter) or scope=buffer, each with output=NAME;
	// scope=device with gpu=N. Encoders write it as its own measurement /
	// record type (gpusampler_self, "self").
	EventSelf EventKind = "self"
)

// Field is one numeric value of an Event (self-metrics). Int values are
// written as integers. A Gauge is a level as it is now (samples held, an
// output failing), not a counter since start: what adds up a component's
// counters across its restarts (the plugin client) keeps a gauge's newest
// value instead of adding it up.
type Field struct {
	Key   string
	Value float64
	Int   bool
	Gauge bool
}

// FieldValue returns the value of the field named key in fields, 0 when
// there is none (a counter not reported reads as zero).
func FieldValue(fields []Field, key string) float64 {
	for _, f := range fields {
		if f.Key == key {
			return f.Value
		}
	}
	return 0
}

// Attr is one key/value attribute of an Event.
type Attr struct {
	Key, Value string
}

// Event is something that happened on a device over a span of time (EndNS
// equals StartNS for instants; 0 while still ongoing).
type Event struct {
	Kind    EventKind
	Device  int
	StartNS int64
	EndNS   int64
	// Message is a short human-readable summary.
	Message string
	Attrs   []Attr
	// Fields are numeric values (self-metrics); nil for other events.
	Fields []Field
}

// Clone returns a deep copy of e, so that a receiver may retain it.
func (e Event) Clone() Event {
	e.Attrs = slices.Clone(e.Attrs)
	e.Fields = slices.Clone(e.Fields)
	return e
}

// Batch is what a pump hands to an Output in one Write: device identities
// that are new or changed since the output last saw them, samples in publish
// order per device, and events.
//
// Ownership: the pump owns the Batch and every slice in it. They are valid
// only until Write returns; an output that needs data later must copy it.
type Batch struct {
	// Seq numbers batches per output, from 1. A replayed batch keeps its Seq
	// so that outputs which can de-duplicate do.
	Seq uint64
	// Devices carries identities (first sight or change).
	Devices []Device
	// Samples in publish order per device.
	Samples []Sample
	// Events in publish order.
	Events []Event
	// Summaries are per-window aggregates of samples, set only by an
	// aggregating wrapper (internal/pipeline/aggregate) in place of the raw samples it
	// summarized; pumps never fill it.
	Summaries []Summary
	// Origin is the fleet identity the batch's records were sampled under
	// when it is not the output's own: a disk buffer sets it on batches it
	// replays from segments written under another host name or other
	// global tags. nil (always, for batches a pump makes): the output's
	// configured host and global tags apply. Encoders write Origin's host
	// and tags in place of theirs, never a mix of the two. Like the rest
	// of the batch it belongs to the caller until Write returns.
	Origin *Origin
}

// Origin is a fleet identity: the host name and the global tags
// ([global_tags]) records carry.
type Origin struct {
	Host string
	Tags map[string]string
}

// Equal reports whether o and p are the same identity (a nil Origin is
// equal only to nil).
func (o *Origin) Equal(p *Origin) bool {
	if o == nil || p == nil {
		return o == p
	}
	return o.Host == p.Host && maps.Equal(o.Tags, p.Tags)
}

// OriginOr returns o's host and tags, or host and tags when o is nil: what
// an encoder configured with host and tags writes for a batch whose Origin
// is o.
func (o *Origin) OriginOr(host string, tags map[string]string) (string, map[string]string) {
	if o == nil {
		return host, tags
	}
	return o.Host, o.Tags
}

// Summary aggregates every sample of one metric on one device whose own
// timestamp falls in the window [StartNS, StartNS+IntervalNS). Windows are
// aligned to the interval (StartNS is a multiple of IntervalNS). Values are
// in the metric's base unit, like Sample.Value.
type Summary struct {
	StartNS    int64
	IntervalNS int64
	Mean       float64
	Min        float64
	Max        float64
	// Last is the value of the newest sample in the window.
	Last float64
	// Count is the number of samples summarized (≥ 1).
	Count  uint32
	Device uint16
	Metric catalog.MetricID
	// Hist, when set, is the distribution of the window's samples as an
	// exponential histogram, in the unit its wrapper was asked for (the
	// OpenTelemetry output's: the catalog's OTel unit, base unit × OTel
	// Scale), not the base unit. Nil when the output did not ask for one,
	// or for a window restored from an aggregate journal written before
	// journals kept histograms.
	Hist *ExpHistogram
}

// ExpHistogram is an OpenTelemetry exponential histogram: at scale s,
// bucket i holds the values in (base^i, base^(i+1)], base = 2^(2^-s);
// Positive counts the values above 0 from bucket PositiveOffset on,
// Negative those below 0 by magnitude from NegativeOffset on, ZeroCount the
// zeros. Its count is ZeroCount plus every bucket's count. NonFinite
// counts the window's NaN and infinite samples, which no bucket can hold:
// they are in the summary's Count (and its Mean, Min, Max), not in the
// histogram's count.
type ExpHistogram struct {
	Scale                          int32
	ZeroCount                      uint64
	PositiveOffset, NegativeOffset int32
	Positive, Negative             []uint64
	NonFinite                      uint64
}

// Count returns the number of values in the buckets: ZeroCount plus
// every bucket's count (NonFinite not included).
func (h *ExpHistogram) Count() uint64 {
	n := h.ZeroCount
	for _, c := range h.Positive {
		n += c
	}
	for _, c := range h.Negative {
		n += c
	}
	return n
}

// Len returns the number of records in the batch.
func (b *Batch) Len() int {
	return len(b.Devices) + len(b.Samples) + len(b.Events) + len(b.Summaries)
}

// Reset empties the batch, keeping capacity.
func (b *Batch) Reset() {
	b.Seq = 0
	b.Devices = b.Devices[:0]
	b.Samples = b.Samples[:0]
	clear(b.Events)
	b.Events = b.Events[:0]
	b.Summaries = b.Summaries[:0]
	b.Origin = nil
}

// EventClockStep: the host's realtime clock was stepped (by more than
// sampler.ClockStepThreshold against the boot-time clock); boot-time driver
// timestamps are converted with the new offset from then on. Attrs carry
// the step in ns.
const EventClockStep EventKind = "clock_step"

// Per-process sampling (like nvidia-smi pmon): which processes use a GPU,
// the memory they hold and their share of the SM, memory, encoder and
// decoder engines.
//
// Record shape: every process seen in one poll becomes one Event of kind
// EventProcess with StartNS == EndNS (the poll time), numeric values in
// Fields (pid, used_memory_mib, sm_util, mem_util, enc_util, dec_util) and
// identity in Attrs (name, type, and cmdline when enabled). Events already
// travel through every output, the plugin protocol and NATS, so no record
// type was added. The PID is a field, never a tag or label: PIDs churn and
// would explode series cardinality.

// EventProcess is one process on one device at one poll (see sampler.Process).
const EventProcess EventKind = "process"

// ProcessAttribution returns the process's own attribution carried in an
// EventProcess event's Attrs (under the keys AttrPod, AttrNamespace,
// AttrContainer, AttrHPCJob), and whether it carries any. A process that
// has its own is attributed by it rather than by its device's: on a GPU
// that several pods share, the device has none.
func ProcessAttribution(ev Event) (Attribution, bool) {
	var a Attribution
	for _, x := range ev.Attrs {
		switch x.Key {
		case AttrPod:
			a.Pod = x.Value
		case AttrNamespace:
			a.Namespace = x.Value
		case AttrContainer:
			a.Container = x.Value
		case AttrHPCJob:
			a.HPCJob = x.Value
		}
	}
	return a, !a.IsZero()
}

// IsAttributionKey reports whether key is one of AttributionKeys.
func IsAttributionKey(key string) bool {
	return key == AttrPod || key == AttrNamespace || key == AttrContainer || key == AttrHPCJob
}

// Process field and attribute keys of an EventProcess event.
const (
	ProcessFieldPID        = "pid"
	ProcessFieldUsedMemory = "used_memory_mib"
	ProcessFieldSMUtil     = "sm_util"
	ProcessFieldMemUtil    = "mem_util"
	ProcessFieldEncUtil    = "enc_util"
	ProcessFieldDecUtil    = "dec_util"
	ProcessAttrName        = "name"
	ProcessAttrType        = "type"
	ProcessAttrCmdline     = "cmdline"
)

// Per-job accounting (package internal/accounting): what each owner of a
// GPU — a Kubernetes pod/namespace/container, a Slurm job, or nobody
// (attr owner=unattributed) — used of it.
//
// Record shape: one Event per owner per device, StartNS == EndNS (the time
// the figures are as of), identity in Attrs (AttrOwner, the owner's
// attribution keys, AttrJobStarted) and cumulative figures in Fields (the
// JobField keys). EventJob carries the running totals, again every report
// interval; EventJobEnd carries the final totals once, when the owner
// leaves the GPU (the job summary a scheduler epilog or a chargeback
// stream reads), preceded by an EventJob with the same figures, so a
// counter's last value always equals the job-end total.
const (
	// EventJob carries an owner's running totals on one device.
	EventJob EventKind = "job"
	// EventJobEnd carries an owner's final totals when it left the device.
	EventJobEnd EventKind = "job_end"
)

// Attribute keys of EventJob and EventJobEnd besides the attribution keys.
const (
	// AttrOwner names the owner for people: "namespace/pod/container",
	// "slurm:JOB", or OwnerUnattributed.
	AttrOwner = "owner"
	// AttrJobStarted is when the account started (the owner arrived on the
	// device or gpusampler started), RFC 3339 with nanoseconds.
	AttrJobStarted = "started"
	// OwnerUnattributed owns what no pod or job is known to own.
	OwnerUnattributed = "unattributed"
)

// Field keys of EventJob and EventJobEnd (cumulative since the account
// started; see internal/accounting for the exact rules).
const (
	JobFieldEnergy        = "energy_j"
	JobFieldEnergyCounter = "energy_counter_j"
	JobFieldEnergyDiff    = "energy_diff_j"
	JobFieldBusy          = "busy_s"
	JobFieldIdleAllocated = "idle_allocated_s"
	JobFieldAllocated     = "allocated_s"
	JobFieldPointRead     = "point_read_s"
	JobFieldLost          = "lost_s"
	JobFieldExactness     = "exactness"
	JobFieldMemoryPeak    = "memory_peak_mib"
	JobFieldSamples       = "power_samples"
)

// JobFieldInfo describes an EventJob field for the outputs that give each
// field a series of its own (Prometheus, OpenTelemetry): one table, so
// that they name and type the fields alike.
type JobFieldInfo struct {
	// Key is the field's key (a JobField constant).
	Key string
	// Total marks a running total since the account started (a counter;
	// an OpenTelemetry cumulative monotonic sum); the others are values as
	// of the record (gauges).
	Total bool
	// Help says what the field is (Prometheus' HELP).
	Help string
	// Prometheus is the series name (base unit, and _total for a Total);
	// OTel is the metric name and OTelUnit its UCUM unit.
	Prometheus, OTel, OTelUnit string
}

var jobFields = []JobFieldInfo{
	{JobFieldEnergy, true, "Energy the owner used on the GPU, integrated from every power-buffer sample (trapezoid between driver timestamps; nothing across a gap).",
		"gpusampler_job_energy_joules_total", "gpusampler.job.energy", "J"},
	{JobFieldEnergyCounter, true, "The owner's share of the GPU's energy-counter deltas (split in proportion to the integrated energy between readings).",
		"gpusampler_job_energy_counter_joules_total", "gpusampler.job.energy_counter", "J"},
	{JobFieldEnergyDiff, false, "energy_counter minus energy: how far the counter and the integrated samples disagree.",
		"gpusampler_job_energy_diff_joules", "gpusampler.job.energy_diff", "J"},
	{JobFieldBusy, true, "Seconds in which the owner's part of the GPU utilization was at least 1% (a kernel ran).",
		"gpusampler_job_busy_seconds_total", "gpusampler.job.busy_time", "s"},
	{JobFieldIdleAllocated, true, "Seconds the GPU was allocated to the owner and the owner ran no kernel.",
		"gpusampler_job_idle_allocated_seconds_total", "gpusampler.job.idle_allocated_time", "s"},
	{JobFieldAllocated, true, "Seconds the owner held the GPU (along its power samples, or its other samples where it has none; gaps included).",
		"gpusampler_job_allocated_seconds_total", "gpusampler.job.allocated_time", "s"},
	{JobFieldPointRead, true, "Seconds of the owner's time whose utilization came from point reads, not the driver's samples.",
		"gpusampler_job_point_read_seconds_total", "gpusampler.job.point_read_time", "s"},
	{JobFieldLost, true, "Seconds of the owner's time without power samples (a lost GPU, lost buffer samples).",
		"gpusampler_job_lost_seconds_total", "gpusampler.job.lost_time", "s"},
	{JobFieldExactness, false, "1 - (point-read + lost seconds) / allocated seconds.",
		"gpusampler_job_exactness_ratio", "gpusampler.job.exactness", "1"},
	{JobFieldMemoryPeak, false, "Peak GPU memory the owner used (MiB).",
		"gpusampler_job_memory_peak_mib", "gpusampler.job.memory.peak", "MiBy"},
	{JobFieldSamples, true, "Power samples integrated into the owner's energy.",
		"gpusampler_job_power_samples_total", "gpusampler.job.power_samples", "{sample}"},
}

// JobFields returns the descriptions of an EventJob's fields, in
// JobFieldKeys order.
func JobFields() []JobFieldInfo { return slices.Clone(jobFields) }

// JobFieldKeys returns the field keys of an EventJob in the order the
// accountant writes them.
func JobFieldKeys() []string {
	keys := make([]string, len(jobFields))
	for i, f := range jobFields {
		keys[i] = f.Key
	}
	return keys
}

// OwnerName returns the AttrOwner value of attribution a.
func OwnerName(a Attribution) string {
	switch {
	case a.IsZero():
		return OwnerUnattributed
	case a.Pod != "":
		s := a.Namespace + "/" + a.Pod
		if a.Container != "" {
			s += "/" + a.Container
		}
		if a.HPCJob != "" {
			s += " slurm:" + a.HPCJob
		}
		return s
	default:
		return "slurm:" + a.HPCJob
	}
}
