package stream

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/record"
)

// metricCatalog is the metric catalog the decoders map names with. Records of
// metrics it does not know (a newer sender) are skipped.
var metricCatalog = catalog.Default()

// influxNames maps line-protocol field names onto catalog metrics.
var influxNames = func() map[string]*catalog.Metric {
	m := map[string]*catalog.Metric{}
	for _, x := range metricCatalog.All() {
		m[x.Influx().Name] = &x // All's copy, private to this map
	}
	return m
}()

type member struct {
	key string
	raw json.RawMessage
}

// members parses one JSON object keeping its keys' order.
func members(data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		out = append(out, member{k, raw})
	}
	return out, nil
}

// number decodes a JSON number or null (NaN: the encoder writes NaN and
// infinities as null).
func number(raw json.RawMessage) (v float64, isInt bool, err error) {
	s := string(raw)
	if s == "null" {
		return math.NaN(), false, nil
	}
	v, err = strconv.ParseFloat(s, 64)
	return v, err == nil && !strings.ContainsAny(s, ".eE"), err
}

func (r *Records) decodeJSON(data []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if err := r.jsonLine(sc.Bytes()); err != nil {
			return fmt.Errorf("stream: json line %d: %w", line, err)
		}
	}
	return sc.Err()
}

func (r *Records) jsonLine(line []byte) error {
	var head struct {
		Type string            `json:"type"`
		Host string            `json:"host"`
		Tags map[string]string `json:"tags"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return err
	}
	if head.Host != "" {
		r.Host = head.Host
	}
	if len(head.Tags) > 0 {
		r.Tags = head.Tags
	}
	switch head.Type {
	case "device":
		var d jsonl.DeviceRecord
		if err := json.Unmarshal(line, &d); err != nil {
			return err
		}
		r.Batch.Devices = append(r.Batch.Devices, d.Device)
	case "sample":
		var s struct {
			Time      int64           `json:"time"`
			GPU       uint16          `json:"gpu"`
			UUID      string          `json:"uuid"`
			Metric    string          `json:"metric"`
			Value     json.RawMessage `json:"value"`
			PointRead bool            `json:"point_read"`
		}
		if err := json.Unmarshal(line, &s); err != nil {
			return err
		}
		m, ok := metricCatalog.Lookup(s.Metric)
		if !ok {
			return nil // a metric this decoder does not know
		}
		v, _, err := number(s.Value)
		if err != nil {
			return fmt.Errorf("value: %w", err)
		}
		x := record.Sample{TimeNS: s.Time, Value: v, Device: s.GPU, Metric: m.ID}
		if s.PointRead {
			x.Flags |= record.FlagPointRead
		}
		r.Batch.Samples = append(r.Batch.Samples, x)
		r.noteUUID(int(s.GPU), s.UUID)
	case "summary":
		var s struct {
			Time       int64           `json:"time"`
			IntervalNS int64           `json:"interval_ns"`
			GPU        uint16          `json:"gpu"`
			UUID       string          `json:"uuid"`
			Metric     string          `json:"metric"`
			Mean       json.RawMessage `json:"mean"`
			Min        json.RawMessage `json:"min"`
			Max        json.RawMessage `json:"max"`
			Last       json.RawMessage `json:"last"`
			Count      uint32          `json:"count"`
		}
		if err := json.Unmarshal(line, &s); err != nil {
			return err
		}
		m, ok := metricCatalog.Lookup(s.Metric)
		if !ok {
			return nil
		}
		u := record.Summary{StartNS: s.Time, IntervalNS: s.IntervalNS, Count: s.Count, Device: s.GPU, Metric: m.ID}
		for _, f := range []struct {
			dst *float64
			raw json.RawMessage
		}{{&u.Mean, s.Mean}, {&u.Min, s.Min}, {&u.Max, s.Max}, {&u.Last, s.Last}} {
			v, _, err := number(f.raw)
			if err != nil {
				return fmt.Errorf("summary: %w", err)
			}
			*f.dst = v
		}
		r.Batch.Summaries = append(r.Batch.Summaries, u)
		r.noteUUID(int(s.GPU), s.UUID)
	case "event":
		var e jsonl.EventRecord
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		ev := record.Event{Kind: record.EventKind(e.Kind), Device: e.GPU, StartNS: e.StartNS, EndNS: e.EndNS, Message: e.Message}
		for _, k := range slices.Sorted(maps.Keys(e.Attrs)) {
			ev.Attrs = append(ev.Attrs, record.Attr{Key: k, Value: e.Attrs[k]})
		}
		r.Batch.Events = append(r.Batch.Events, ev)
		r.noteUUID(e.GPU, e.UUID)
	case "self":
		ms, err := members(line)
		if err != nil {
			return err
		}
		ev := record.Event{Kind: record.EventSelf, Device: -1}
		for _, m := range ms {
			switch m.key {
			case "type", "host", "tags":
			case "time":
				if err := json.Unmarshal(m.raw, &ev.StartNS); err != nil {
					return fmt.Errorf("self time: %w", err)
				}
				ev.EndNS = ev.StartNS
			case "fields":
				fs, err := members(m.raw)
				if err != nil {
					return fmt.Errorf("self fields: %w", err)
				}
				for _, f := range fs {
					v, isInt, err := number(f.raw)
					if err != nil {
						return fmt.Errorf("self field %s: %w", f.key, err)
					}
					ev.Fields = append(ev.Fields, record.Field{Key: f.key, Value: v, Int: isInt})
				}
			default:
				var s string
				if err := json.Unmarshal(m.raw, &s); err != nil {
					return fmt.Errorf("self attribute %s: %w", m.key, err)
				}
				ev.Attrs = append(ev.Attrs, record.Attr{Key: m.key, Value: s})
			}
		}
		r.Batch.Events = append(r.Batch.Events, ev)
	case "process":
		ev, err := r.jsonProcess(line)
		if err != nil {
			return err
		}
		r.Batch.Events = append(r.Batch.Events, ev)
	default:
		// a record type this decoder does not know (a newer sender)
	}
	return nil
}

// jsonProcess decodes a "process" record: numbers are the event's fields,
// strings its attributes ("process_type" is the attribute "type"), in the
// order written, but for the process's own attribution (pod, namespace,
// container, hpc_job), which follows them as the engine puts it.
func (r *Records) jsonProcess(line []byte) (record.Event, error) {
	ms, err := members(line)
	if err != nil {
		return record.Event{}, err
	}
	ev := record.Event{Kind: record.EventProcess}
	uuid := ""
	var own []record.Attr
	for _, m := range ms {
		switch m.key {
		case "type", "host", "tags", "simulated":
		case "time":
			if err := json.Unmarshal(m.raw, &ev.StartNS); err != nil {
				return ev, fmt.Errorf("process time: %w", err)
			}
			ev.EndNS = ev.StartNS
		case "gpu":
			if err := json.Unmarshal(m.raw, &ev.Device); err != nil {
				return ev, fmt.Errorf("process gpu: %w", err)
			}
		case "uuid":
			if err := json.Unmarshal(m.raw, &uuid); err != nil {
				return ev, fmt.Errorf("process uuid: %w", err)
			}
		default:
			if len(m.raw) > 0 && m.raw[0] == '"' {
				var v string
				if err := json.Unmarshal(m.raw, &v); err != nil {
					return ev, fmt.Errorf("process attribute %s: %w", m.key, err)
				}
				key := m.key
				if key == "process_type" {
					key = record.ProcessAttrType
				}
				if record.IsAttributionKey(key) {
					own = append(own, record.Attr{Key: key, Value: v})
					continue
				}
				ev.Attrs = append(ev.Attrs, record.Attr{Key: key, Value: v})
				continue
			}
			v, isInt, err := number(m.raw)
			if err != nil {
				return ev, fmt.Errorf("process field %s: %w", m.key, err)
			}
			ev.Fields = append(ev.Fields, record.Field{Key: m.key, Value: v, Int: isInt})
		}
	}
	ev.Attrs = append(ev.Attrs, own...)
	r.noteUUID(ev.Device, uuid)
	return ev, nil
}

func (r *Records) noteUUID(index int, uuid string) {
	if uuid != "" {
		r.UUIDs[index] = uuid
	}
}

var epoch = time.Unix(0, 0)

func (r *Records) decodeLineProtocol(data []byte) error {
	dec := lineprotocol.NewDecoderWithBytes(data)
	for line := 1; dec.Next(); line++ {
		if err := r.lpLine(dec); err != nil {
			return fmt.Errorf("stream: line protocol line %d: %w", line, err)
		}
	}
	if err := dec.Err(); err != nil {
		return fmt.Errorf("stream: line protocol: %w", err)
	}
	return nil
}

type lpTag struct{ k, v string }

type lpField struct {
	k string
	v lineprotocol.Value
}

// lpRecord is one parsed line-protocol line, before it is interpreted.
type lpRecord struct {
	measurement string
	tags        []lpTag
	fields      []lpField
	ns          int64
}

// lpLine interprets one line: its tags (device, host, globals,
// attribution), then its fields by measurement.
func (r *Records) lpLine(dec *lineprotocol.Decoder) error {
	rec, err := lpParse(dec)
	if err != nil {
		return err
	}
	t, err := r.lpTags(rec)
	if err != nil {
		return err
	}
	switch rec.measurement {
	case lineproto.Measurement:
		if t.dev < 0 {
			return fmt.Errorf("%s line without an index tag", rec.measurement)
		}
		r.lpSamples(rec, uint16(t.dev))
	case lineproto.EventMeasurement:
		r.Batch.Events = append(r.Batch.Events, lpEvent(rec, t.dev))
	case lineproto.SelfMeasurement:
		r.Batch.Events = append(r.Batch.Events, lpSelf(rec, t.selfAttrs))
	case lineproto.ProcessMeasurement:
		if t.dev < 0 {
			return fmt.Errorf("%s line without an index tag", rec.measurement)
		}
		r.Batch.Events = append(r.Batch.Events, lpProcess(rec, t.dev, t.procAttrs))
	}
	return nil
}

// lpParse reads one line's measurement, tags, fields and timestamp.
func lpParse(dec *lineprotocol.Decoder) (lpRecord, error) {
	var rec lpRecord
	meas, err := dec.Measurement()
	if err != nil {
		return rec, err
	}
	rec.measurement = string(meas)
	for {
		k, v, err := dec.NextTag()
		if err != nil {
			return rec, err
		}
		if k == nil {
			break
		}
		rec.tags = append(rec.tags, lpTag{string(k), string(v)})
	}
	for {
		k, v, err := dec.NextField()
		if err != nil {
			return rec, err
		}
		if k == nil {
			break
		}
		rec.fields = append(rec.fields, lpField{string(k), v})
	}
	ts, err := dec.Time(lineprotocol.Nanosecond, epoch)
	if err != nil {
		return rec, err
	}
	rec.ns = ts.UnixNano()
	return rec, nil
}

// lpTagInfo is what a line's tags say.
type lpTagInfo struct {
	dev       int // -1: no index tag
	selfAttrs []record.Attr
	procAttrs []record.Attr
}

// lpTags sorts a line's tags: the device index and UUID, the host, the
// device's attribution (pod, namespace, container, hpc_job) — on a process
// line, the process's own —, a process's name and type, a self-metric's scope attributes, and the sender's global
// tags (everything else).
func (r *Records) lpTags(rec lpRecord) (lpTagInfo, error) {
	t := lpTagInfo{dev: -1}
	uuid := ""
	var globals map[string]string
	var attribution, procAttribution record.Attribution
	for _, tag := range rec.tags {
		if rec.measurement == lineproto.ProcessMeasurement && (tag.k == record.ProcessAttrName || tag.k == record.ProcessAttrType) {
			t.procAttrs = append(t.procAttrs, record.Attr{Key: tag.k, Value: tag.v})
			continue
		}
		if rec.measurement == lineproto.ProcessMeasurement && setAttribution(&procAttribution, tag.k, tag.v) {
			continue // the process's own, not its device's
		}
		if setAttribution(&attribution, tag.k, tag.v) {
			continue
		}
		switch tag.k {
		case "index":
			n, err := strconv.Atoi(tag.v)
			if err != nil || n < 0 || n > math.MaxUint16 {
				return t, fmt.Errorf("tag index=%q: not a device index", tag.v)
			}
			t.dev = n
		case "host":
			r.Host = tag.v
		case "uuid":
			uuid = tag.v
		case "name", "pci_bus_id", "pstate", "simulated", "kind":
		default:
			if rec.measurement == lineproto.SelfMeasurement {
				t.selfAttrs = append(t.selfAttrs, record.Attr{Key: tag.k, Value: tag.v})
				continue
			}
			if globals == nil {
				globals = map[string]string{}
			}
			globals[tag.k] = tag.v
		}
	}
	if globals != nil {
		r.Tags = globals
	}
	// After name and type, as the engine puts them.
	t.procAttrs = append(t.procAttrs, procAttribution.Attrs()...)
	if t.dev >= 0 {
		r.noteUUID(t.dev, uuid)
		if !attribution.IsZero() {
			if r.Attribution == nil {
				r.Attribution = map[int]record.Attribution{}
			}
			r.Attribution[t.dev] = attribution
		}
	}
	return t, nil
}

// setAttribution sets a's field for attribution key k and reports whether k
// is one.
func setAttribution(a *record.Attribution, k, v string) bool {
	switch k {
	case record.AttrPod:
		a.Pod = v
	case record.AttrNamespace:
		a.Namespace = v
	case record.AttrContainer:
		a.Container = v
	case record.AttrHPCJob:
		a.HPCJob = v
	default:
		return false
	}
	return true
}

func lpNum(v lineprotocol.Value) float64 {
	switch v.Kind() {
	case lineprotocol.Float:
		return v.FloatV()
	case lineprotocol.Int:
		return float64(v.IntV())
	case lineprotocol.Uint:
		return float64(v.UintV())
	}
	return math.NaN()
}

// lpSamples turns an nvidia_smi line's fields into samples (Telegraf's
// names, scaled back to base units) or, for name_mean/_min/_max/_last/
// _count fields, window summaries.
func (r *Records) lpSamples(rec lpRecord, dev uint16) {
	var flags record.Flags
	for _, f := range rec.fields {
		if f.k == "point_read" && f.v.Kind() == lineprotocol.Bool && f.v.BoolV() {
			flags |= record.FlagPointRead
		}
	}
	sums := map[catalog.MetricID]*record.Summary{}
	var order []catalog.MetricID
	for _, f := range rec.fields {
		if m := influxNames[f.k]; m != nil {
			v := lpNum(f.v) / m.Influx().Scale
			if m.Type == catalog.Int {
				v = math.Round(v)
			}
			r.Batch.Samples = append(r.Batch.Samples, record.Sample{TimeNS: rec.ns, Value: v, Device: dev, Metric: m.ID, Flags: flags})
			continue
		}
		i := strings.LastIndexByte(f.k, '_')
		if i < 0 {
			continue
		}
		m := influxNames[f.k[:i]]
		if m == nil {
			continue
		}
		s := sums[m.ID]
		if s == nil {
			s = &record.Summary{StartNS: rec.ns, Device: dev, Metric: m.ID}
			sums[m.ID] = s
			order = append(order, m.ID)
		}
		v := lpNum(f.v) / m.Influx().Scale
		switch f.k[i:] {
		case "_mean":
			s.Mean = v
		case "_min":
			s.Min = v
		case "_max":
			s.Max = v
		case "_last":
			s.Last = v
		case "_count":
			s.Count = uint32(lpNum(f.v))
		}
	}
	for _, id := range order {
		r.Batch.Summaries = append(r.Batch.Summaries, *sums[id])
	}
}

// lpEvent decodes a gpusampler_event line.
func lpEvent(rec lpRecord, dev int) record.Event {
	ev := record.Event{Device: dev, StartNS: rec.ns}
	for _, t := range rec.tags {
		if t.k == "kind" {
			ev.Kind = record.EventKind(t.v)
		}
	}
	for _, f := range rec.fields {
		switch {
		case f.k == "message" && f.v.Kind() == lineprotocol.String:
			if ev.Message = f.v.StringV(); ev.Message == string(ev.Kind) {
				ev.Message = "" // written in place of an empty message
			}
		case f.k == "end_ns" && f.v.Kind() == lineprotocol.Int:
			ev.EndNS = f.v.IntV()
		case strings.HasPrefix(f.k, "attr_") && f.v.Kind() == lineprotocol.String:
			ev.Attrs = append(ev.Attrs, record.Attr{Key: f.k[len("attr_"):], Value: f.v.StringV()})
		}
	}
	return ev
}

// lpSelf decodes a gpusampler_self line: its scope tags and counters.
func lpSelf(rec lpRecord, attrs []record.Attr) record.Event {
	ev := record.Event{Kind: record.EventSelf, Device: -1, StartNS: rec.ns, EndNS: rec.ns}
	if len(attrs) > 0 {
		ev.Attrs = attrs
	}
	for _, f := range rec.fields {
		ev.Fields = append(ev.Fields, record.Field{Key: f.k, Value: lpNum(f.v), Int: f.v.Kind() == lineprotocol.Int})
	}
	return ev
}

// lpProcess decodes an nvidia_smi_process line.
func lpProcess(rec lpRecord, dev int, attrs []record.Attr) record.Event {
	ev := record.Event{Kind: record.EventProcess, Device: dev, StartNS: rec.ns, EndNS: rec.ns, Attrs: attrs}
	for _, f := range rec.fields {
		switch {
		case f.k == record.ProcessAttrCmdline && f.v.Kind() == lineprotocol.String:
			ev.Attrs = append(ev.Attrs, record.Attr{Key: record.ProcessAttrCmdline, Value: f.v.StringV()})
		case f.v.Kind() == lineprotocol.Float || f.v.Kind() == lineprotocol.Int || f.v.Kind() == lineprotocol.Uint:
			key := f.k
			if key == "used_memory" {
				key = record.ProcessFieldUsedMemory
			}
			ev.Fields = append(ev.Fields, record.Field{Key: key, Value: lpNum(f.v), Int: f.v.Kind() != lineprotocol.Float})
		}
	}
	return ev
}
