// Package doctor examines a backend's GPUs once and says what gpusampler
// can sample there and how often it should: driver and NVML versions,
// per device which metric groups work (each metric probed once), permission
// refusals, each sample buffer's measured depth and period, the buffers'
// timestamp clock, the latency of a cheap driver call, and recommended
// intervals (`gpusampler doctor`).
//
// It uses only the sampler interfaces (sampler.Source, sampler.DeviceSource)
// plus optional extras a backend may implement (Versions), so it runs the
// same on the NVML driver and on the simulator, whose report is marked
// simulated. Clocks are injected (Options.Now, Options.Boottime) so that a
// report on the simulator is reproducible (golden test).
//
// Concurrency: Run calls each device's methods from the calling goroutine
// only, one device after the other.
package doctor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// DefaultLatencyCalls is how many cheap driver calls the latency
// measurement makes per device.
const DefaultLatencyCalls = 300

// budgetFraction is the share of wall time the recommended intervals allow
// gpusampler's own driver calls per kind (NVML calls hold the driver lock
// and cost the workload time).
const budgetFraction = 100 // 1 %

// Options configure Run. The zero value means the defaults.
type Options struct {
	// Catalog defaults to catalog.Default().
	Catalog *catalog.Catalog
	// LatencyCalls is the number of cheap calls timed per device (default
	// DefaultLatencyCalls).
	LatencyCalls int
	// Now is the clock for latencies and the realtime side of the clock
	// classification; nil means time.Now.
	Now func() time.Time
	// Boottime returns the time since boot (CLOCK_BOOTTIME), for the clock
	// classification; nil means the system's (sampler.BootTime).
	Boottime func() (time.Duration, bool)
}

// Report is what doctor found. Render it with WriteText.
type Report struct {
	// Backend is the source's name ("nvml", "sim").
	Backend string `json:"backend"`
	// Simulated is true when the devices are not real GPUs.
	Simulated bool `json:"simulated"`
	// Driver and NVML are the versions the backend reports ("" unknown).
	Driver string `json:"driver,omitempty"`
	NVML   string `json:"nvml,omitempty"`
	// Notices are the backend's remarks on the driver as a whole (one
	// older than the oldest supported).
	Notices []string `json:"notices,omitempty"`
	// Devices holds one entry per device, in enumeration order.
	Devices []DeviceReport `json:"devices"`
	// Recommend is the interval advice for the whole host.
	Recommend Recommendation `json:"recommend"`
}

// DeviceReport is one device's findings.
type DeviceReport struct {
	Device record.Device `json:"device"`
	// Err is set when the device could not be examined (its identity
	// failed); the other fields are then empty.
	Err string `json:"error,omitempty"`
	// Groups says per metric group which metrics work.
	Groups []GroupSupport `json:"groups"`
	// NoPermission counts metrics the driver refused for lack of privilege.
	NoPermission int `json:"no_permission"`
	// Buffers has one probe per sample-buffer type.
	Buffers []BufferProbe `json:"buffers"`
	// Clock is the buffers' timestamp clock (from the newest sample seen).
	Clock string `json:"clock"`
	// Latency of a cheap driver call on this device.
	Latency Latency `json:"latency"`
	// FieldCalls is how many driver calls one read of the field metrics
	// takes, as counted by the backend (sampler.CallCounter) on a second
	// read: 1 (one batch) where the driver gives every field, more where
	// dedicated getters stand in for fields; 0 when not counted.
	FieldCalls int `json:"field_calls,omitempty"`
	// PointCalls is how many driver calls one point read of the metrics
	// of the missing buffers (media engines' aside) takes, counted like
	// FieldCalls: the engine reads them together every field tick, and one
	// call may serve several (GPU and memory utilization).
	PointCalls int `json:"point_calls,omitempty"`
}

// GroupSupport is how much of one metric group a device gives.
type GroupSupport struct {
	Group     catalog.Group `json:"group"`
	Supported int           `json:"supported"`
	Total     int           `json:"total"`
	// Unsupported names the metrics the device cannot give.
	Unsupported []string `json:"unsupported,omitempty"`
	// OldDriver names the metrics the installed driver cannot give: their
	// function or field is absent from it (sampler.ErrOldDriver); a newer
	// driver has it. OldDriverWhy is the first such error, naming what is
	// missing and which driver has it.
	OldDriver    []string `json:"old_driver,omitempty"`
	OldDriverWhy string   `json:"old_driver_why,omitempty"`
	// PointReads names buffer metrics whose sample buffer the device lacks
	// and which come from point reads instead (counted in Supported): at
	// the field interval, a media engine's (video, JPEG, optical flow) at
	// the rare interval.
	PointReads []string `json:"point_reads,omitempty"`
	// NoPermission names metrics refused for lack of privilege.
	NoPermission []string `json:"no_permission,omitempty"`
	// Failed names metrics whose probe failed otherwise, with the error.
	Failed []string `json:"failed,omitempty"`
}

// BufferProbe is what one drain from cursor 0 shows of a sample buffer.
type BufferProbe struct {
	Type string `json:"type"`
	// Supported is false when the device lacks the buffer type.
	Supported bool `json:"supported"`
	// PointReads names the buffer's metric when the buffer is not
	// supported and the metric comes from point reads instead.
	PointReads string `json:"point_reads,omitempty"`
	// Empty: the buffer held nothing (idle engine); Depth and Period are
	// unknown.
	Empty bool `json:"empty,omitempty"`
	// Depth is the number of samples the drain returned: the buffer's depth
	// once it has filled.
	Depth int `json:"depth,omitempty"`
	// Period is the median spacing of the samples; Span = newest − oldest.
	Period time.Duration `json:"period_ns,omitempty"`
	Span   time.Duration `json:"span_ns,omitempty"`
	// Duplicates counts samples repeating their predecessor's timestamp.
	Duplicates int `json:"duplicates,omitempty"`
	// Clock is the timestamp clock of the newest sample.
	Clock string `json:"clock,omitempty"`
	// Err is the drain's error, when not "not supported" or "nothing new".
	Err string `json:"error,omitempty"`
}

// Latency is the distribution of one cheap driver call's latency.
type Latency struct {
	// Op names the call (the metric read).
	Op    string        `json:"op"`
	Calls int           `json:"calls"`
	P50   time.Duration `json:"p50_ns"`
	P99   time.Duration `json:"p99_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Recommendation is interval advice, with the reason for each.
type Recommendation struct {
	// DrainInterval is the primary buffers' freshness limit and
	// SecondaryDrainInterval the other buffers' (sampler.Config).
	DrainInterval          time.Duration `json:"drain_interval_ns"`
	SecondaryDrainInterval time.Duration `json:"secondary_drain_interval_ns"`
	FieldInterval          time.Duration `json:"field_interval_ns"`
	SlowInterval           time.Duration `json:"slow_interval_ns"`
	RareInterval           time.Duration `json:"rare_interval_ns"`
	// GPMInterval is 0 when no device supports GPM profiling.
	GPMInterval time.Duration `json:"gpm_interval_ns,omitempty"`
	// Why has one line per recommendation, in the order above, then one
	// on the cost.
	Why []string `json:"why"`
	// Cost is the NVML calls per second per GPU these intervals cost, by
	// kind of read, as the engine schedules them (each buffer type at half
	// its measured span within its class's freshness limit), for the costliest
	// device; driver event waits (about one per second for the host) are
	// not included.
	Cost []CallCost `json:"calls_per_gpu_per_s,omitempty"`
}

// CallCost is one kind of read's NVML calls per second on one GPU.
type CallCost struct {
	// Kind names the reads and the NVML function: "buffers (GetSamples)".
	Kind      string  `json:"kind"`
	PerSecond float64 `json:"per_second"`
}

type versioner interface {
	Versions() (driver, nvml string)
}

type noticer interface {
	Notices() []string
}

// defaults fills in the defaults of the zero fields.
func (opts *Options) defaults() {
	if opts.Catalog == nil {
		opts.Catalog = catalog.Default()
	}
	if opts.LatencyCalls <= 0 {
		opts.LatencyCalls = DefaultLatencyCalls
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Boottime == nil {
		opts.Boottime = sampler.BootTime
	}
}

// Run examines every device of src. It does not close src.
func Run(src sampler.Source, opts Options) (*Report, error) {
	opts.defaults()
	r := &Report{Backend: src.Name()}
	if v, ok := src.(versioner); ok {
		r.Driver, r.NVML = v.Versions()
	}
	if n, ok := src.(noticer); ok {
		r.Notices = n.Notices()
	}
	devs, err := src.Devices()
	if err != nil {
		return nil, fmt.Errorf("open %s devices: %w", src.Name(), err)
	}
	for i, ds := range devs {
		dr := examine(ds, i, &opts)
		if dr.Device.Simulated {
			r.Simulated = true
		}
		if r.Driver == "" && dr.Device.DriverVersion != "" {
			r.Driver = dr.Device.DriverVersion
		}
		r.Devices = append(r.Devices, dr)
	}
	r.Recommend = recommend(r.Devices, opts.Catalog)
	return r, nil
}

func examine(ds sampler.DeviceSource, index int, opts *Options) DeviceReport {
	var dr DeviceReport
	id, err := ds.Identity()
	if err != nil {
		dr.Device = record.Device{Index: index}
		dr.Err = err.Error()
		return dr
	}
	dr.Device = id
	for _, g := range catalog.Groups() {
		gs := GroupSupport{Group: g}
		for _, m := range opts.Catalog.All() {
			if m.Group != g {
				continue
			}
			gs.Total++
			switch point, err := ProbeSupport(ds, &m); {
			case err == nil && point:
				gs.Supported++
				gs.PointReads = append(gs.PointReads, m.Name)
			case err == nil:
				gs.Supported++
			case errors.Is(err, sampler.ErrOldDriver):
				gs.OldDriver = append(gs.OldDriver, m.Name)
				if gs.OldDriverWhy == "" {
					gs.OldDriverWhy = err.Error()
				}
			case errors.Is(err, sampler.ErrNotSupported):
				gs.Unsupported = append(gs.Unsupported, m.Name)
			case errors.Is(err, sampler.ErrNoPermission):
				gs.NoPermission = append(gs.NoPermission, m.Name)
				dr.NoPermission++
			default:
				gs.Failed = append(gs.Failed, m.Name+": "+err.Error())
			}
		}
		if gs.Total > 0 {
			dr.Groups = append(dr.Groups, gs)
		}
	}
	clock := sampler.ClockUnknown
	var newest uint64
	for t := catalog.BufferType(0); t < catalog.NumBufferTypes; t++ {
		p, n := probeBuffer(ds, t, opts)
		if m, ok := opts.Catalog.Get(opts.Catalog.BufferMetric(t)); !p.Supported && ok {
			if point, err := ProbeSupport(ds, &m); err == nil && point {
				p.PointReads = m.Name
			}
		}
		if n > newest {
			newest = n
			clock = classify(n, opts)
		}
		dr.Buffers = append(dr.Buffers, p)
	}
	dr.Clock = clock.String()
	dr.Latency = measureLatency(ds, opts)
	var fields, points []catalog.MetricID
	for _, m := range opts.Catalog.All() {
		if m.Src.Kind == catalog.FromField && !m.Rare {
			fields = append(fields, m.ID)
		}
	}
	for _, b := range dr.Buffers {
		if t, ok := catalog.ParseBufferType(b.Type); ok && b.PointReads != "" && !isMedia(b.Type) {
			points = append(points, opts.Catalog.BufferMetric(t))
		}
	}
	dr.FieldCalls = countCalls(ds, fields)
	dr.PointCalls = countCalls(ds, points)
	return dr
}

// countCalls reads ids twice and returns the driver calls the second read
// made (the first one settles which metrics a getter reads), or 0 when the
// device does not count its calls.
func countCalls(ds sampler.DeviceSource, ids []catalog.MetricID) int {
	cc, ok := ds.(sampler.CallCounter)
	if !ok || len(ids) == 0 {
		return 0
	}
	out := make([]sampler.Reading, len(ids))
	if ds.Read(ids, out) != nil {
		return 0
	}
	keep := ids[:0]
	for i, id := range ids {
		if !errors.Is(out[i].Err, sampler.ErrNotSupported) {
			keep = append(keep, id)
		}
	}
	if len(keep) == 0 {
		return 0
	}
	before := cc.CallStats().Calls
	if ds.Read(keep, out[:len(keep)]) != nil {
		return 0
	}
	return int(cc.CallStats().Calls - before)
}

// ProbeMetric asks a device for one metric once (see ProbeSupport): nil
// when the engine can sample it, from its buffer or by point reads, else
// the error (test it with errors.Is against sampler.ErrNotSupported and
// sampler.ErrNoPermission).
func ProbeMetric(d sampler.DeviceSource, m *catalog.Metric) error {
	_, err := ProbeSupport(d, m)
	return err
}

// ProbeSupport asks a device for one metric once: a drain from cursor 0
// for buffer metrics, a read otherwise. "Nothing new" (an idle buffer, a
// first profiling snapshot) counts as supported. A buffer metric whose
// buffer is not supported is read once more as a point read, as the engine
// does then: pointReads is true when that works (err is nil then).
func ProbeSupport(d sampler.DeviceSource, m *catalog.Metric) (pointReads bool, err error) {
	read := func() error {
		out := make([]sampler.Reading, 1)
		if err := d.Read([]catalog.MetricID{m.ID}, out); err != nil {
			return err
		}
		return out[0].Err
	}
	if m.Src.Kind == catalog.FromBuffer {
		_, err = d.Drain(m.Src.Buffer, 0, nil)
		if errors.Is(err, sampler.ErrNotSupported) {
			switch rerr := read(); {
			case rerr == nil || errors.Is(rerr, sampler.ErrNothingNew):
				return true, nil
			case errors.Is(rerr, sampler.ErrOldDriver) && !errors.Is(err, sampler.ErrOldDriver):
				// The point getter is absent from this driver: a newer
				// driver has it (and may have the buffer too), so the
				// driver is why, not the device.
				return false, fmt.Errorf("%s: sample buffer %s: %v, and its point read: %w", m.Name, m.Src.Buffer, err, rerr)
			}
		}
	} else {
		err = read()
	}
	if errors.Is(err, sampler.ErrNothingNew) {
		return false, nil
	}
	return false, err
}

// ProbeBuffers drains every sample buffer type of ds once from cursor 0
// and measures it: the one buffer probe of the program, for doctor and for
// gpu-check. Each buffer's clock is classified on opts' clocks (Now and
// Boottime; the system's when nil); the other options do not apply.
// PointReads is left empty (Run fills it in). It calls ds from the calling
// goroutine only.
func ProbeBuffers(ds sampler.DeviceSource, opts Options) []BufferProbe {
	opts.defaults()
	out := make([]BufferProbe, 0, catalog.NumBufferTypes)
	for t := catalog.BufferType(0); t < catalog.NumBufferTypes; t++ {
		p, _ := probeBuffer(ds, t, &opts)
		out = append(out, p)
	}
	return out
}

// probeBuffer drains buffer t from cursor 0 and measures it. It returns the
// newest raw timestamp (0 when none).
func probeBuffer(ds sampler.DeviceSource, t catalog.BufferType, opts *Options) (BufferProbe, uint64) {
	p := BufferProbe{Type: t.String(), Supported: true}
	raw, err := ds.Drain(t, 0, nil)
	switch {
	case errors.Is(err, sampler.ErrNotSupported):
		p.Supported = false
		return p, 0
	case errors.Is(err, sampler.ErrNothingNew):
		p.Empty = true
		return p, 0
	case err != nil:
		p.Err = err.Error()
		return p, 0
	}
	if len(raw) == 0 {
		p.Empty = true
		return p, 0
	}
	ts := make([]uint64, len(raw))
	for i, r := range raw {
		ts[i] = r.TimeUS
	}
	slices.Sort(ts)
	p.Depth = len(ts)
	newest := ts[len(ts)-1]
	p.Span = time.Duration(newest-ts[0]) * time.Microsecond
	var gaps []uint64
	for i := 1; i < len(ts); i++ {
		if ts[i] == ts[i-1] {
			p.Duplicates++
			continue
		}
		gaps = append(gaps, ts[i]-ts[i-1])
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		p.Period = time.Duration(gaps[len(gaps)/2]) * time.Microsecond
	}
	p.Clock = classify(newest, opts).String()
	return p, newest
}

// clockTolerance matches the sampler's Timebase: the newest buffered
// sample lies within seconds of now on the right clock, and off by the
// uptime or by decades on the wrong one.
const clockTolerance = 120 * time.Second

// classify names the clock a raw µs timestamp runs on.
func classify(rawUS uint64, opts *Options) sampler.ClockKind {
	raw := time.Duration(rawUS) * time.Microsecond
	if absDur(time.Duration(opts.Now().UnixNano())-raw) < clockTolerance {
		return sampler.ClockRealtime
	}
	if bt, ok := opts.Boottime(); ok && absDur(bt-raw) < clockTolerance {
		return sampler.ClockBoottime
	}
	return sampler.ClockAnchored
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// latencyMetrics are cheap point queries, in order of preference.
var latencyMetrics = []catalog.MetricID{catalog.MetricTempGPU, catalog.MetricPState, catalog.MetricMemoryUsed}

// measureLatency times LatencyCalls reads of the first cheap metric the
// device supports.
func measureLatency(ds sampler.DeviceSource, opts *Options) Latency {
	var id catalog.MetricID
	for _, c := range latencyMetrics {
		if m, ok := opts.Catalog.Get(c); ok && ProbeMetric(ds, &m) == nil {
			id = c
			break
		}
	}
	if id == 0 {
		return Latency{Op: "none supported"}
	}
	ids := []catalog.MetricID{id}
	out := make([]sampler.Reading, 1)
	lat := make([]time.Duration, 0, opts.LatencyCalls)
	for range opts.LatencyCalls {
		start := opts.Now()
		err := ds.Read(ids, out)
		d := opts.Now().Sub(start)
		if err != nil || out[0].Err != nil {
			continue
		}
		lat = append(lat, d)
	}
	l := Latency{Op: "read " + opts.Catalog.Name(id), Calls: len(lat)}
	if len(lat) == 0 {
		return l
	}
	slices.Sort(lat)
	l.P50 = lat[len(lat)/2]
	l.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
	l.Max = lat[len(lat)-1]
	return l
}

// recommend derives intervals: drain the primary buffers at most half the
// shortest primary buffer span apart (and at most the default 1 s), the
// others at the default secondary limit (each at half its span when
// sooner); field and slow reads no more often than keeps each kind's
// driver time under 1 % of wall time (and no more often than the
// defaults); rare state at the default.
func recommend(devs []DeviceReport, cat *catalog.Catalog) Recommendation {
	rec := Recommendation{DrainInterval: sampler.DefaultDrainInterval, SecondaryDrainInterval: sampler.DefaultSecondaryDrainInterval,
		FieldInterval: sampler.DefaultFieldInterval, SlowInterval: sampler.DefaultSlowInterval, RareInterval: sampler.DefaultRareInterval}
	var shortest time.Duration
	var which string
	var p99 time.Duration
	buffers := false // any device supports any sample buffer
	for _, d := range devs {
		for _, b := range d.Buffers {
			buffers = buffers || b.Supported
			if b.Depth < 4 || b.Period <= 0 || !primaryBuffer(b.Type) {
				continue
			}
			span := time.Duration(b.Depth) * b.Period
			if shortest == 0 || span < shortest {
				shortest, which = span, fmt.Sprintf("gpu %d %s: %d × %v", d.Device.Index, b.Type, b.Depth, b.Period)
			}
		}
		p99 = max(p99, d.Latency.P99)
	}
	if shortest > 0 {
		half := (shortest / 2).Truncate(10 * time.Millisecond)
		rec.DrainInterval = max(min(rec.DrainInterval, half), sampler.MinDrainInterval)
		rec.Why = append(rec.Why, fmt.Sprintf("drain %v: at most half the shortest primary buffer span (%s = %v), at most %v",
			rec.DrainInterval, which, shortest, sampler.DefaultDrainInterval))
	} else if !buffers && len(devs) > 0 {
		rec.Why = append(rec.Why, fmt.Sprintf("drain %v: no sample buffer is supported on these devices; their metrics come from point reads where a point getter exists: at the field interval, the media engines' (%s) at the rare interval",
			rec.DrainInterval, strings.Join(mediaBuffers(), ", ")))
	} else {
		rec.Why = append(rec.Why, fmt.Sprintf("drain %v: the default; no buffer held samples to measure (idle GPU? run doctor under load)",
			rec.DrainInterval))
	}
	rec.Why = append(rec.Why, fmt.Sprintf("secondary drain %v: the other buffers (%s) each at half its span when sooner, so none loses a sample",
		rec.SecondaryDrainInterval, strings.Join(secondaryBuffers(), ", ")))
	slow := 0
	for _, m := range cat.All() {
		if m.Src.Kind == catalog.FromQuery && !m.Rare {
			slow++
		}
	}
	if f := roundUp(p99 * budgetFraction); f > rec.FieldInterval {
		rec.FieldInterval = f
	}
	rec.Why = append(rec.Why, fmt.Sprintf("fields %v (%.3g Hz): one batched call per tick, ≤ 1%% of wall time at p99 %v; higher rates cost the workload",
		rec.FieldInterval, float64(time.Second)/float64(rec.FieldInterval), p99))
	if s := roundUp(p99 * time.Duration(slow) * budgetFraction); s > rec.SlowInterval {
		rec.SlowInterval = s
	}
	rec.Why = append(rec.Why, fmt.Sprintf("slow state %v: %d point queries per tick, ≤ 1%% of wall time at p99 %v",
		rec.SlowInterval, slow, p99))
	rec.RareInterval = max(rec.RareInterval, rec.SlowInterval)
	rec.Why = append(rec.Why, fmt.Sprintf("rare state %v: limits, link settings and health counters seldom change", rec.RareInterval))
	gpm, oldWhy := false, ""
	for _, d := range devs {
		for _, g := range d.Groups {
			if g.Group != catalog.GroupProfiling {
				continue
			}
			gpm = gpm || g.Supported > 0
			if oldWhy == "" {
				oldWhy = g.OldDriverWhy
			}
		}
	}
	recent := gpmArchitecture(devs)
	switch {
	case gpm:
		rec.GPMInterval = sampler.DefaultGPMInterval
		rec.Why = append(rec.Why, fmt.Sprintf("profiling (GPM) %v: one snapshot per read, values over the interval; at least %v",
			rec.GPMInterval, sampler.MinGPMInterval))
	case oldWhy != "":
		rec.Why = append(rec.Why, "profiling (GPM): this driver lacks it, not the GPU: "+oldWhy+"; update the driver")
	case recent != "":
		rec.Why = append(rec.Why, "profiling (GPM): not offered here although the GPUs are "+recent+
			" (GPM's generation): the driver answers that GPM is not supported on them (a vGPU or MIG without per-instance reads has none; otherwise update the driver)")
	default:
		rec.Why = append(rec.Why, "profiling (GPM): not supported by these devices (GPM needs Hopper or newer, and not under MIG without per-instance reads)")
	}
	if rec.Cost = estimateCost(devs, cat, &rec); rec.Cost != nil {
		rec.Why = append(rec.Why, costLine(rec.Cost))
	}
	return rec
}

// gpmArchitectures are the architectures (record.Device.Architecture, as
// nvidia-smi names them) that have GPM: Hopper and newer.
var gpmArchitectures = []string{"Hopper", "Blackwell"}

// gpmArchitecture returns the architecture of the first device whose
// generation has GPM ("" when none says so).
func gpmArchitecture(devs []DeviceReport) string {
	for _, d := range devs {
		if slices.Contains(gpmArchitectures, d.Device.Architecture) {
			return d.Device.Architecture
		}
	}
	return ""
}

// isMedia reports whether the buffer type named typ is a media engine's
// (video encoder and decoder, JPEG, optical flow): the engine point-reads
// those at the rare interval when the device lacks the buffer or it runs
// dry, not at the field interval.
func isMedia(typ string) bool {
	t, ok := catalog.ParseBufferType(typ)
	if !ok {
		return false
	}
	switch t {
	case catalog.BufferEncoderUtil, catalog.BufferDecoderUtil, catalog.BufferJPEGUtil, catalog.BufferOFAUtil:
		return true
	}
	return false
}

// mediaBuffers names the media engines' buffer types.
func mediaBuffers() []string {
	var out []string
	for _, n := range catalog.BufferTypeNames() {
		if isMedia(n) {
			out = append(out, n)
		}
	}
	return out
}

// estimateCost returns the calls per second per GPU of the costliest
// device at rec's intervals, as the engine schedules its reads: each
// supported buffer drained at half its span within its class's freshness
// limit (at the limit while it is empty); the missing buffers' metrics
// point-read together at the field interval (the calls one such read makes,
// PointCalls, where counted), a media engine's at the rare interval;
// an empty (idle) media buffer point-read at the rare interval too, and an
// idle GPU's utilization (empty gpu_util buffer) once per drain.
func estimateCost(devs []DeviceReport, cat *catalog.Catalog, rec *Recommendation) []CallCost {
	per := func(d time.Duration) float64 { return float64(time.Second) / float64(d) }
	var worst []CallCost
	worstTotal := -1.0
	for _, d := range devs {
		if d.Err != "" {
			continue
		}
		missing := map[string]bool{}
		gpm := false
		for _, g := range d.Groups {
			for _, l := range [][]string{g.Unsupported, g.OldDriver, g.NoPermission} {
				for _, n := range l {
					missing[n] = true
				}
			}
			for _, f := range g.Failed {
				missing[strings.SplitN(f, ":", 2)[0]] = true
			}
			gpm = gpm || (g.Group == catalog.GroupProfiling && g.Supported > 0)
		}
		var buffers, point float64
		if d.PointCalls > 0 {
			point += float64(d.PointCalls) * per(rec.FieldInterval)
		}
		for _, b := range d.Buffers {
			switch {
			case !b.Supported && b.PointReads != "" && isMedia(b.Type):
				point += per(rec.RareInterval)
			case !b.Supported && b.PointReads != "" && d.PointCalls == 0:
				point += per(rec.FieldInterval)
			case b.Supported && b.Empty && isMedia(b.Type):
				point += per(rec.RareInterval) // a dry engine's point read
			case b.Supported && b.Empty && b.Type == catalog.BufferGPUUtil.String():
				point += per(rec.DrainInterval) // an idle GPU's utilization, once per drain
			}
			if !b.Supported {
				continue
			}
			// At its class's freshness limit while the span is unknown
			// (an idle engine's empty buffer), else at half the span
			// within that limit.
			every := rec.SecondaryDrainInterval
			if primaryBuffer(b.Type) {
				every = rec.DrainInterval
			}
			if b.Depth >= 4 && b.Period > 0 {
				every = min(max(time.Duration(b.Depth)*b.Period/2, sampler.MinDrainInterval), every)
			}
			buffers += per(every)
		}
		fields, slowQ, rareQ := false, map[string]bool{}, map[string]bool{}
		for _, m := range cat.All() {
			if missing[m.Name] {
				continue
			}
			switch {
			case m.Src.Kind == catalog.FromField && !m.Rare:
				fields = true
			case m.Src.Kind == catalog.FromQuery && m.Rare:
				rareQ[m.Src.Query] = true
			case m.Src.Kind == catalog.FromQuery:
				slowQ[m.Src.Query] = true
			}
		}
		cost := []CallCost{{"buffers (GetSamples)", buffers}}
		if point > 0 {
			cost = append(cost, CallCost{"point reads for missing or idle buffers", point})
		}
		switch {
		case fields && d.FieldCalls > 1:
			cost = append(cost, CallCost{"fields (GetFieldValues and the getters that stand in for fields)", float64(d.FieldCalls) * per(rec.FieldInterval)})
		case fields:
			cost = append(cost, CallCost{"fields (GetFieldValues)", per(rec.FieldInterval)})
		}
		cost = append(cost, CallCost{"slow state (point queries)", float64(len(slowQ)) * per(rec.SlowInterval)},
			CallCost{"rare state (GetFieldValues and point queries)", float64(1+len(rareQ)) * per(rec.RareInterval)})
		if gpm && rec.GPMInterval > 0 {
			cost = append(cost, CallCost{"profiling (GPM sample and metrics get)", 2 * per(rec.GPMInterval)})
		}
		cost = append(cost, CallCost{"processes (lists; one more while processes run)", 2 * per(sampler.DefaultProcessInterval)})
		total := 0.0
		for _, c := range cost {
			total += c.PerSecond
		}
		if total > worstTotal {
			worst, worstTotal = cost, total
		}
	}
	return worst
}

// primaryBuffer reports whether the buffer type named typ is held to the
// drain interval by default.
func primaryBuffer(typ string) bool {
	t, ok := catalog.ParseBufferType(typ)
	return ok && slices.Contains(sampler.DefaultPrimaryBuffers(), t)
}

// secondaryBuffers names the buffer types not primary by default.
func secondaryBuffers() []string {
	var out []string
	for _, n := range catalog.BufferTypeNames() {
		if !primaryBuffer(n) {
			out = append(out, n)
		}
	}
	return out
}

// costLine renders a cost estimate.
func costLine(cost []CallCost) string {
	total := 0.0
	parts := make([]string, len(cost))
	for i, c := range cost {
		total += c.PerSecond
		parts[i] = fmt.Sprintf("%s %.3g", c.Kind, c.PerSecond)
	}
	return fmt.Sprintf("cost: about %.3g NVML calls per GPU per second at these intervals: %s; plus about one driver event wait per second for the host",
		total, strings.Join(parts, ", "))
}

// roundUp rounds d up to a tidy interval (10 ms steps below 1 s, 1 s
// steps above).
func roundUp(d time.Duration) time.Duration {
	step := 10 * time.Millisecond
	if d > time.Second {
		step = time.Second
	}
	return (d + step - 1).Truncate(step)
}
