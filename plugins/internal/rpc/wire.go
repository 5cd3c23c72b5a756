// Package rpc is the Go side of the plugin protocol on both ends: Client
// (host side, one per plugin connection) and Server (plugin side), plus the
// conversions between sampler records and protocol messages. The plugins
// package supervises Clients; plugins/sdk and plugins/sdktest serve Servers.
package rpc

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/sampler"
	toml "github.com/pelletier/go-toml/v2"
)

// MaxMessageSize is the gRPC message limit both ends set (gRPC's default is
// 4 MiB). A sample costs about 21 bytes on the wire, so 64 MiB holds the
// largest batch a pump makes (max_batch ≤ 1<<20 samples) with room for
// events.
const MaxMessageSize = 64 << 20

// encodeBatch fills req from b and devs (the identities to send), reusing
// req's slices.
func encodeBatch(req *proto.WriteRequest, b *sampler.Batch, devs []sampler.Device) {
	req.Seq = b.Seq
	req.Devices = req.Devices[:0]
	for i := range devs {
		req.Devices = append(req.Devices, deviceToProto(&devs[i]))
	}
	if req.Samples == nil {
		req.Samples = &proto.SampleColumns{}
	}
	c := req.Samples
	n := len(b.Samples)
	c.TimeNs, c.Value = resize(c.TimeNs, n), resize(c.Value, n)
	c.Device, c.Metric, c.Flags = resize(c.Device, n), resize(c.Metric, n), resize(c.Flags, n)
	for i := range b.Samples {
		s := &b.Samples[i]
		c.TimeNs[i], c.Value[i] = s.TimeNS, s.Value
		c.Device[i], c.Metric[i], c.Flags[i] = uint32(s.Device), uint32(s.Metric), uint32(s.Flags)
	}
	clear(req.Events)
	req.Events = req.Events[:0]
	for i := range b.Events {
		req.Events = append(req.Events, eventToProto(&b.Events[i]))
	}
	if len(b.Summaries) == 0 {
		req.Summaries = nil
		return
	}
	m := len(b.Summaries)
	sc := &proto.SummaryColumns{StartNs: make([]int64, m), IntervalNs: make([]int64, m), Mean: make([]float64, m),
		Min: make([]float64, m), Max: make([]float64, m), Last: make([]float64, m), Count: make([]uint32, m),
		Device: make([]uint32, m), Metric: make([]uint32, m)}
	for i, s := range b.Summaries {
		sc.StartNs[i], sc.IntervalNs[i], sc.Mean[i], sc.Min[i], sc.Max[i], sc.Last[i] = s.StartNS, s.IntervalNS, s.Mean, s.Min, s.Max, s.Last
		sc.Count[i], sc.Device[i], sc.Metric[i] = s.Count, uint32(s.Device), uint32(s.Metric)
	}
	req.Summaries = sc
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// decodeBatch fills b (reset first) from req, checking that the columns
// agree. b's slices are reused.
func decodeBatch(req *proto.WriteRequest, b *sampler.Batch) error {
	b.Reset()
	b.Seq = req.GetSeq()
	for _, d := range req.GetDevices() {
		b.Devices = append(b.Devices, deviceFromProto(d))
	}
	if c := req.GetSamples(); c != nil {
		n := len(c.TimeNs)
		if len(c.Value) != n || len(c.Device) != n || len(c.Metric) != n || (len(c.Flags) != n && len(c.Flags) != 0) {
			return fmt.Errorf("samples: columns differ in length (time_ns %d, value %d, device %d, metric %d, flags %d)",
				n, len(c.Value), len(c.Device), len(c.Metric), len(c.Flags))
		}
		b.Samples = slices.Grow(b.Samples[:0], n)[:n]
		for i := range n {
			s := &b.Samples[i]
			s.TimeNS, s.Value, s.Device, s.Metric = c.TimeNs[i], c.Value[i], uint16(c.Device[i]), sampler.MetricID(c.Metric[i])
			s.Flags = 0
			if len(c.Flags) == n {
				s.Flags = sampler.Flags(c.Flags[i])
			}
		}
	}
	for _, e := range req.GetEvents() {
		b.Events = append(b.Events, eventFromProto(e))
	}
	if sc := req.GetSummaries(); sc != nil {
		m := len(sc.StartNs)
		if len(sc.IntervalNs) != m || len(sc.Mean) != m || len(sc.Min) != m || len(sc.Max) != m || len(sc.Last) != m ||
			len(sc.Count) != m || len(sc.Device) != m || len(sc.Metric) != m {
			return fmt.Errorf("summaries: columns differ in length")
		}
		for i := range m {
			b.Summaries = append(b.Summaries, sampler.Summary{StartNS: sc.StartNs[i], IntervalNS: sc.IntervalNs[i],
				Mean: sc.Mean[i], Min: sc.Min[i], Max: sc.Max[i], Last: sc.Last[i], Count: sc.Count[i],
				Device: uint16(sc.Device[i]), Metric: sampler.MetricID(sc.Metric[i])})
		}
	}
	return nil
}

func deviceToProto(d *sampler.Device) *proto.Device {
	return &proto.Device{Index: uint32(d.Index), Uuid: d.UUID, Name: d.Name, PciBusId: d.PCIBusID, Serial: d.Serial,
		MemoryTotalMib: d.MemoryTotalMiB, DriverVersion: d.DriverVersion, Backend: d.Backend, Simulated: d.Simulated,
		SlowdownTempC: d.SlowdownTempC, ShutdownTempC: d.ShutdownTempC, MaxOperatingTempC: d.MaxOperatingTempC,
		MemoryMaxTempC: d.MemoryMaxTempC, Generation: d.Generation}
}

func deviceFromProto(d *proto.Device) sampler.Device {
	return sampler.Device{Index: int(d.GetIndex()), UUID: d.GetUuid(), Name: d.GetName(), PCIBusID: d.GetPciBusId(),
		Serial: d.GetSerial(), MemoryTotalMiB: d.GetMemoryTotalMib(), DriverVersion: d.GetDriverVersion(),
		Backend: d.GetBackend(), Simulated: d.GetSimulated(), SlowdownTempC: d.GetSlowdownTempC(),
		ShutdownTempC: d.GetShutdownTempC(), MaxOperatingTempC: d.GetMaxOperatingTempC(),
		MemoryMaxTempC: d.GetMemoryMaxTempC(), Generation: d.GetGeneration()}
}

func eventToProto(e *sampler.Event) *proto.Event {
	p := &proto.Event{Kind: string(e.Kind), Device: int32(e.Device), StartNs: e.StartNS, EndNs: e.EndNS, Message: e.Message}
	if len(e.Attrs) > 0 {
		p.Attrs = make([]*proto.Attr, len(e.Attrs))
		for i, a := range e.Attrs {
			p.Attrs[i] = &proto.Attr{Key: a.Key, Value: a.Value}
		}
	}
	if len(e.Fields) > 0 {
		p.Fields = make([]*proto.Field, len(e.Fields))
		for i, f := range e.Fields {
			p.Fields[i] = &proto.Field{Key: f.Key, Value: f.Value, IsInt: f.Int}
		}
	}
	return p
}

func eventFromProto(p *proto.Event) sampler.Event {
	e := sampler.Event{Kind: sampler.EventKind(p.GetKind()), Device: int(p.GetDevice()), StartNS: p.GetStartNs(),
		EndNS: p.GetEndNs(), Message: p.GetMessage()}
	for _, a := range p.GetAttrs() {
		e.Attrs = append(e.Attrs, sampler.Attr{Key: a.GetKey(), Value: a.GetValue()})
	}
	for _, f := range p.GetFields() {
		e.Fields = append(e.Fields, sampler.Field{Key: f.GetKey(), Value: f.GetValue(), Int: f.GetIsInt()})
	}
	return e
}

// catalogToProto lists cat's metrics.
func catalogToProto(cat *sampler.Catalog) []*proto.MetricInfo {
	if cat == nil {
		cat = sampler.DefaultCatalog
	}
	all := cat.All()
	out := make([]*proto.MetricInfo, 0, len(all))
	for _, m := range all {
		out = append(out, &proto.MetricInfo{Id: uint32(m.ID), Name: m.Name, Unit: m.Unit, Group: string(m.Group)})
	}
	return out
}

// EncodeTable converts a decoded TOML table (as config.Output.Raw holds it)
// to the protocol's Table.
func EncodeTable(m map[string]any) (*proto.Table, error) {
	t := &proto.Table{Fields: make(map[string]*proto.Value, len(m))}
	for k, v := range m {
		pv, err := encodeValue(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		t.Fields[k] = pv
	}
	return t, nil
}

func encodeValue(v any) (*proto.Value, error) {
	switch x := v.(type) {
	case string:
		return &proto.Value{Kind: &proto.Value_StringValue{StringValue: x}}, nil
	case int64:
		return &proto.Value{Kind: &proto.Value_IntValue{IntValue: x}}, nil
	case int:
		return &proto.Value{Kind: &proto.Value_IntValue{IntValue: int64(x)}}, nil
	case float64:
		return &proto.Value{Kind: &proto.Value_FloatValue{FloatValue: x}}, nil
	case bool:
		return &proto.Value{Kind: &proto.Value_BoolValue{BoolValue: x}}, nil
	case []any:
		l := &proto.List{Values: make([]*proto.Value, len(x))}
		for i, e := range x {
			pv, err := encodeValue(e)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			l.Values[i] = pv
		}
		return &proto.Value{Kind: &proto.Value_ListValue{ListValue: l}}, nil
	case map[string]any:
		t, err := EncodeTable(x)
		if err != nil {
			return nil, err
		}
		return &proto.Value{Kind: &proto.Value_TableValue{TableValue: t}}, nil
	case time.Time:
		return &proto.Value{Kind: &proto.Value_DatetimeValue{DatetimeValue: x.Format(time.RFC3339Nano)}}, nil
	case toml.LocalDate, toml.LocalDateTime, toml.LocalTime:
		return &proto.Value{Kind: &proto.Value_DatetimeValue{DatetimeValue: fmt.Sprint(x)}}, nil
	}
	return nil, fmt.Errorf("unsupported value type %T", v)
}

// DecodeTable converts a protocol Table back to the form config.Table
// reads (strings, int64, float64, bool, []any, map[string]any; date-times
// stay strings).
func DecodeTable(t *proto.Table) map[string]any {
	m := make(map[string]any, len(t.GetFields()))
	for k, v := range t.GetFields() {
		m[k] = decodeValue(v)
	}
	return m
}

func decodeValue(v *proto.Value) any {
	switch x := v.GetKind().(type) {
	case *proto.Value_StringValue:
		return x.StringValue
	case *proto.Value_IntValue:
		return x.IntValue
	case *proto.Value_FloatValue:
		return x.FloatValue
	case *proto.Value_BoolValue:
		return x.BoolValue
	case *proto.Value_ListValue:
		out := make([]any, len(x.ListValue.GetValues()))
		for i, e := range x.ListValue.GetValues() {
			out[i] = decodeValue(e)
		}
		return out
	case *proto.Value_TableValue:
		return DecodeTable(x.TableValue)
	case *proto.Value_DatetimeValue:
		return x.DatetimeValue
	}
	return math.NaN()
}

// ConfigErrors converts the problems a config.Table collected to protocol
// errors (keys relative to the block).
func ConfigErrors(err error) []*proto.ConfigError {
	var out []*proto.ConfigError
	if es, ok := err.(config.Errors); ok {
		for _, e := range es {
			out = append(out, &proto.ConfigError{Key: e.Key, Message: e.Msg})
		}
		return out
	}
	if e, ok := err.(*config.Error); ok {
		return []*proto.ConfigError{{Key: e.Key, Message: e.Msg}}
	}
	return []*proto.ConfigError{{Message: err.Error()}}
}
