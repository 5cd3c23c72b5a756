// Package rpc is the Go side of the plugin protocol on both ends: Client
// (host side, one per plugin connection) and Server (plugin side), plus the
// conversions between sampler records and protocol messages. The plugins
// package supervises Clients; plugins/sdk and plugins/sdktest serve Servers.
package rpc

import (
	"fmt"
	"math"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
	toml "github.com/pelletier/go-toml/v2"
)

// MaxMessageSize is the gRPC message limit both ends set (gRPC's default is
// 4 MiB). A sample costs about 21 bytes on the wire, so 64 MiB holds the
// largest batch a pump makes (max_batch ≤ 1<<20 samples) with room for
// events.
const MaxMessageSize = 64 << 20

// encodeBatch fills req from b and devs (the identities to send), reusing
// req's slices. Samples carry absolute timestamps (time_ns); b.Origin goes
// in host and tags.
func encodeBatch(req *proto.WriteRequest, b *record.Batch, devs []record.Device) {
	req.Seq = b.Seq
	clear(req.Devices)
	req.Devices = req.Devices[:0]
	for i := range devs {
		req.Devices = append(req.Devices, recordpb.FromDevice(&devs[i]))
	}
	if req.Samples == nil {
		req.Samples = &recordpb.SampleColumns{}
	}
	req.Samples.Fill(b.Samples, false)
	clear(req.Events)
	req.Events = req.Events[:0]
	for i := range b.Events {
		req.Events = append(req.Events, recordpb.FromEvent(&b.Events[i]))
	}
	req.Summaries = recordpb.FromSummaries(b.Summaries)
	req.Host, req.Tags = recordpb.OriginFields(b.Origin)
}

// decodeBatch fills b (reset first) from req, checking that the columns
// agree, and b.Origin from host and tags. b's slices are reused.
func decodeBatch(req *proto.WriteRequest, b *record.Batch) error {
	if err := recordpb.ToBatchParts(req.GetSeq(), req.GetDevices(), req.GetSamples(), req.GetEvents(), req.GetSummaries(), b); err != nil {
		return err
	}
	b.Origin = recordpb.OriginOf(req.GetHost(), req.GetTags())
	return nil
}

// catalogToProto lists cat's metrics.
func catalogToProto(cat *catalog.Catalog) []*proto.MetricInfo {
	if cat == nil {
		cat = catalog.Default()
	}
	all := cat.All()
	out := make([]*proto.MetricInfo, 0, len(all))
	for _, m := range all {
		out = append(out, &proto.MetricInfo{Id: uint32(m.ID), Name: m.Name, Unit: m.Unit, Group: string(m.Group)})
	}
	return out
}

// EncodeTable converts a decoded TOML table (as outputs.Block.Raw holds it)
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
