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

	"github.com/gpusampler/gpusampler/outputs/encoding/jsonl"
	"github.com/gpusampler/gpusampler/outputs/encoding/lineproto"
	"github.com/gpusampler/gpusampler/sampler"
)

// catalog is the metric catalog the decoders map names with. Records of
// metrics it does not know (a newer sender) are skipped.
var catalog = sampler.DefaultCatalog

// influxNames maps line-protocol field names onto catalog metrics.
var influxNames = func() map[string]*sampler.Metric {
	m := map[string]*sampler.Metric{}
	for _, x := range catalog.All() {
		m[x.Influx().Name] = catalog.Get(x.ID)
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
		m := catalog.Lookup(s.Metric)
		if m == nil {
			return nil // a metric this decoder does not know
		}
		v, _, err := number(s.Value)
		if err != nil {
			return fmt.Errorf("value: %w", err)
		}
		x := sampler.Sample{TimeNS: s.Time, Value: v, Device: s.GPU, Metric: m.ID}
		if s.PointRead {
			x.Flags |= sampler.FlagPointRead
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
		m := catalog.Lookup(s.Metric)
		if m == nil {
			return nil
		}
		u := sampler.Summary{StartNS: s.Time, IntervalNS: s.IntervalNS, Count: s.Count, Device: s.GPU, Metric: m.ID}
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
		ev := sampler.Event{Kind: sampler.EventKind(e.Kind), Device: e.GPU, StartNS: e.StartNS, EndNS: e.EndNS, Message: e.Message}
		for _, k := range slices.Sorted(maps.Keys(e.Attrs)) {
			ev.Attrs = append(ev.Attrs, sampler.Attr{Key: k, Value: e.Attrs[k]})
		}
		r.Batch.Events = append(r.Batch.Events, ev)
		r.noteUUID(e.GPU, e.UUID)
	case "self":
		ms, err := members(line)
		if err != nil {
			return err
		}
		ev := sampler.Event{Kind: sampler.EventSelf, Device: -1}
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
					ev.Fields = append(ev.Fields, sampler.Field{Key: f.key, Value: v, Int: isInt})
				}
			default:
				var s string
				if err := json.Unmarshal(m.raw, &s); err != nil {
					return fmt.Errorf("self attribute %s: %w", m.key, err)
				}
				ev.Attrs = append(ev.Attrs, sampler.Attr{Key: m.key, Value: s})
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
// order written.
func (r *Records) jsonProcess(line []byte) (sampler.Event, error) {
	ms, err := members(line)
	if err != nil {
		return sampler.Event{}, err
	}
	ev := sampler.Event{Kind: sampler.EventProcess}
	uuid := ""
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
					key = sampler.ProcessAttrType
				}
				ev.Attrs = append(ev.Attrs, sampler.Attr{Key: key, Value: v})
				continue
			}
			v, isInt, err := number(m.raw)
			if err != nil {
				return ev, fmt.Errorf("process field %s: %w", m.key, err)
			}
			ev.Fields = append(ev.Fields, sampler.Field{Key: m.key, Value: v, Int: isInt})
		}
	}
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

func (r *Records) lpLine(dec *lineprotocol.Decoder) error {
	meas, err := dec.Measurement()
	if err != nil {
		return err
	}
	measurement := string(meas)
	var tags []lpTag
	for {
		k, v, err := dec.NextTag()
		if err != nil {
			return err
		}
		if k == nil {
			break
		}
		tags = append(tags, lpTag{string(k), string(v)})
	}
	type field struct {
		k string
		v lineprotocol.Value
	}
	var fields []field
	for {
		k, v, err := dec.NextField()
		if err != nil {
			return err
		}
		if k == nil {
			break
		}
		fields = append(fields, field{string(k), v})
	}
	ts, err := dec.Time(lineprotocol.Nanosecond, epoch)
	if err != nil {
		return err
	}
	ns := ts.UnixNano()
	num := func(v lineprotocol.Value) float64 {
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
	dev, uuid := -1, ""
	var globals map[string]string
	attrs := []sampler.Attr{}
	var procAttrs []sampler.Attr
	for _, t := range tags {
		if measurement == lineproto.ProcessMeasurement && (t.k == sampler.ProcessAttrName || t.k == sampler.ProcessAttrType) {
			procAttrs = append(procAttrs, sampler.Attr{Key: t.k, Value: t.v})
			continue
		}
		switch t.k {
		case "index":
			n, err := strconv.Atoi(t.v)
			if err != nil || n < 0 || n > math.MaxUint16 {
				return fmt.Errorf("tag index=%q: not a device index", t.v)
			}
			dev = n
		case "host":
			r.Host = t.v
		case "uuid":
			uuid = t.v
		case "name", "pci_bus_id", "pstate", "simulated", "kind":
		default:
			if measurement == lineproto.SelfMeasurement {
				attrs = append(attrs, sampler.Attr{Key: t.k, Value: t.v})
				continue
			}
			if globals == nil {
				globals = map[string]string{}
			}
			globals[t.k] = t.v
		}
	}
	if globals != nil {
		r.Tags = globals
	}
	if dev >= 0 {
		r.noteUUID(dev, uuid)
	}
	switch measurement {
	case lineproto.Measurement:
		if dev < 0 {
			return fmt.Errorf("%s line without an index tag", measurement)
		}
		var flags sampler.Flags
		for _, f := range fields {
			if f.k == "point_read" && f.v.Kind() == lineprotocol.Bool && f.v.BoolV() {
				flags |= sampler.FlagPointRead
			}
		}
		sums := map[sampler.MetricID]*sampler.Summary{}
		var order []sampler.MetricID
		for _, f := range fields {
			if m := influxNames[f.k]; m != nil {
				n := m.Influx()
				v := num(f.v) / n.Scale
				if m.Type == sampler.Int {
					v = math.Round(v)
				}
				r.Batch.Samples = append(r.Batch.Samples, sampler.Sample{TimeNS: ns, Value: v, Device: uint16(dev), Metric: m.ID, Flags: flags})
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
				s = &sampler.Summary{StartNS: ns, Device: uint16(dev), Metric: m.ID}
				sums[m.ID] = s
				order = append(order, m.ID)
			}
			v := num(f.v) / m.Influx().Scale
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
				s.Count = uint32(num(f.v))
			}
		}
		for _, id := range order {
			r.Batch.Summaries = append(r.Batch.Summaries, *sums[id])
		}
	case lineproto.EventMeasurement:
		ev := sampler.Event{Device: dev, StartNS: ns}
		for _, t := range tags {
			if t.k == "kind" {
				ev.Kind = sampler.EventKind(t.v)
			}
		}
		for _, f := range fields {
			switch {
			case f.k == "message" && f.v.Kind() == lineprotocol.String:
				if ev.Message = f.v.StringV(); ev.Message == string(ev.Kind) {
					ev.Message = "" // written in place of an empty message
				}
			case f.k == "end_ns" && f.v.Kind() == lineprotocol.Int:
				ev.EndNS = f.v.IntV()
			case strings.HasPrefix(f.k, "attr_") && f.v.Kind() == lineprotocol.String:
				ev.Attrs = append(ev.Attrs, sampler.Attr{Key: f.k[len("attr_"):], Value: f.v.StringV()})
			}
		}
		r.Batch.Events = append(r.Batch.Events, ev)
	case lineproto.SelfMeasurement:
		ev := sampler.Event{Kind: sampler.EventSelf, Device: -1, StartNS: ns, EndNS: ns}
		if len(attrs) > 0 {
			ev.Attrs = attrs
		}
		for _, f := range fields {
			ev.Fields = append(ev.Fields, sampler.Field{Key: f.k, Value: num(f.v), Int: f.v.Kind() == lineprotocol.Int})
		}
		r.Batch.Events = append(r.Batch.Events, ev)
	case lineproto.ProcessMeasurement:
		if dev < 0 {
			return fmt.Errorf("%s line without an index tag", measurement)
		}
		ev := sampler.Event{Kind: sampler.EventProcess, Device: dev, StartNS: ns, EndNS: ns, Attrs: procAttrs}
		for _, f := range fields {
			switch {
			case f.k == sampler.ProcessAttrCmdline && f.v.Kind() == lineprotocol.String:
				ev.Attrs = append(ev.Attrs, sampler.Attr{Key: sampler.ProcessAttrCmdline, Value: f.v.StringV()})
			case f.v.Kind() == lineprotocol.Float || f.v.Kind() == lineprotocol.Int || f.v.Kind() == lineprotocol.Uint:
				key := f.k
				if key == "used_memory" {
					key = sampler.ProcessFieldUsedMemory
				}
				ev.Fields = append(ev.Fields, sampler.Field{Key: key, Value: num(f.v), Int: f.v.Kind() != lineprotocol.Float})
			}
		}
		r.Batch.Events = append(r.Batch.Events, ev)
	}
	return nil
}
