package recordpb

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// ErrFormat is wrapped by every error about a message whose columns do not
// fit together or hold values out of range.
var ErrFormat = errors.New("records: malformed batch")

// FromDevice converts a device identity.
func FromDevice(d *record.Device) *Device {
	return &Device{Index: uint32(d.Index), Uuid: d.UUID, Name: d.Name, PciBusId: d.PCIBusID, Serial: d.Serial,
		MemoryTotalMib: d.MemoryTotalMiB, DriverVersion: d.DriverVersion, CudaVersion: d.CUDAVersion, VbiosVersion: d.VBIOSVersion,
		Backend: d.Backend, Simulated: d.Simulated,
		SlowdownTempC: d.SlowdownTempC, ShutdownTempC: d.ShutdownTempC, MaxOperatingTempC: d.MaxOperatingTempC,
		MemoryMaxTempC: d.MemoryMaxTempC, Generation: d.Generation, Mig: d.MIG, Parent: uint32(d.Parent),
		GpuInstanceId: uint32(d.GPUInstanceID), ComputeInstanceId: uint32(d.ComputeInstanceID), MigProfile: d.MIGProfile,
		Pod: d.Pod, Namespace: d.Namespace, Container: d.Container, HpcJob: d.HPCJob,
		PersistenceMode: d.PersistenceMode, EccMode: d.ECCMode, MigMode: d.MIGMode,
		Architecture: d.Architecture, ComputeMode: d.ComputeMode}
}

// ToSampler converts the identity back.
func (d *Device) ToSampler() record.Device {
	return record.Device{Index: int(d.GetIndex()), UUID: d.GetUuid(), Name: d.GetName(), PCIBusID: d.GetPciBusId(),
		Serial: d.GetSerial(), MemoryTotalMiB: d.GetMemoryTotalMib(), DriverVersion: d.GetDriverVersion(),
		CUDAVersion: d.GetCudaVersion(), VBIOSVersion: d.GetVbiosVersion(),
		Backend: d.GetBackend(), Simulated: d.GetSimulated(), SlowdownTempC: d.GetSlowdownTempC(),
		ShutdownTempC: d.GetShutdownTempC(), MaxOperatingTempC: d.GetMaxOperatingTempC(),
		MemoryMaxTempC: d.GetMemoryMaxTempC(), Generation: d.GetGeneration(), MIG: d.GetMig(), Parent: int(d.GetParent()),
		GPUInstanceID: int(d.GetGpuInstanceId()), ComputeInstanceID: int(d.GetComputeInstanceId()), MIGProfile: d.GetMigProfile(),
		Attribution:     record.Attribution{Pod: d.GetPod(), Namespace: d.GetNamespace(), Container: d.GetContainer(), HPCJob: d.GetHpcJob()},
		PersistenceMode: d.GetPersistenceMode(), ECCMode: d.GetEccMode(), MIGMode: d.GetMigMode(),
		Architecture: d.GetArchitecture(), ComputeMode: d.GetComputeMode()}
}

// FromEvent converts an event (attributes and fields are copied).
func FromEvent(e *record.Event) *Event {
	p := &Event{Kind: string(e.Kind), Device: int32(e.Device), StartNs: e.StartNS, EndNs: e.EndNS, Message: e.Message}
	if len(e.Attrs) > 0 {
		p.Attrs = make([]*Attr, len(e.Attrs))
		for i, a := range e.Attrs {
			p.Attrs[i] = &Attr{Key: a.Key, Value: a.Value}
		}
	}
	p.Fields = FromFields(e.Fields)
	return p
}

// ToSampler converts the event back.
func (e *Event) ToSampler() record.Event {
	ev := record.Event{Kind: record.EventKind(e.GetKind()), Device: int(e.GetDevice()), StartNS: e.GetStartNs(),
		EndNS: e.GetEndNs(), Message: e.GetMessage()}
	for _, a := range e.GetAttrs() {
		ev.Attrs = append(ev.Attrs, record.Attr{Key: a.GetKey(), Value: a.GetValue()})
	}
	ev.Fields = ToFields(e.GetFields())
	return ev
}

// FromFields converts numeric fields (nil for none).
func FromFields(fs []record.Field) []*Field {
	if len(fs) == 0 {
		return nil
	}
	out := make([]*Field, len(fs))
	for i, f := range fs {
		out[i] = &Field{Key: f.Key, Value: f.Value, IsInt: f.Int, IsGauge: f.Gauge}
	}
	return out
}

// ToFields converts numeric fields back (nil for none).
func ToFields(fs []*Field) []record.Field {
	var out []record.Field
	for _, f := range fs {
		out = append(out, record.Field{Key: f.GetKey(), Value: f.GetValue(), Int: f.GetIsInt(), Gauge: f.GetIsGauge()})
	}
	return out
}

// Fill sets c's columns from s, reusing c's slices. With delta the
// timestamps go in TimeDeltaNs (compact) and TimeNs is empty; otherwise the
// reverse.
func (c *SampleColumns) Fill(s []record.Sample, delta bool) {
	n := len(s)
	c.Value, c.Device, c.Metric, c.Flags = resize(c.Value, n), resize(c.Device, n), resize(c.Metric, n), resize(c.Flags, n)
	if delta {
		c.TimeNs, c.TimeDeltaNs = c.TimeNs[:0], resize(c.TimeDeltaNs, n)
		var prev int64
		for i := range s {
			c.TimeDeltaNs[i] = s[i].TimeNS - prev
			prev = s[i].TimeNS
		}
	} else {
		c.TimeDeltaNs, c.TimeNs = c.TimeDeltaNs[:0], resize(c.TimeNs, n)
		for i := range s {
			c.TimeNs[i] = s[i].TimeNS
		}
	}
	for i := range s {
		x := &s[i]
		c.Value[i], c.Device[i], c.Metric[i], c.Flags[i] = x.Value, uint32(x.Device), uint32(x.Metric), uint32(x.Flags)
	}
}

// AppendTo appends c's samples to dst. The columns must have one length
// (flags may be empty: all 0) and exactly one of TimeNs and TimeDeltaNs
// may be set (both empty for no samples); device, metric and flags must
// fit 16 bits.
func (c *SampleColumns) AppendTo(dst []record.Sample) ([]record.Sample, error) {
	if c == nil {
		return dst, nil
	}
	times, delta := c.TimeNs, false
	if len(c.TimeDeltaNs) > 0 {
		if len(c.TimeNs) > 0 {
			return dst, fmt.Errorf("%w: samples: both time_ns and time_delta_ns are set", ErrFormat)
		}
		times, delta = c.TimeDeltaNs, true
	}
	n := len(times)
	if len(c.Value) != n || len(c.Device) != n || len(c.Metric) != n || (len(c.Flags) != n && len(c.Flags) != 0) {
		return dst, fmt.Errorf("%w: samples: columns differ in length (time %d, value %d, device %d, metric %d, flags %d)",
			ErrFormat, n, len(c.Value), len(c.Device), len(c.Metric), len(c.Flags))
	}
	base := len(dst)
	dst = slices.Grow(dst, n)[:base+n]
	var t int64
	for i := range n {
		if delta {
			t += times[i]
		} else {
			t = times[i]
		}
		var flags uint32
		if len(c.Flags) == n {
			flags = c.Flags[i]
		}
		if c.Device[i] > math.MaxUint16 || c.Metric[i] > math.MaxUint16 || flags > math.MaxUint16 {
			return dst[:base], fmt.Errorf("%w: sample %d: device %d, metric %d or flags %d out of range (max 65535)",
				ErrFormat, i, c.Device[i], c.Metric[i], flags)
		}
		dst[base+i] = record.Sample{TimeNS: t, Value: c.Value[i], Device: uint16(c.Device[i]),
			Metric: catalog.MetricID(c.Metric[i]), Flags: record.Flags(flags)}
	}
	return dst, nil
}

// FromSummaries converts summaries to columns (nil for none).
func FromSummaries(u []record.Summary) *SummaryColumns {
	m := len(u)
	if m == 0 {
		return nil
	}
	sc := &SummaryColumns{StartNs: make([]int64, m), IntervalNs: make([]int64, m), Mean: make([]float64, m),
		Min: make([]float64, m), Max: make([]float64, m), Last: make([]float64, m), Count: make([]uint32, m),
		Device: make([]uint32, m), Metric: make([]uint32, m)}
	for i, s := range u {
		sc.StartNs[i], sc.IntervalNs[i], sc.Mean[i], sc.Min[i], sc.Max[i], sc.Last[i] = s.StartNS, s.IntervalNS, s.Mean, s.Min, s.Max, s.Last
		sc.Count[i], sc.Device[i], sc.Metric[i] = s.Count, uint32(s.Device), uint32(s.Metric)
	}
	hs := make([]*record.ExpHistogram, m)
	for i := range u {
		hs[i] = u[i].Hist
	}
	sc.hist().put(hs)
	return sc
}

// AppendTo appends c's summaries to dst, checking that the columns agree.
func (c *SummaryColumns) AppendTo(dst []record.Summary) ([]record.Summary, error) {
	if c == nil {
		return dst, nil
	}
	m := len(c.StartNs)
	if len(c.IntervalNs) != m || len(c.Mean) != m || len(c.Min) != m || len(c.Max) != m || len(c.Last) != m ||
		len(c.Count) != m || len(c.Device) != m || len(c.Metric) != m {
		return dst, fmt.Errorf("%w: summaries: columns differ in length", ErrFormat)
	}
	hs, err := c.hist().get(m)
	if err != nil {
		return dst, fmt.Errorf("%w: summaries: %w", ErrFormat, err)
	}
	for i := range m {
		if c.Device[i] > math.MaxUint16 || c.Metric[i] > math.MaxUint16 {
			return dst, fmt.Errorf("%w: summary %d: device %d or metric %d out of range (max 65535)",
				ErrFormat, i, c.Device[i], c.Metric[i])
		}
		s := record.Summary{StartNS: c.StartNs[i], IntervalNS: c.IntervalNs[i], Mean: c.Mean[i],
			Min: c.Min[i], Max: c.Max[i], Last: c.Last[i], Count: c.Count[i], Device: uint16(c.Device[i]),
			Metric: catalog.MetricID(c.Metric[i])}
		if hs != nil {
			s.Hist = hs[i]
		}
		dst = append(dst, s)
	}
	return dst, nil
}

// histColumns are a message's hist_* columns: the exponential
// histograms of n entries (summaries, windows) as parallel arrays, all
// empty when no entry has one.
type histColumns struct {
	scale, posOffset, negOffset  *[]int32
	zeroCount, counts, nonFinite *[]uint64
	posLen, negLen               *[]uint32
}

func (c *SummaryColumns) hist() histColumns {
	return histColumns{&c.HistScale, &c.HistPosOffset, &c.HistNegOffset, &c.HistZeroCount, &c.HistCounts,
		&c.HistNonFinite, &c.HistPosLen, &c.HistNegLen}
}

func (a *AggregateSeries) hist() histColumns {
	return histColumns{&a.HistScale, &a.HistPosOffset, &a.HistNegOffset, &a.HistZeroCount, &a.HistCounts,
		&a.HistNonFinite, &a.HistPosLen, &a.HistNegLen}
}

// put sets the columns of hs (nil: an entry without a histogram); all
// stay empty when none has one, and hist_non_finite when every entry's is 0.
func (h histColumns) put(hs []*record.ExpHistogram) {
	*h.scale, *h.zeroCount, *h.posOffset, *h.posLen, *h.negOffset, *h.negLen = nil, nil, nil, nil, nil, nil
	*h.counts, *h.nonFinite = nil, nil
	if !slices.ContainsFunc(hs, func(x *record.ExpHistogram) bool { return x != nil }) {
		return
	}
	m := len(hs)
	*h.scale, *h.zeroCount = make([]int32, m), make([]uint64, m)
	*h.posOffset, *h.posLen = make([]int32, m), make([]uint32, m)
	*h.negOffset, *h.negLen = make([]int32, m), make([]uint32, m)
	if slices.ContainsFunc(hs, func(x *record.ExpHistogram) bool { return x != nil && x.NonFinite > 0 }) {
		*h.nonFinite = make([]uint64, m)
	}
	for i, x := range hs {
		if x == nil {
			continue
		}
		(*h.scale)[i], (*h.zeroCount)[i] = x.Scale, x.ZeroCount
		(*h.posOffset)[i], (*h.posLen)[i] = x.PositiveOffset, uint32(len(x.Positive))
		(*h.negOffset)[i], (*h.negLen)[i] = x.NegativeOffset, uint32(len(x.Negative))
		*h.counts = append(append(*h.counts, x.Positive...), x.Negative...)
		if *h.nonFinite != nil {
			(*h.nonFinite)[i] = x.NonFinite
		}
	}
}

// The scales an exponential histogram may have (OpenTelemetry's range).
const minHistScale, maxHistScale = -10, 20

// get returns the histograms of m entries (nil when the columns are
// empty; a nil entry for one without), checking that the columns agree.
func (h histColumns) get(m int) ([]*record.ExpHistogram, error) {
	if len(*h.scale) == 0 {
		if len(*h.zeroCount) > 0 || len(*h.posOffset) > 0 || len(*h.posLen) > 0 || len(*h.negOffset) > 0 ||
			len(*h.negLen) > 0 || len(*h.counts) > 0 || len(*h.nonFinite) > 0 {
			return nil, errors.New("histogram columns without hist_scale")
		}
		return nil, nil
	}
	if len(*h.scale) != m || len(*h.zeroCount) != m || len(*h.posOffset) != m || len(*h.posLen) != m ||
		len(*h.negOffset) != m || len(*h.negLen) != m || len(*h.nonFinite) != 0 && len(*h.nonFinite) != m {
		return nil, errors.New("histogram columns differ in length")
	}
	hs := make([]*record.ExpHistogram, m)
	counts := *h.counts
	for i := range m {
		var nonFinite uint64
		if len(*h.nonFinite) > 0 {
			nonFinite = (*h.nonFinite)[i]
		}
		np, nn := uint64((*h.posLen)[i]), uint64((*h.negLen)[i])
		if (*h.zeroCount)[i] == 0 && np == 0 && nn == 0 && nonFinite == 0 {
			continue
		}
		if np+nn > uint64(len(counts)) {
			return nil, fmt.Errorf("entry %d: hist_pos_len %d + hist_neg_len %d past hist_counts", i, np, nn)
		}
		// No writer makes these; binning further values into them (a
		// window taken up from a journal) would overflow bucket indexes.
		if sc := (*h.scale)[i]; sc < minHistScale || sc > maxHistScale {
			return nil, fmt.Errorf("entry %d: hist_scale %d outside [%d, %d]", i, sc, minHistScale, maxHistScale)
		}
		if int64((*h.posOffset)[i])+int64(np) > math.MaxInt32+1 || int64((*h.negOffset)[i])+int64(nn) > math.MaxInt32+1 {
			return nil, fmt.Errorf("entry %d: bucket indexes past %d", i, math.MaxInt32)
		}
		x := &record.ExpHistogram{Scale: (*h.scale)[i], ZeroCount: (*h.zeroCount)[i],
			PositiveOffset: (*h.posOffset)[i], NegativeOffset: (*h.negOffset)[i], NonFinite: nonFinite}
		if np > 0 {
			x.Positive = slices.Clone(counts[:np])
		}
		if nn > 0 {
			x.Negative = slices.Clone(counts[np : np+nn])
		}
		counts = counts[np+nn:]
		hs[i] = x
	}
	if len(counts) > 0 {
		return nil, fmt.Errorf("%d hist_counts past the last entry's buckets", len(counts))
	}
	return hs, nil
}

// SetHists sets the series' hist_* columns from the histograms of its
// windows (nil: a window without one), one a window.
func (a *AggregateSeries) SetHists(hs []*record.ExpHistogram) { a.hist().put(hs) }

// Hists returns the histograms of the series' windows (a nil entry for a
// window without one), or nil when the columns are empty (a journal
// written before they were kept, or no window with one), checking that
// the columns agree with the windows' start_ns.
func (a *AggregateSeries) Hists() ([]*record.ExpHistogram, error) {
	hs, err := a.hist().get(len(a.GetStartNs()))
	if err != nil {
		return nil, fmt.Errorf("%w: aggregate series: %w", ErrFormat, err)
	}
	return hs, nil
}

// FillBatch sets p's record fields (seq, devices, samples, events,
// summaries) from b, reusing p's slices; host, tags and device_uuids are
// left to the caller. delta selects the samples' time form (see Fill).
func FillBatch(p *Batch, b *record.Batch, delta bool) {
	p.Seq = b.Seq
	clear(p.Devices)
	p.Devices = p.Devices[:0]
	for i := range b.Devices {
		p.Devices = append(p.Devices, FromDevice(&b.Devices[i]))
	}
	if p.Samples == nil {
		p.Samples = &SampleColumns{}
	}
	p.Samples.Fill(b.Samples, delta)
	clear(p.Events)
	p.Events = p.Events[:0]
	for i := range b.Events {
		p.Events = append(p.Events, FromEvent(&b.Events[i]))
	}
	p.Summaries = FromSummaries(b.Summaries)
}

// ToBatch fills b (reset first; its capacity is reused) from p's record
// fields.
func ToBatch(p *Batch, b *record.Batch) error {
	return toBatch(p.GetSeq(), p.GetDevices(), p.GetSamples(), p.GetEvents(), p.GetSummaries(), b)
}

// ToBatchParts is ToBatch for a message that holds a batch's fields
// without being a Batch (the plugin protocol's WriteRequest).
func ToBatchParts(seq uint64, devs []*Device, s *SampleColumns, evs []*Event, u *SummaryColumns, b *record.Batch) error {
	return toBatch(seq, devs, s, evs, u, b)
}

func toBatch(seq uint64, devs []*Device, s *SampleColumns, evs []*Event, u *SummaryColumns, b *record.Batch) error {
	b.Reset()
	b.Seq = seq
	for _, d := range devs {
		b.Devices = append(b.Devices, d.ToSampler())
	}
	var err error
	if b.Samples, err = s.AppendTo(b.Samples); err != nil {
		b.Reset()
		return err
	}
	for _, e := range evs {
		b.Events = append(b.Events, e.ToSampler())
	}
	if b.Summaries, err = u.AppendTo(b.Summaries); err != nil {
		b.Reset()
		return err
	}
	return nil
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// marshal is deterministic so that equal batches encode to equal bytes.
var marshal = proto.MarshalOptions{Deterministic: true}

// OriginOf returns the origin a message's host and tags name (Batch,
// BufferSegment, the plugin protocol's WriteRequest), nil when host is
// empty (none recorded). The result shares tags.
func OriginOf(host string, tags map[string]string) *record.Origin {
	if host == "" {
		return nil
	}
	return &record.Origin{Host: host, Tags: tags}
}

// OriginFields returns o's host and tags for a message's host and tags
// fields ("" and nil for nil; the tags are shared).
func OriginFields(o *record.Origin) (string, map[string]string) {
	if o == nil {
		return "", nil
	}
	return o.Host, o.Tags
}

// AppendBatch appends the protobuf encoding of b (a Batch holding its
// records, timestamps in the compact delta form, and b.Origin in host and
// tags when set) to dst and returns the extended slice. m is scratch space
// reused between calls (one goroutine at a time); b is not retained. It is
// the one encoding of a batch that the buffers store; DecodeBatch reverses
// it.
func AppendBatch(dst []byte, m *Batch, b *record.Batch) ([]byte, error) {
	FillBatch(m, b, true)
	m.DeviceUuids = nil
	m.Host, m.Tags = OriginFields(b.Origin)
	out, err := marshal.MarshalAppend(dst, m)
	if err != nil {
		return dst, fmt.Errorf("records: encode batch: %w", err)
	}
	return out, nil
}

// DecodeBatch decodes an encoded Batch into b (reset first; its capacity is
// reused; b.Origin from host and tags, see OriginOf), with m as scratch
// space. b shares nothing with data. An error wraps ErrFormat.
func DecodeBatch(data []byte, m *Batch, b *record.Batch) error {
	m.Reset()
	if err := proto.Unmarshal(data, m); err != nil {
		b.Reset()
		return fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if err := ToBatch(m, b); err != nil {
		return err
	}
	b.Origin = OriginOf(m.GetHost(), m.GetTags())
	return nil
}

// MetricNames returns c's metric names by wire ID: element i names metric
// ID i+1 (BufferSegment.metric_names).
func MetricNames(c *catalog.Catalog) []string {
	all := c.All()
	names := make([]string, len(all))
	for i := range all {
		names[i] = all[i].Name
	}
	return names
}

// MetricMap maps the metric IDs of a writer whose catalog had names (by
// wire ID, as MetricNames returns them) onto c's IDs. The result is indexed
// by the writer's ID; 0 marks an ID that c does not know (its records
// cannot be relabelled and must be dropped). identity is true when every
// name maps onto its own ID (an unchanged catalog, or one that only gained
// metrics at its end): then nothing needs rewriting.
func MetricMap(names []string, c *catalog.Catalog) (m []catalog.MetricID, identity bool) {
	m = make([]catalog.MetricID, len(names)+1)
	identity = true
	for i, n := range names {
		if mt, ok := c.Lookup(n); ok {
			m[i+1] = mt.ID
		}
		if m[i+1] != catalog.MetricID(i+1) {
			identity = false
		}
	}
	return m, identity
}
