package opentelemetry

import (
	"maps"
	"math"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Names of what is not a catalog metric.
const (
	// EventMetric carries every event but self-metrics and processes: one
	// int gauge point of value 1 per event at its start.
	EventMetric = catalog.OTelNamespace + "event"
	// SelfPrefix + a self-metric field's key names its gauge.
	SelfPrefix = catalog.OTelNamespace + "self."
	// ProcessPrefix + a process field's key names its gauge.
	ProcessPrefix = catalog.OTelNamespace + "process."
	// ScopeName is the instrumentation scope of every metric.
	ScopeName = "gpusampler"
	// ServiceName is the service.name resource attribute.
	ServiceName = "gpusampler"
	// Vendor is the hw.vendor of every GPU.
	Vendor = "NVIDIA"
)

// Resource attributes of a device's attribution. No OpenTelemetry
// convention names a Slurm job: it goes in our namespace.
var attributionKeys = [4]string{"k8s.pod.name", "k8s.namespace.name", "k8s.container.name", catalog.OTelNamespace + "hpc_job"}

// seriesKey names one counter series.
type seriesKey struct {
	dev    uint16
	metric catalog.MetricID
}

// counterState is what the encoder keeps of a counter series for its start
// time: the stream's start and the last value and time sent.
type counterState struct {
	start, lastT int64
	last         float64
}

// deviceInfo is a device's identity as the encoder uses it.
type deviceInfo struct {
	attrs []*commonpb.KeyValue // point attributes
	attr  record.Attribution
	// series caches the point attributes of the device's series: index
	// 2×MetricID (+1 for a point read), filled on first use.
	series []seriesAttrs
}

// seriesAttrs are a series' point attributes, and the same already in wire
// form (NumberDataPoint field 7, each attribute one record).
type seriesAttrs struct {
	attrs []*commonpb.KeyValue
	raw   protoreflect.RawFields
}

// seriesAttrs returns the point attributes of metric id's samples on the
// device (a point read's with pointRead), made once per identity and
// shared by every point of the series.
func (e *encoder) seriesAttrs(d *deviceInfo, id catalog.MetricID, pointRead bool) *seriesAttrs {
	i := 2 * int(id)
	if pointRead {
		i++
	}
	if d.series == nil {
		d.series = make([]seriesAttrs, 2*len(e.names))
	}
	sa := &d.series[i]
	if sa.attrs != nil {
		return sa
	}
	var extra []*commonpb.KeyValue
	if pointRead {
		extra = []*commonpb.KeyValue{e.pointRead}
	}
	sa.attrs = pointAttrs(d.attrs, e.nameAttrs[id], extra)
	for _, kv := range sa.attrs {
		b, err := proto.Marshal(kv)
		if err != nil { // strings, ints and bools: cannot fail
			sa.raw = nil
			break
		}
		sa.raw = protowire.AppendTag(sa.raw, numberPointAttributes, protowire.BytesType)
		sa.raw = protowire.AppendBytes(sa.raw, b)
	}
	return sa
}

// NumberDataPoint's field numbers that setNumber writes in wire form.
const (
	numberPointAttributes = 7
	numberPointAsDouble   = 4
	numberPointAsInt      = 6
)

// setNumber sets a number point's attributes and value (number's). With
// rawAttrs both go in wire form, as the point's unknown fields: the
// protobuf runtime marshals a point's plain fields (start and time; the
// exemplars and flags are never set), then its attributes, then the value
// oneof, and the unknown fields after all of them, so attributes then
// value as unknown fields are the same bytes — without marshalling some
// fourteen KeyValue messages a point. TestEncoderReuseSameBytes holds the
// bytes to those of the plain fields.
func (e *encoder) setNumber(p *metricspb.NumberDataPoint, sa *seriesAttrs, t catalog.ValueType, v float64) {
	if !e.rawAttrs || sa.raw == nil {
		p.Attributes = sa.attrs
		e.number(p, t, v)
		return
	}
	b := e.raw.take(len(sa.raw) + 9)
	b = append(b, sa.raw...)
	if t == catalog.Int && !math.IsNaN(v) && !math.IsInf(v, 0) {
		b = protowire.AppendTag(b, numberPointAsInt, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, uint64(int64(math.Round(v))))
	} else {
		b = protowire.AppendTag(b, numberPointAsDouble, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v))
	}
	p.ProtoReflect().SetUnknown(b)
}

// byteArena hands out byte slices from chunks kept across encodes.
type byteArena struct {
	chunks [][]byte
	c      int // the chunk in use
}

// take returns an empty slice with capacity n (appending up to n bytes
// touches nothing else).
func (a *byteArena) take(n int) []byte {
	for {
		if a.c == len(a.chunks) {
			a.chunks = append(a.chunks, make([]byte, 0, max(64<<10, n)))
		}
		ch := a.chunks[a.c]
		if cap(ch)-len(ch) >= n {
			a.chunks[a.c] = ch[:len(ch)+n]
			return ch[len(ch) : len(ch) : len(ch)+n]
		}
		a.c++
	}
}

func (a *byteArena) reset() {
	for i := range a.chunks {
		a.chunks[i] = a.chunks[i][:0]
	}
	a.c = 0
	if len(a.chunks) > maxArenaChunks {
		clear(a.chunks[maxArenaChunks:])
		a.chunks = a.chunks[:maxArenaChunks]
	}
}

// encoder turns batches into one OTLP MetricsData (wire-identical to an
// ExportMetricsServiceRequest). It remembers device identities (they come
// once) and the counters' start times. Not safe for concurrent use.
type encoder struct {
	cat       *catalog.Catalog
	names     []catalog.OTelNaming // by MetricID
	nameAttrs [][]*commonpb.KeyValue
	baseRes   []*commonpb.KeyValue
	// opts built baseRes; origin is the Origin of the batch being encoded
	// when baseRes holds its host and tags (a copy; nil for opts').
	opts      *Options
	origin    *record.Origin
	scope     *commonpb.InstrumentationScope
	start     int64 // the output's start (ns): the earliest counter start
	pointRead *commonpb.KeyValue

	devices map[int]*deviceInfo
	uuids   map[int]string // device index → UUID (MIG parents)
	// series is the committed counter state; pending what the last encode
	// changed (committed once the sink took or refused the batch, so that a
	// batch offered again is encoded the same way).
	series, pending map[seriesKey]counterState

	// The request tree is kept from one encode to the next (its
	// resources, metrics and point slices reused, the points taken from
	// arenas) so that encoding a sample allocates nothing once the
	// encoder has seen a batch of its size: a request is marshalled before
	// the next encode and never retained.
	res   map[record.Attribution]*resBuild
	order []record.Attribution // the resources of this encode, in order
	gen   uint64               // counts encodes: marks what this one used
	req   metricspb.MetricsData

	nums    arena[metricspb.NumberDataPoint]
	doubles arena[metricspb.NumberDataPoint_AsDouble]
	ints    arena[metricspb.NumberDataPoint_AsInt]
	exps    arena[metricspb.ExponentialHistogramDataPoint]
	buckets arena[metricspb.ExponentialHistogramDataPoint_Buckets]
	floats  arena[float64]
	raw     byteArena

	points int
	// rawAttrs: sample points carry their attributes in wire form
	// (setNumber); off only in tests, for the reference encoding.
	rawAttrs bool
}

// maxCachedResources bounds the resources kept between encodes: past it,
// those the last encode did not use are dropped (attributions come and go
// with jobs).
const maxCachedResources = 64

type resBuild struct {
	rm      *metricspb.ResourceMetrics
	metrics map[metricKey]*metricBuild
	gen     uint64 // the encode that last used it
}

// metricKey names a metric of a resource: one per name and point shape.
type metricKey struct {
	name string
	sh   shape
}

type metricBuild struct {
	m   *metricspb.Metric
	gen uint64 // the encode that last used it
}

// arenaChunk is the number of values of an arena's chunk.
const arenaChunk = 512

// maxArenaChunks bounds the chunks an arena keeps between encodes.
const maxArenaChunks = 32

// arena hands out zeroed values from chunks kept across encodes: reset
// makes them all free again (nothing handed out may be used after).
type arena[T any] struct {
	chunks [][]T
	n      int
}

func (a *arena[T]) new() *T {
	c, i := a.n/arenaChunk, a.n%arenaChunk
	if c == len(a.chunks) {
		a.chunks = append(a.chunks, make([]T, arenaChunk))
	}
	a.n++
	p := &a.chunks[c][i]
	var zero T
	*p = zero
	return p
}

func (a *arena[T]) reset() {
	a.n = 0
	if len(a.chunks) > maxArenaChunks {
		clear(a.chunks[maxArenaChunks:])
		a.chunks = a.chunks[:maxArenaChunks]
	}
}

func newEncoder(opts *Options, startNS int64) *encoder {
	cat := opts.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	e := &encoder{cat: cat, start: startNS, devices: map[int]*deviceInfo{}, uuids: map[int]string{},
		series: map[seriesKey]counterState{}, pending: map[seriesKey]counterState{}, res: map[record.Attribution]*resBuild{},
		scope:     &commonpb.InstrumentationScope{Name: ScopeName, Version: opts.Version},
		pointRead: kvBool(catalog.OTelNamespace+"point_read", true), rawAttrs: true}
	e.names = make([]catalog.OTelNaming, cat.Len())
	e.nameAttrs = make([][]*commonpb.KeyValue, cat.Len())
	for _, m := range cat.All() {
		n := m.OTel()
		e.names[m.ID] = n
		for _, a := range n.Attrs {
			e.nameAttrs[m.ID] = append(e.nameAttrs[m.ID], kvString(a[0], a[1]))
		}
	}
	e.opts = opts
	e.baseRes = e.resourceAttrs(opts.Host, opts.GlobalTags)
	return e
}

// resourceAttrs returns the attributes every resource starts with, for a
// host name and global tags.
func (e *encoder) resourceAttrs(host string, tags map[string]string) []*commonpb.KeyValue {
	res := []*commonpb.KeyValue{kvString("service.name", ServiceName)}
	if e.opts.Version != "" {
		res = append(res, kvString("service.version", e.opts.Version))
	}
	if host != "" {
		res = append(res, kvString("host.name", host))
	}
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		res = append(res, kvString(k, tags[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(e.opts.ResourceAttributes)) {
		res = append(res, kvString(k, e.opts.ResourceAttributes[k]))
	}
	return res
}

// useOrigin makes resources carry o's host name and global tags (a
// replayed backlog sampled under another identity), Options' for nil.
func (e *encoder) useOrigin(o *record.Origin) {
	if o.Equal(e.origin) {
		return
	}
	e.origin = nil
	if o != nil {
		e.origin = &record.Origin{Host: o.Host, Tags: maps.Clone(o.Tags)}
	}
	e.baseRes = e.resourceAttrs(e.origin.OriginOr(e.opts.Host, e.opts.GlobalTags))
	clear(e.res) // their attributes start with the old baseRes
}

func kvString(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func kvInt(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func kvBool(k string, v bool) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}

// deviceAttrs returns the point attributes of a device identity: the
// OpenTelemetry hardware conventions' hw.*, and ours.
func deviceAttrs(d *record.Device, parentUUID string) []*commonpb.KeyValue {
	a := []*commonpb.KeyValue{kvString("hw.type", "gpu"), kvString("hw.id", d.UUID), kvString("hw.name", d.DisplayName()),
		kvString("hw.vendor", Vendor)}
	opt := func(k, v string) {
		if v != "" {
			a = append(a, kvString(k, v))
		}
	}
	opt("hw.model", d.Name)
	opt("hw.driver_version", d.DriverVersion)
	opt("hw.firmware_version", d.VBIOSVersion)
	opt("hw.serial_number", d.Serial)
	a = append(a, kvInt(catalog.OTelNamespace+"gpu.index", int64(d.Index)))
	opt(catalog.OTelNamespace+"gpu.pci_bus_id", d.PCIBusID)
	if d.Simulated {
		a = append(a, kvBool(catalog.OTelNamespace+"simulated", true))
	}
	if d.MIG {
		opt("hw.parent", parentUUID)
		opt(catalog.OTelNamespace+"mig.profile", d.MIGProfile)
		a = append(a, kvInt(catalog.OTelNamespace+"mig.gpu_instance_id", int64(d.GPUInstanceID)),
			kvInt(catalog.OTelNamespace+"mig.compute_instance_id", int64(d.ComputeInstanceID)))
	}
	return a
}

// setDevices takes the batch's identities.
func (e *encoder) setDevices(devs []record.Device) {
	if len(devs) == 0 {
		return
	}
	for i := range devs {
		e.uuids[devs[i].Index] = devs[i].UUID
	}
	for i := range devs {
		d := &devs[i]
		e.devices[d.Index] = &deviceInfo{attrs: deviceAttrs(d, e.uuids[d.Parent]), attr: d.Attribution}
	}
}

// device returns the identity of device index (a stand-in with the index
// alone when its identity never came).
func (e *encoder) device(index int) *deviceInfo {
	if d, ok := e.devices[index]; ok {
		return d
	}
	d := &deviceInfo{attrs: []*commonpb.KeyValue{kvString("hw.type", "gpu"), kvInt(catalog.OTelNamespace+"gpu.index", int64(index))}}
	e.devices[index] = d
	return d
}

// resource returns the resource of attribution a in this encode (the
// next in order when it is new to it), creating it.
func (e *encoder) resource(a record.Attribution) *resBuild {
	r, ok := e.res[a]
	if !ok {
		attrs := slices.Clone(e.baseRes)
		for i, v := range a.Values() {
			if v != "" {
				attrs = append(attrs, kvString(attributionKeys[i], v))
			}
		}
		r = &resBuild{rm: &metricspb.ResourceMetrics{Resource: &resourcepb.Resource{Attributes: attrs},
			ScopeMetrics: []*metricspb.ScopeMetrics{{Scope: e.scope}}}, metrics: map[metricKey]*metricBuild{}}
		e.res[a] = r
	}
	if r.gen != e.gen {
		r.gen = e.gen
		sm := r.rm.ScopeMetrics[0]
		clear(sm.Metrics)
		sm.Metrics = sm.Metrics[:0]
		e.order = append(e.order, a)
	}
	return r
}

// shape is the data a metric holds: number points, or a window summary's
// histogram points.
type shape uint8

const (
	// numberShape: the instrument's Gauge or Sum points.
	numberShape shape = iota
	// histShape: explicit Histogram points (a window without buckets).
	histShape
	// expHistShape: ExponentialHistogram points.
	expHistShape
)

// metric returns the resource's metric named name, creating it with the
// data of kind in and shape sh (its temporality for sums and histograms);
// first used in this encode, it is the resource's next metric, without
// points.
func (r *resBuild) metric(name, unit string, in catalog.Instrument, sh shape) *metricspb.Metric {
	key := metricKey{name, sh}
	if mb, ok := r.metrics[key]; ok {
		if mb.gen != r.gen {
			mb.gen = r.gen
			clearPoints(mb.m)
			sm := r.rm.ScopeMetrics[0]
			sm.Metrics = append(sm.Metrics, mb.m)
		}
		return mb.m
	}
	m := &metricspb.Metric{Name: name, Unit: unit}
	switch {
	case sh == expHistShape:
		m.Data = &metricspb.Metric_ExponentialHistogram{ExponentialHistogram: &metricspb.ExponentialHistogram{
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA}}
	case sh == histShape:
		m.Data = &metricspb.Metric_Histogram{Histogram: &metricspb.Histogram{
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA}}
	case in == catalog.OTelCounter || in == catalog.OTelUpDownCounter:
		m.Data = &metricspb.Metric_Sum{Sum: &metricspb.Sum{IsMonotonic: in == catalog.OTelCounter,
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE}}
	default:
		m.Data = &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{}}
	}
	sm := r.rm.ScopeMetrics[0]
	sm.Metrics = append(sm.Metrics, m)
	r.metrics[key] = &metricBuild{m: m, gen: r.gen}
	return m
}

// clearPoints empties a metric's points, keeping the slice's capacity.
func clearPoints(m *metricspb.Metric) {
	switch d := m.Data.(type) {
	case *metricspb.Metric_Gauge:
		clear(d.Gauge.DataPoints)
		d.Gauge.DataPoints = d.Gauge.DataPoints[:0]
	case *metricspb.Metric_Sum:
		clear(d.Sum.DataPoints)
		d.Sum.DataPoints = d.Sum.DataPoints[:0]
	case *metricspb.Metric_Histogram:
		clear(d.Histogram.DataPoints)
		d.Histogram.DataPoints = d.Histogram.DataPoints[:0]
	case *metricspb.Metric_ExponentialHistogram:
		clear(d.ExponentialHistogram.DataPoints)
		d.ExponentialHistogram.DataPoints = d.ExponentialHistogram.DataPoints[:0]
	}
}

func addNumber(m *metricspb.Metric, p *metricspb.NumberDataPoint) {
	switch d := m.Data.(type) {
	case *metricspb.Metric_Gauge:
		d.Gauge.DataPoints = append(d.Gauge.DataPoints, p)
	case *metricspb.Metric_Sum:
		d.Sum.DataPoints = append(d.Sum.DataPoints, p)
	}
}

func number(p *metricspb.NumberDataPoint, t catalog.ValueType, v float64) {
	if t == catalog.Int && !math.IsNaN(v) && !math.IsInf(v, 0) {
		p.Value = &metricspb.NumberDataPoint_AsInt{AsInt: int64(math.Round(v))}
		return
	}
	p.Value = &metricspb.NumberDataPoint_AsDouble{AsDouble: v}
}

// newNumber returns a zeroed point from the encoder's arena.
func (e *encoder) newNumber() *metricspb.NumberDataPoint { return e.nums.new() }

// number is the package's number with the value from the encoder's arenas.
func (e *encoder) number(p *metricspb.NumberDataPoint, t catalog.ValueType, v float64) {
	if t == catalog.Int && !math.IsNaN(v) && !math.IsInf(v, 0) {
		x := e.ints.new()
		x.AsInt = int64(math.Round(v))
		p.Value = x
		return
	}
	x := e.doubles.new()
	x.AsDouble = v
	p.Value = x
}

// float returns a pointer to v from the encoder's arena.
func (e *encoder) float(v float64) *float64 {
	p := e.floats.new()
	*p = v
	return p
}

// pointAttrs joins a device's attributes and a metric's own.
func pointAttrs(dev []*commonpb.KeyValue, extra ...[]*commonpb.KeyValue) []*commonpb.KeyValue {
	n := len(dev)
	for _, x := range extra {
		n += len(x)
	}
	if n == len(dev) {
		return dev
	}
	out := make([]*commonpb.KeyValue, 0, n)
	out = append(out, dev...)
	for _, x := range extra {
		out = append(out, x...)
	}
	return out
}

// counterStart returns the start time of a counter series' point at t with
// value v, noting the series' new state in pending: the output's start or
// the series' first time, whichever is earlier; after a decrease of a
// monotonic sum (the counter was reset) the time of the series' last point
// before it. A non-monotonic sum (UpDownCounter) may go down: its stream
// keeps its start.
func (e *encoder) counterStart(k seriesKey, t int64, v float64, monotonic bool) int64 {
	st, ok := e.pending[k]
	if !ok {
		st, ok = e.series[k]
	}
	switch {
	case !ok:
		st.start = min(e.start, t)
	case monotonic && v < st.last:
		st.start = st.lastT
	}
	if st.start > t {
		st.start = t
	}
	st.last, st.lastT = v, t
	e.pending[k] = st
	return st.start
}

// commit keeps the counter state of the last encode (the sink took its
// batch, or refused it for good).
func (e *encoder) commit() {
	maps.Copy(e.series, e.pending)
	clear(e.pending)
}

// discard forgets the counter state of the last encode (its batch will be
// offered again).
func (e *encoder) discard() { clear(e.pending) }

// encode builds the request for a batch's records (its devices already
// taken with setDevices); points is the number of data points. The result
// shares nothing with the records.
//
// The request, and everything in it, is the encoder's: it is valid until
// the next encode, which reuses it.
func (e *encoder) encode(samples []record.Sample, summaries []record.Summary, events []record.Event) (req *metricspb.MetricsData, points int) {
	e.gen++
	e.points = 0
	clear(e.order)
	e.order = e.order[:0]
	e.nums.reset()
	e.doubles.reset()
	e.ints.reset()
	e.exps.reset()
	e.buckets.reset()
	e.floats.reset()
	e.raw.reset()
	res := e.resource
	for i := range samples {
		s := &samples[i]
		if int(s.Metric) >= len(e.names) || s.Metric == 0 {
			continue // not in the catalog: nothing names it (the pump counts none such)
		}
		n := &e.names[s.Metric]
		dev := e.device(int(s.Device))
		v := s.Value * n.Scale
		p := e.newNumber()
		p.TimeUnixNano = uint64(s.TimeNS)
		if n.Instrument != catalog.OTelGauge {
			p.StartTimeUnixNano = uint64(e.counterStart(seriesKey{s.Device, s.Metric}, s.TimeNS, v, n.Instrument == catalog.OTelCounter))
		}
		e.setNumber(p, e.seriesAttrs(dev, s.Metric, s.Flags&record.FlagPointRead != 0), n.Type, v)
		addNumber(res(dev.attr).metric(n.Name, n.Unit, n.Instrument, numberShape), p)
		e.points++
	}
	for i := range summaries {
		e.summary(&summaries[i], res)
	}
	for i := range events {
		e.event(&events[i], res)
	}
	clear(e.req.ResourceMetrics)
	e.req.ResourceMetrics = e.req.ResourceMetrics[:0]
	for _, a := range e.order {
		e.req.ResourceMetrics = append(e.req.ResourceMetrics, e.res[a].rm)
	}
	if len(e.res) > maxCachedResources {
		maps.DeleteFunc(e.res, func(_ record.Attribution, r *resBuild) bool { return r.gen != e.gen })
	}
	return &e.req, e.points
}

// summary adds a window summary: a counter's last value as its cumulative
// sum at the window's end, any other metric as an exponential histogram of
// the window's samples (DELTA, start = window start, time = window end), or,
// for a window that carries no distribution (restored from an aggregate
// journal written before journals kept one), an explicit histogram of one
// bucket with the window's count, sum, min and max.
func (e *encoder) summary(s *record.Summary, res func(record.Attribution) *resBuild) {
	if int(s.Metric) >= len(e.names) || s.Metric == 0 || s.Count == 0 {
		return
	}
	n := &e.names[s.Metric]
	dev := e.device(int(s.Device))
	end := s.StartNS + s.IntervalNS
	sa := e.seriesAttrs(dev, s.Metric, false)
	attrs := sa.attrs
	if n.Instrument != catalog.OTelGauge {
		v := s.Last * n.Scale
		p := e.newNumber()
		p.TimeUnixNano = uint64(end)
		p.StartTimeUnixNano = uint64(e.counterStart(seriesKey{s.Device, s.Metric}, end, v, n.Instrument == catalog.OTelCounter))
		e.setNumber(p, sa, n.Type, v)
		addNumber(res(dev.attr).metric(n.Name, n.Unit, n.Instrument, numberShape), p)
		e.points++
		return
	}
	if s.Hist != nil {
		m := res(dev.attr).metric(n.Name, n.Unit, n.Instrument, expHistShape)
		h := m.Data.(*metricspb.Metric_ExponentialHistogram).ExponentialHistogram
		p := e.expHistogramPoint(s, n.Scale)
		p.Attributes = attrs
		h.DataPoints = append(h.DataPoints, p)
		e.points++
		return
	}
	m := res(dev.attr).metric(n.Name, n.Unit, n.Instrument, histShape)
	h := m.Data.(*metricspb.Metric_Histogram).Histogram
	p := histogramPoint(s, n.Scale)
	p.Attributes = attrs
	h.DataPoints = append(h.DataPoints, p)
	e.points++
}

// SummaryHistograms is the kind's choice of window distributions
// (outputs.Kind.SummaryHistograms): every gauge, in its OTel unit (base
// unit × the catalog's OTel Scale), the unit expHistogramPoint sends.
func SummaryHistograms(m catalog.Metric) (scale float64, ok bool) {
	n := m.OTel()
	return n.Scale, n.Instrument == catalog.OTelGauge
}

// expHistogramPoint is a summary's window with its distribution (s.Hist,
// binned in the OTel unit: see SummaryHistograms) as an exponential
// histogram point; sum, min and max are the summary's × scale. Its count
// is its buckets' (the data model's rule): a window's NaN and infinite
// samples (Hist.NonFinite) are in no bucket and not in the count, and as
// the summary's sum, min and max include them, the point then leaves
// those three out (they are optional).
func (e *encoder) expHistogramPoint(s *record.Summary, scale float64) *metricspb.ExponentialHistogramDataPoint {
	lo, hi := s.Min*scale, s.Max*scale
	if scale < 0 {
		lo, hi = hi, lo
	}
	sum := s.Mean * float64(s.Count) * scale
	h := s.Hist
	p := e.exps.new()
	p.StartTimeUnixNano, p.TimeUnixNano = uint64(s.StartNS), uint64(s.StartNS+s.IntervalNS)
	p.Count = h.Count()
	if h.NonFinite == 0 {
		p.Sum, p.Min, p.Max = e.float(sum), e.float(lo), e.float(hi)
	}
	p.Scale, p.ZeroCount = h.Scale, h.ZeroCount
	p.Positive, p.Negative = e.buckets.new(), e.buckets.new()
	p.Positive.Offset, p.Positive.BucketCounts = h.PositiveOffset, h.Positive
	p.Negative.Offset, p.Negative.BucketCounts = h.NegativeOffset, h.Negative
	return p
}

// histogramPoint is a summary's window as a histogram point (values ×
// scale): count, sum, min and max, in one bucket.
func histogramPoint(s *record.Summary, scale float64) *metricspb.HistogramDataPoint {
	lo, hi := s.Min*scale, s.Max*scale
	if scale < 0 {
		lo, hi = hi, lo
	}
	sum := s.Mean * float64(s.Count) * scale
	return &metricspb.HistogramDataPoint{StartTimeUnixNano: uint64(s.StartNS),
		TimeUnixNano: uint64(s.StartNS + s.IntervalNS), Count: uint64(s.Count), Sum: &sum, Min: &lo, Max: &hi,
		BucketCounts: []uint64{uint64(s.Count)}}
}

// event adds an event: self-metrics and processes as gauges of their
// fields, per-job running totals as sums (jobEvent), anything else (a
// job_end record included) as one EventMetric point.
func (e *encoder) event(ev *record.Event, res func(record.Attribution) *resBuild) {
	switch ev.Kind {
	case record.EventJob:
		e.jobEvent(ev, res)
		return
	case record.EventSelf:
		attrs := make([]*commonpb.KeyValue, 0, len(ev.Attrs))
		for _, a := range ev.Attrs {
			attrs = append(attrs, kvString(SelfPrefix+a.Key, a.Value))
		}
		r := res(record.Attribution{})
		for _, f := range ev.Fields {
			p := &metricspb.NumberDataPoint{Attributes: attrs, TimeUnixNano: uint64(ev.StartNS)}
			t := catalog.Float
			if f.Int {
				t = catalog.Int
			}
			number(p, t, f.Value)
			addNumber(r.metric(SelfPrefix+f.Key, "", catalog.OTelGauge, numberShape), p)
			e.points++
		}
		return
	case record.EventProcess:
		dev := e.device(ev.Device)
		attr := dev.attr
		if pa, ok := record.ProcessAttribution(*ev); ok {
			attr = pa
		}
		attrs := slices.Clone(dev.attrs)
		for _, f := range ev.Fields {
			if f.Key == record.ProcessFieldPID {
				attrs = append(attrs, kvInt("process.pid", int64(f.Value)))
			}
		}
		for _, a := range ev.Attrs {
			switch {
			case a.Key == record.ProcessAttrName:
				attrs = append(attrs, kvString("process.executable.name", a.Value))
			case a.Key == record.ProcessAttrCmdline:
				attrs = append(attrs, kvString("process.command_line", a.Value))
			case !record.IsAttributionKey(a.Key):
				attrs = append(attrs, kvString(ProcessPrefix+a.Key, a.Value))
			}
		}
		r := res(attr)
		for _, f := range ev.Fields {
			if f.Key == record.ProcessFieldPID {
				continue
			}
			name, unit, t := processMetric(f)
			p := &metricspb.NumberDataPoint{Attributes: attrs, TimeUnixNano: uint64(ev.StartNS)}
			number(p, t, f.Value)
			addNumber(r.metric(name, unit, catalog.OTelGauge, numberShape), p)
			e.points++
		}
		return
	}
	var attrs []*commonpb.KeyValue
	attr := record.Attribution{}
	if ev.Device >= 0 {
		dev := e.device(ev.Device)
		attrs, attr = slices.Clone(dev.attrs), dev.attr
	}
	attrs = append(attrs, kvString(EventMetric+".kind", string(ev.Kind)))
	if ev.Message != "" {
		attrs = append(attrs, kvString(EventMetric+".message", ev.Message))
	}
	if ev.EndNS != 0 {
		attrs = append(attrs, kvInt(EventMetric+".end_time_unix_nano", ev.EndNS))
	}
	for _, a := range ev.Attrs {
		attrs = append(attrs, kvString(EventMetric+"."+a.Key, a.Value))
	}
	for _, f := range ev.Fields {
		if f.Int {
			attrs = append(attrs, kvInt(EventMetric+"."+f.Key, int64(f.Value)))
		} else {
			attrs = append(attrs, &commonpb.KeyValue{Key: EventMetric + "." + f.Key,
				Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: f.Value}}})
		}
	}
	p := &metricspb.NumberDataPoint{Attributes: attrs, TimeUnixNano: uint64(ev.StartNS), Value: &metricspb.NumberDataPoint_AsInt{AsInt: 1}}
	addNumber(res(attr).metric(EventMetric, "{event}", catalog.OTelGauge, numberShape), p)
	e.points++
}

// processMetric names a process field's gauge.
func processMetric(f record.Field) (name, unit string, t catalog.ValueType) {
	t = catalog.Float
	if f.Int {
		t = catalog.Int
	}
	switch f.Key {
	case record.ProcessFieldUsedMemory:
		return ProcessPrefix + "memory_used", "MiBy", t
	case record.ProcessFieldSMUtil, record.ProcessFieldMemUtil, record.ProcessFieldEncUtil, record.ProcessFieldDecUtil:
		return ProcessPrefix + f.Key, "%", t
	}
	return ProcessPrefix + f.Key, "", t
}
