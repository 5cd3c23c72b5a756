// Package lineproto encodes gpusampler batches as InfluxDB line protocol in
// the shape of Telegraf's nvidia_smi input: measurement nvidia_smi, tags
// host, index, name, pci_bus_id, pstate and uuid, Telegraf's field names and
// types where Telegraf has the field (catalog Telegraf naming), ours where it
// has not. All fields of one device that share a timestamp go on one line.
// Events go to their own measurement (gpusampler_events), self-metrics to
// gpusampler_self, per-process records to nvidia_smi_process.
//
// It is shared by every output that speaks line protocol (stdout, InfluxDB,
// Telegraf, NATS). An Encoder is not safe for concurrent use.
package lineproto

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Measurements.
const (
	Measurement      = "nvidia_smi"
	EventMeasurement = "gpusampler_events"
	SelfMeasurement  = "gpusampler_self"
)

// Tag is one extra tag applied to every line (fleet identity).
type Tag struct{ Key, Value string }

// Options configure an Encoder.
type Options struct {
	// Host is the host tag's value (hostname or its override).
	Host string
	// GlobalTags are added to every line ([global_tags]).
	GlobalTags []Tag
	// Catalog defaults to catalog.Default().
	Catalog *catalog.Catalog
	// DeviceStrings adds to every sample line the device's strings as
	// Telegraf's nvidia_smi input writes them, each where known: tags arch
	// and compute_mode, string fields driver_version, cuda_version, serial,
	// vbios_version and current_ecc ("Enabled" or "Disabled"); and it
	// writes two-state metrics that Telegraf writes as text (catalog
	// TelegrafText: remapped_rows_pending="No") as Telegraf's string field
	// instead of their number. It is the drop-in shape, where every line
	// stands for a whole nvidia-smi query.
	DeviceStrings bool
}

type deviceTags struct {
	dev    record.Device
	pstate int // -1 unknown
	tags   []Tag
	// prefix is "nvidia_smi,TAGS" as the lineprotocol encoder writes it
	// (validated, escaped), prefixErr its error: sample lines copy it
	// instead of re-escaping every tag on every line.
	prefix    []byte
	prefixErr error
	// strFields is the device's string fields, escaped and joined by
	// commas (Options.DeviceStrings), strErr its error.
	strFields []byte
	strErr    error
	// stats are the window statistics the device's sample lines carry
	// (SetStats).
	stats []Stat
}

// Stat is one window statistic of a metric, written on a device's sample
// lines as the field NAME+Suffix (the metric's Influx name, unit and type).
type Stat struct {
	Metric catalog.MetricID
	Suffix string // "_min", "_max": letters, digits and underscores
	Value  float64
}

// SetStats sets the statistics every later sample line of device index
// carries, until the next SetStats (nil: none). Metrics the catalog lacks
// are left out.
func (e *Encoder) SetStats(index int, stats []Stat) {
	dt := e.device(index)
	dt.stats = append(dt.stats[:0], stats...)
}

// fieldKey caches a metric's Influx naming and its escaped field key.
type fieldKey struct {
	done  bool
	known bool // in the catalog
	n     catalog.Naming
	key   []byte // escaped, as the lineprotocol encoder writes it
	err   error  // the key is invalid: lines holding it are skipped
	// text is set for a metric written as Telegraf's string field
	// (Options.DeviceStrings and catalog TelegrafText): key is its escaped
	// name, also the second name's (nil when none).
	text catalog.TextNaming
	also []byte
}

// Encoder turns batches into line protocol. It remembers device identities
// from the batches it sees, so each line carries the device's tags.
type Encoder struct {
	opts Options
	// host and globalTags are what lines carry: opts' own, or the
	// Origin of the batch being encoded (origin, a copy; nil for opts').
	host       string
	globalTags []Tag
	origin     *record.Origin
	enc        lineprotocol.Encoder
	devs       map[int]*deviceTags
	keys       []fieldKey // by MetricID
	// err is the first error of the sample lines' fast path (or of
	// library-encoded lines before it: resyncing the library encoder's
	// buffer clears its error).
	err error
}

// New returns an encoder.
func New(opts Options) *Encoder {
	if opts.Catalog == nil {
		opts.Catalog = catalog.Default()
	}
	opts.GlobalTags = slices.Clone(opts.GlobalTags)
	e := &Encoder{opts: opts, host: opts.Host, globalTags: opts.GlobalTags, devs: make(map[int]*deviceTags)}
	e.enc.SetPrecision(lineprotocol.Nanosecond)
	return e
}

// SetDevice records a device's identity (also done by Encode for
// b.Devices).
func (e *Encoder) SetDevice(d record.Device) {
	dt := e.devs[d.Index]
	if dt == nil {
		dt = &deviceTags{pstate: -1}
		e.devs[d.Index] = dt
	}
	dt.dev = d
	e.rebuildTags(dt)
}

func (e *Encoder) device(index int) *deviceTags {
	dt := e.devs[index]
	if dt == nil {
		dt = &deviceTags{dev: record.Device{Index: index}, pstate: -1}
		e.devs[index] = dt
		e.rebuildTags(dt)
	}
	return dt
}

// attributionTags returns d's non-empty attribution as tags.
func attributionTags(d record.Device) []Tag {
	var tags []Tag
	for _, a := range d.Attribution.Attrs() {
		tags = append(tags, Tag(a))
	}
	return tags
}

func (e *Encoder) rebuildTags(dt *deviceTags) {
	d := dt.dev
	tags := append(dt.tags[:0], Tag{"index", strconv.Itoa(d.Index)})
	if e.host != "" {
		tags = append(tags, Tag{"host", e.host})
	}
	add := func(k, v string) {
		if v != "" {
			tags = append(tags, Tag{k, v})
		}
	}
	add("name", d.Name)
	add("pci_bus_id", d.PCIBusID)
	add("uuid", d.UUID)
	if dt.pstate >= 0 {
		add("pstate", "P"+strconv.Itoa(dt.pstate))
	}
	if d.Simulated {
		add("simulated", "true")
	}
	if e.opts.DeviceStrings {
		add("arch", d.Architecture)
		add("compute_mode", d.ComputeMode)
	}
	for i, v := range d.Attribution.Values() {
		add(record.AttributionKeys()[i], v)
	}
	tags = e.mergeGlobalTags(tags)
	dt.tags = tags
	var p lineprotocol.Encoder
	p.SetBuffer(dt.prefix[:0])
	p.StartLine(Measurement)
	for _, t := range tags {
		p.AddTag(t.Key, t.Value)
	}
	dt.prefix, dt.prefixErr = p.Bytes(), p.Err()
	if e.opts.DeviceStrings {
		dt.strFields, dt.strErr = deviceStrings(d)
	}
}

// deviceStrings returns d's nvidia_smi string fields, escaped as the
// lineprotocol encoder writes them and joined by commas: driver_version,
// cuda_version, serial, vbios_version and current_ecc (Telegraf's order),
// each where known. An ECC mode the device does not
// support is left out, as Telegraf leaves out nvidia-smi's "N/A".
func deviceStrings(d record.Device) ([]byte, error) {
	ecc := map[string]string{record.ModeEnabled: "Enabled", record.ModeDisabled: "Disabled"}[d.ECCMode]
	var p lineprotocol.Encoder
	p.StartLine("m")
	n := 0
	for _, f := range []struct{ k, v string }{{"driver_version", d.DriverVersion}, {"cuda_version", d.CUDAVersion},
		{"serial", d.Serial}, {"vbios_version", d.VBIOSVersion}, {"current_ecc", ecc}} {
		if f.v == "" {
			continue
		}
		sv, ok := lineprotocol.StringValue(f.v)
		if !ok {
			return nil, fmt.Errorf("lineproto: device %d: field %s: %q is not valid UTF-8", d.Index, f.k, f.v)
		}
		p.AddField(f.k, sv)
		n++
	}
	if err := p.Err(); err != nil || n == 0 {
		return nil, err
	}
	return slices.Clone(p.Bytes()[len("m "):]), nil
}

// fieldKey returns the cached naming and key of metric id, nil when the
// catalog lacks it.
func (e *Encoder) fieldKey(id catalog.MetricID) *fieldKey {
	if int(id) >= len(e.keys) {
		e.keys = append(e.keys, make([]fieldKey, int(id)+1-len(e.keys))...)
	}
	k := &e.keys[id]
	if !k.done {
		k.done = true
		if m, ok := e.opts.Catalog.Get(id); ok {
			k.known, k.n = true, m.Influx()
			name := k.n.Name
			if e.opts.DeviceStrings && m.TelegrafText.Name != "" {
				k.text, name = m.TelegrafText, m.TelegrafText.Name
				if k.text.Also != "" {
					k.also, k.err = escapedKey(k.text.Also)
				}
			}
			if k.err == nil {
				k.key, k.err = escapedKey(name)
			}
		}
	}
	if !k.known {
		return nil
	}
	return k
}

// escapedKey returns name escaped as the lineprotocol encoder writes a
// field key, or its error when name is not a valid key.
func escapedKey(name string) ([]byte, error) {
	var p lineprotocol.Encoder
	p.StartLine("m")
	p.AddField(name, lineprotocol.BoolValue(true))
	if err := p.Err(); err != nil {
		return nil, err
	}
	b := p.Bytes() // "m KEY=true"
	return slices.Clone(b[len("m ") : len(b)-len("=true")]), nil
}

// appendText appends k's string field(s) for value v, each preceded by
// sep; ok is false when v has no text (nothing appended).
func appendText(buf []byte, sep byte, k *fieldKey, v float64) ([]byte, bool) {
	t, ok := k.text.Text(v)
	if !ok {
		return buf, false
	}
	sv, ok := lineprotocol.StringValue(t)
	if !ok {
		return buf, false
	}
	for i, key := range [][]byte{k.key, k.also} {
		if key == nil {
			continue
		}
		if i > 0 {
			sep = ','
		}
		buf = append(buf, sep)
		buf = append(buf, key...)
		buf = append(buf, '=')
		buf = sv.AppendBytes(buf)
	}
	return buf, true
}

// useOrigin makes lines carry o's host and global tags (Options' for nil),
// rebuilding the devices' tags when that changes.
func (e *Encoder) useOrigin(o *record.Origin) {
	if o.Equal(e.origin) {
		return
	}
	if o == nil {
		e.origin, e.host, e.globalTags = nil, e.opts.Host, e.opts.GlobalTags
	} else {
		e.origin = &record.Origin{Host: o.Host, Tags: maps.Clone(o.Tags)}
		e.host, e.globalTags = o.Host, SortedTags(o.Tags)
	}
	for _, dt := range e.devs {
		e.rebuildTags(dt)
	}
}

// SortedTags returns tags as Tags sorted by key (nil for none).
func SortedTags(tags map[string]string) []Tag {
	var out []Tag
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		out = append(out, Tag{k, tags[k]})
	}
	return out
}

// setErr keeps the first error since Reset.
func (e *Encoder) setErr(err error) {
	if e.err == nil {
		e.err = err
	}
}

var errNoField = errors.New("timestamp must be added after adding at least one field")

// Encode appends the batch's samples and events to the encoder's buffer.
// A batch with an Origin (a replayed backlog sampled under another
// identity) is written with its host and global tags instead of Options'.
func (e *Encoder) Encode(b *record.Batch) {
	e.useOrigin(b.Origin)
	for _, d := range b.Devices {
		e.SetDevice(d)
	}
	s := b.Samples
	for i := 0; i < len(s); {
		// a run of samples of one device at one instant → one line
		j := i + 1
		for j < len(s) && s[j].Device == s[i].Device && s[j].TimeNS == s[i].TimeNS && s[j].Flags == s[i].Flags {
			j++
		}
		e.encodeLine(s[i:j])
		i = j
	}
	sums := b.Summaries
	for i := 0; i < len(sums); {
		// summaries of one device and one window → one line
		j := i + 1
		for j < len(sums) && sums[j].Device == sums[i].Device && sums[j].StartNS == sums[i].StartNS {
			j++
		}
		e.encodeSummaryLine(sums[i:j])
		i = j
	}
	for _, ev := range b.Events {
		e.encodeEvent(ev)
	}
}

// encodeSummaryLine writes one line of window summaries, stamped with the
// window's start: per metric the float fields NAME_mean, NAME_min,
// NAME_max, NAME_last (in the field's unit, not rounded) and the integer
// NAME_count. State metrics (bit masks, enumerations) get only _last and
// _count; pstate stays a tag (its last value).
func (e *Encoder) encodeSummaryLine(run []record.Summary) {
	dt := e.device(int(run[0].Device))
	fields := 0
	for _, s := range run {
		if s.Metric == catalog.MetricPState {
			if int(s.Last) != dt.pstate {
				dt.pstate = int(s.Last)
				e.rebuildTags(dt)
			}
			continue
		}
		fields++
	}
	if fields == 0 {
		return
	}
	e.enc.StartLine(Measurement)
	for _, t := range dt.tags {
		e.enc.AddTag(t.Key, t.Value)
	}
	for _, s := range run {
		m, ok := e.opts.Catalog.Get(s.Metric)
		if !ok || s.Metric == catalog.MetricPState {
			continue
		}
		n := m.Influx()
		n.Type = catalog.Float
		add := func(suffix string, v float64) {
			if fv, ok := lineprotocol.FloatValue(n.Convert(v)); ok {
				e.enc.AddField(n.Name+suffix, fv)
			}
		}
		if m.Kind != catalog.State {
			add("_mean", s.Mean)
			add("_min", s.Min)
			add("_max", s.Max)
		}
		add("_last", s.Last)
		e.enc.AddField(n.Name+"_count", lineprotocol.IntValue(int64(s.Count)))
	}
	e.enc.EndLine(time.Unix(0, run[0].StartNS))
}

func (e *Encoder) encodeLine(run []record.Sample) {
	dt := e.device(int(run[0].Device))
	// pstate is a tag in Telegraf's schema, not a field
	for _, s := range run {
		if s.Metric == catalog.MetricPState && int(s.Value) != dt.pstate {
			dt.pstate = int(s.Value)
			e.rebuildTags(dt)
		}
	}
	fields := 0
	for _, s := range run {
		if s.Metric != catalog.MetricPState {
			fields++
		}
	}
	if fields == 0 {
		return
	}
	if err := e.enc.Err(); err != nil {
		e.setErr(err) // SetBuffer clears it
	}
	e.enc.SetBuffer(e.appendLine(e.enc.Bytes(), dt, run))
}

// appendLine is encodeLine's fast path: it appends the device's cached
// prefix and the fields straight to buf, byte for byte what StartLine,
// AddTag, AddField and EndLine write, and skips the line on the errors they
// would report.
func (e *Encoder) appendLine(buf []byte, dt *deviceTags, run []record.Sample) []byte {
	if dt.prefixErr != nil {
		e.setErr(dt.prefixErr)
		return buf
	}
	start := len(buf)
	buf = append(buf, dt.prefix...)
	sep := byte(' ')
	for _, s := range run {
		if s.Metric == catalog.MetricPState {
			continue
		}
		k := e.fieldKey(s.Metric)
		if k == nil {
			continue
		}
		if k.err != nil {
			e.setErr(k.err)
			return buf[:start]
		}
		if k.text.Name != "" {
			var ok bool
			if buf, ok = appendText(buf, sep, k, s.Value); ok {
				sep = ','
			}
			continue
		}
		if v, ok := FieldValue(k.n, s.Value); ok {
			buf = append(buf, sep)
			buf = append(buf, k.key...)
			buf = append(buf, '=')
			buf = v.AppendBytes(buf)
			sep = ','
		}
	}
	if sep == ',' {
		for _, st := range dt.stats {
			k := e.fieldKey(st.Metric)
			if k == nil || k.err != nil || k.text.Name != "" {
				continue // the metric's own field reports a bad key; text has no extremes
			}
			if v, ok := FieldValue(k.n, st.Value); ok {
				buf = append(buf, ',')
				buf = append(buf, k.key...)
				buf = append(buf, st.Suffix...)
				buf = append(buf, '=')
				buf = v.AppendBytes(buf)
			}
		}
	}
	if sep == ',' && len(dt.strFields) > 0 {
		buf = append(buf, sep)
		buf = append(buf, dt.strFields...)
	} else if sep == ',' && dt.strErr != nil {
		e.setErr(dt.strErr)
		return buf[:start]
	}
	if run[0].Flags&record.FlagPointRead != 0 {
		buf = append(buf, sep)
		buf = append(buf, "point_read=true"...)
		sep = ','
	}
	if sep == ' ' {
		e.setErr(errNoField)
		return buf[:start]
	}
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, run[0].TimeNS, 10)
	return append(buf, '\n')
}

// FieldValue converts a base-unit value to a line-protocol value in the
// naming's unit and type (integers as signed: InfluxDB 1.x rejects u).
func FieldValue(n catalog.Naming, v float64) (lineprotocol.Value, bool) {
	v = n.Convert(v)
	if n.Type == catalog.Int {
		return lineprotocol.IntValue(int64(v)), true
	}
	return lineprotocol.FloatValue(v)
}

// eventTags returns the tags an event of device index (its identity dt)
// starts with: index, host, uuid and simulated, each where known.
func (e *Encoder) eventTags(index int, dt *deviceTags) []Tag {
	tags := []Tag{{"index", strconv.Itoa(index)}}
	if e.host != "" {
		tags = append(tags, Tag{"host", e.host})
	}
	if dt.dev.UUID != "" {
		tags = append(tags, Tag{"uuid", dt.dev.UUID})
	}
	if dt.dev.Simulated {
		tags = append(tags, Tag{"simulated", "true"})
	}
	return tags
}

// mergeGlobalTags appends to tags the global tags whose keys it lacks (a
// record's own tag wins) and sorts the result by key, the order line
// protocol wants.
func (e *Encoder) mergeGlobalTags(tags []Tag) []Tag {
	for _, t := range e.globalTags {
		if !slices.ContainsFunc(tags, func(x Tag) bool { return x.Key == t.Key }) {
			tags = append(tags, t)
		}
	}
	slices.SortFunc(tags, func(a, b Tag) int { return cmp.Compare(a.Key, b.Key) })
	return tags
}

// startLine starts a line of measurement m tagged with tags and the global
// tags (mergeGlobalTags).
func (e *Encoder) startLine(m string, tags []Tag) {
	e.enc.StartLine(m)
	for _, t := range e.mergeGlobalTags(tags) {
		e.enc.AddTag(t.Key, t.Value)
	}
}

// addNumberFields adds an event's fields to the current line: Int ones as
// integers, the others as floats (a NaN or infinite one left out). rename,
// when set, maps a field's key to its field name.
func (e *Encoder) addNumberFields(fields []record.Field, rename func(string) string) {
	for _, f := range fields {
		key := f.Key
		if rename != nil {
			key = rename(key)
		}
		if f.Int {
			e.enc.AddField(key, lineprotocol.IntValue(int64(f.Value)))
		} else if v, ok := lineprotocol.FloatValue(f.Value); ok {
			e.enc.AddField(key, v)
		}
	}
}

// encodeSelf writes a self-metrics event: measurement gpusampler_self,
// its attributes as tags (with host and global tags), its fields as fields.
func (e *Encoder) encodeSelf(ev record.Event) {
	var tags []Tag
	if e.host != "" {
		tags = append(tags, Tag{"host", e.host})
	}
	for _, a := range ev.Attrs {
		if a.Value != "" { // line protocol has no empty tag
			tags = append(tags, Tag(a))
		}
	}
	e.startLine(SelfMeasurement, tags)
	e.addNumberFields(ev.Fields, nil)
	e.enc.EndLine(time.Unix(0, ev.StartNS))
}

func (e *Encoder) encodeEvent(ev record.Event) {
	switch ev.Kind {
	case record.EventSelf:
		e.encodeSelf(ev)
		return
	case record.EventProcess:
		e.encodeProcess(ev)
		return
	case record.EventJob, record.EventJobEnd:
		e.encodeJob(ev)
		return
	}
	dt := e.device(ev.Device)
	tags := append(e.eventTags(ev.Device, dt), Tag{"kind", string(ev.Kind)})
	tags = append(tags, attributionTags(dt.dev)...)
	e.startLine(EventMeasurement, tags)
	msg := ev.Message
	if msg == "" {
		msg = string(ev.Kind)
	}
	if v, ok := lineprotocol.StringValue(msg); ok {
		e.enc.AddField("message", v)
	}
	if ev.EndNS != 0 {
		e.enc.AddField("end_ns", lineprotocol.IntValue(ev.EndNS))
		e.enc.AddField("duration_ns", lineprotocol.IntValue(ev.EndNS-ev.StartNS))
	}
	for _, a := range ev.Attrs {
		if v, ok := lineprotocol.StringValue(a.Value); ok {
			e.enc.AddField("attr_"+a.Key, v)
		}
	}
	e.enc.EndLine(time.Unix(0, ev.StartNS))
}

// Bytes returns the encoded lines so far. The slice is valid until the next
// Encode or Reset.
func (e *Encoder) Bytes() []byte { return e.enc.Bytes() }

// Err returns the first encoding error since the last Reset (a line with an
// invalid name is skipped, not written half).
func (e *Encoder) Err() error {
	if e.err != nil {
		return e.err
	}
	return e.enc.Err()
}

// Release forgets the buffer that Bytes returned (the next Encode writes
// into a new one), for a caller whose request with those bytes failed and
// may still be read by its transport.
func (e *Encoder) Release() { e.enc.SetBuffer(nil) }

// Reset empties the buffer, keeping device identities.
func (e *Encoder) Reset() {
	e.enc.Reset()
	e.enc.SetPrecision(lineprotocol.Nanosecond)
	e.enc.ClearErr()
	e.err = nil
}
