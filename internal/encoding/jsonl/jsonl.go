// Package jsonl encodes gpusampler records as JSON Lines: one object per
// record, with a "type" of "device", "sample", "summary" (a window
// aggregate, see internal/pipeline/aggregate), "event", "self" (self-metrics) or
// "process" (one process on one GPU, see record.EventProcess), "job" and
// "job_end" (one owner's account on one GPU, see record.EventJob). Samples carry our
// catalog names and base units. Simulated devices' records carry
// "simulated":true.
//
// An Encoder is not safe for concurrent use.
package jsonl

import (
	"encoding/json"
	"maps"
	"strconv"
	"unicode/utf8"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Options configure an Encoder.
type Options struct {
	// Host is written into every record.
	Host string
	// GlobalTags are written into every record as "tags".
	GlobalTags map[string]string
	// Catalog defaults to catalog.Default().
	Catalog *catalog.Catalog
}

// DeviceRecord is the JSON form of a device identity.
type DeviceRecord struct {
	Type string `json:"type"` // "device"
	Host string `json:"host,omitempty"`
	record.Device
	Tags map[string]string `json:"tags,omitempty"`
}

// EventRecord is the JSON form of an event.
type EventRecord struct {
	Type      string            `json:"type"` // "event"
	Host      string            `json:"host,omitempty"`
	Kind      string            `json:"kind"`
	GPU       int               `json:"gpu"`
	UUID      string            `json:"uuid,omitempty"`
	StartNS   int64             `json:"start_ns"`
	EndNS     int64             `json:"end_ns,omitempty"`
	Message   string            `json:"message,omitempty"`
	Attrs     map[string]string `json:"attrs,omitempty"`
	Simulated bool              `json:"simulated,omitempty"`
	// The device's attribution (pod, namespace, container, hpc_job).
	record.Attribution
	Tags map[string]string `json:"tags,omitempty"`
}

// Encoder appends JSON lines to a buffer.
type Encoder struct {
	opts Options
	// host, tags and tagJSON are what records carry: opts' own, or the
	// Origin of the batch being encoded (origin, a copy; nil for opts').
	host    string
	tags    map[string]string
	origin  *record.Origin
	buf     []byte
	devs    map[int]record.Device
	tagJSON []byte // pre-encoded ,"tags":{...}
	// metrics is the encoder's own copy of the catalog (opts.Catalog.All():
	// metric ID i at index i-1), read per record without copying a Metric.
	metrics []catalog.Metric
}

// New returns an encoder.
func New(opts Options) *Encoder {
	if opts.Catalog == nil {
		opts.Catalog = catalog.Default()
	}
	e := &Encoder{opts: opts, devs: make(map[int]record.Device), metrics: opts.Catalog.All()}
	e.setIdentity(opts.Host, opts.GlobalTags)
	return e
}

func (e *Encoder) setIdentity(host string, tags map[string]string) {
	e.host, e.tags, e.tagJSON = host, tags, nil
	if len(tags) > 0 {
		b, _ := json.Marshal(tags) // map[string]string cannot fail
		e.tagJSON = append([]byte(`,"tags":`), b...)
	}
}

// useOrigin makes records carry o's host and tags (Options' for nil).
func (e *Encoder) useOrigin(o *record.Origin) {
	if o.Equal(e.origin) {
		return
	}
	if o == nil {
		e.origin = nil
		e.setIdentity(e.opts.Host, e.opts.GlobalTags)
		return
	}
	e.origin = &record.Origin{Host: o.Host, Tags: maps.Clone(o.Tags)}
	e.setIdentity(e.origin.Host, e.origin.Tags)
}

// Encode appends every record of b, one line each. A batch with an Origin
// (a replayed backlog sampled under another identity) is written with its
// host and tags instead of Options'.
func (e *Encoder) Encode(b *record.Batch) {
	e.useOrigin(b.Origin)
	for _, d := range b.Devices {
		e.devs[d.Index] = d
		line, err := json.Marshal(DeviceRecord{Type: "device", Host: e.host, Device: d, Tags: e.tags})
		if err == nil {
			e.buf = append(append(e.buf, line...), '\n')
		}
	}
	for _, s := range b.Samples {
		e.appendSample(s)
	}
	for _, s := range b.Summaries {
		e.appendSummary(s)
	}
	for _, ev := range b.Events {
		switch ev.Kind {
		case record.EventSelf:
			e.appendSelf(ev)
			continue
		case record.EventProcess:
			e.appendProcess(ev)
			continue
		case record.EventJob, record.EventJobEnd:
			e.appendJob(ev)
			continue
		}
		d := e.devs[ev.Device]
		r := EventRecord{Type: "event", Host: e.host, Kind: string(ev.Kind), GPU: ev.Device, UUID: d.UUID,
			StartNS: ev.StartNS, EndNS: ev.EndNS, Message: ev.Message, Simulated: d.Simulated, Attribution: d.Attribution, Tags: e.tags}
		if len(ev.Attrs) > 0 {
			r.Attrs = make(map[string]string, len(ev.Attrs))
			for _, a := range ev.Attrs {
				r.Attrs[a.Key] = a.Value
			}
		}
		if line, err := json.Marshal(r); err == nil {
			e.buf = append(append(e.buf, line...), '\n')
		}
	}
}

// appendAttribution appends the device's non-empty attribution fields
// (pod, namespace, container, hpc_job).
func appendAttribution(b []byte, a record.Attribution) []byte {
	for i, v := range a.Values() {
		if v != "" {
			b = append(b, ',')
			b = appendString(b, record.AttributionKeys()[i])
			b = append(b, ':')
			b = appendString(b, v)
		}
	}
	return b
}

// appendHead appends the start every per-device record shares: the opening
// (`{"type":"...","time":`), the time, host, gpu and, when known, uuid. It
// returns the device's identity and whether it is known.
func (e *Encoder) appendHead(b []byte, open string, timeNS int64, dev int) ([]byte, record.Device, bool) {
	return e.appendHeadAttributed(b, open, timeNS, dev, nil)
}

// appendHeadAttributed is appendHead with the attribution a in place of
// the device's when a is not nil.
func (e *Encoder) appendHeadAttributed(b []byte, open string, timeNS int64, dev int, a *record.Attribution) ([]byte, record.Device, bool) {
	d, known := e.devs[dev]
	b = append(b, open...)
	b = strconv.AppendInt(b, timeNS, 10)
	if e.host != "" {
		b = append(b, `,"host":`...)
		b = appendString(b, e.host)
	}
	b = append(b, `,"gpu":`...)
	b = strconv.AppendInt(b, int64(dev), 10)
	if known && d.UUID != "" {
		b = append(b, `,"uuid":`...)
		b = appendString(b, d.UUID)
	}
	if a == nil {
		a = &d.Attribution
	}
	b = appendAttribution(b, *a)
	return b, d, known
}

// metric returns the encoder's entry for id, nil when the catalog lacks it.
func (e *Encoder) metric(id catalog.MetricID) *catalog.Metric {
	if id == 0 || int(id) > len(e.metrics) {
		return nil
	}
	return &e.metrics[id-1]
}

func (e *Encoder) appendSample(s record.Sample) {
	m := e.metric(s.Metric)
	if m == nil {
		return
	}
	b, d, known := e.appendHead(e.buf, `{"type":"sample","time":`, s.TimeNS, int(s.Device))
	b = append(b, `,"metric":`...)
	b = appendString(b, m.Name)
	b = append(b, `,"value":`...)
	b = AppendNumber(b, s.Value, m.Type)
	b = append(b, `,"unit":`...)
	b = appendString(b, m.Unit)
	if s.Flags&record.FlagPointRead != 0 {
		b = append(b, `,"point_read":true`...)
	}
	if known && d.Simulated {
		b = append(b, `,"simulated":true`...)
	}
	b = append(b, e.tagJSON...)
	e.buf = append(b, "}\n"...)
}

// appendSelf writes a self-metrics event as
// {"type":"self","time":T,"host":..,ATTRS...,"fields":{...},"tags":{...}}.
func (e *Encoder) appendSelf(ev record.Event) {
	b := append(e.buf, `{"type":"self","time":`...)
	b = strconv.AppendInt(b, ev.StartNS, 10)
	if e.host != "" {
		b = append(b, `,"host":`...)
		b = appendString(b, e.host)
	}
	for _, a := range ev.Attrs {
		b = append(b, ',')
		b = appendAttr(b, a.Key, a.Value)
	}
	b = appendFields(b, ev.Fields)
	b = append(b, e.tagJSON...)
	e.buf = append(b, "}\n"...)
}

// appendFields writes ,"fields":{...} of an event's numeric fields.
func appendFields(b []byte, fields []record.Field) []byte {
	b = append(b, `,"fields":{`...)
	for i, f := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendField(b, f)
	}
	return append(b, '}')
}

// appendSummary writes one window summary as
// {"type":"summary","time":START,"interval_ns":N,...,"metric":NAME,
// "mean":..,"min":..,"max":..,"last":..,"count":..,"unit":..}, values in
// the catalog's base unit.
func (e *Encoder) appendSummary(s record.Summary) {
	m := e.metric(s.Metric)
	if m == nil {
		return
	}
	d, known := e.devs[int(s.Device)]
	b := append(e.buf, `{"type":"summary","time":`...)
	b = strconv.AppendInt(b, s.StartNS, 10)
	b = append(b, `,"interval_ns":`...)
	b = strconv.AppendInt(b, s.IntervalNS, 10)
	if e.host != "" {
		b = append(b, `,"host":`...)
		b = appendString(b, e.host)
	}
	b = append(b, `,"gpu":`...)
	b = strconv.AppendInt(b, int64(s.Device), 10)
	if known && d.UUID != "" {
		b = append(b, `,"uuid":`...)
		b = appendString(b, d.UUID)
	}
	b = appendAttribution(b, d.Attribution)
	b = append(b, `,"metric":`...)
	b = appendString(b, m.Name)
	for _, f := range [...]struct {
		k string
		v float64
	}{{`,"mean":`, s.Mean}, {`,"min":`, s.Min}, {`,"max":`, s.Max}, {`,"last":`, s.Last}} {
		b = append(b, f.k...)
		b = AppendNumber(b, f.v, catalog.Float)
	}
	b = append(b, `,"count":`...)
	b = strconv.AppendUint(b, uint64(s.Count), 10)
	b = append(b, `,"unit":`...)
	b = appendString(b, m.Unit)
	if known && d.Simulated {
		b = append(b, `,"simulated":true`...)
	}
	b = append(b, e.tagJSON...)
	e.buf = append(b, "}\n"...)
}

// AppendNumber appends v as a JSON number: integers without a fraction,
// NaN and infinities as null (JSON has neither).
func AppendNumber(b []byte, v float64, t catalog.ValueType) []byte {
	if v != v || v > 1.7976931348623157e308 || v < -1.7976931348623157e308 {
		return append(b, "null"...)
	}
	if t == catalog.Int {
		return strconv.AppendInt(b, int64(v), 10)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// Bytes returns what was encoded since the last Reset.
func (e *Encoder) Bytes() []byte { return e.buf }

// Reset empties the buffer, keeping device identities.
func (e *Encoder) Reset() { e.buf = e.buf[:0] }
