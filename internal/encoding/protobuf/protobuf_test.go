package protobuf_test

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/protobuf"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
)

func testBatch() *record.Batch {
	const t0 = 1_790_000_000_000_000_000
	return &record.Batch{Seq: 42,
		Devices: []record.Device{{Index: 0, UUID: "GPU-a", Name: "NVIDIA H200", PCIBusID: "00000000:17:00.0", Serial: "123",
			MemoryTotalMiB: 143771, DriverVersion: "570.1", Backend: "nvml", SlowdownTempC: 89, ShutdownTempC: 92,
			MaxOperatingTempC: 87, MemoryMaxTempC: 95, Generation: 3},
			{Index: 1, UUID: "GPU-b", Backend: "sim", Simulated: true}},
		Samples: []record.Sample{
			{TimeNS: t0, Value: 612.5, Device: 0, Metric: catalog.MetricPowerDraw},
			{TimeNS: t0 - 5, Value: math.Inf(1), Device: 1, Metric: catalog.MetricUtilGPU, Flags: record.FlagPointRead},
			{TimeNS: -7, Value: -0.0, Device: 65535, Metric: 65535, Flags: 65535},
			{TimeNS: math.MaxInt64, Value: 1e300, Device: 3, Metric: catalog.MetricEnergy},
		},
		Summaries: []record.Summary{{StartNS: t0, IntervalNS: 1e9, Mean: 1, Min: 0.5, Max: 2, Last: 1.5, Count: 10, Device: 1, Metric: catalog.MetricTempGPU},
			{StartNS: math.MinInt64, IntervalNS: -1, Count: math.MaxUint32, Device: 65535, Metric: 1}},
		Events: []record.Event{{Kind: record.EventXID, Device: 0, StartNS: t0, EndNS: t0, Message: "Xid 79",
			Attrs: []record.Attr{{Key: "xid", Value: "79"}, {Key: "a", Value: ""}}},
			{Kind: record.EventSelf, Device: -1, StartNS: t0, Fields: []record.Field{{Key: "read", Value: 12, Int: true}, {Key: "r", Value: 0.5}}}},
	}
}

func TestRoundTrip(t *testing.T) {
	b := testBatch()
	meta := &protobuf.Meta{Host: "node7", Tags: []protobuf.Tag{{"cluster", "c1"}, {"rack", "r2"}},
		UUIDs: []protobuf.DeviceRef{{-1, ""}, {0, "GPU-a"}}}
	data := protobuf.Append([]byte("prefix"), b, meta)[len("prefix"):]
	var got record.Batch
	m, err := protobuf.Decode(data, &got)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&m, meta) {
		t.Errorf("meta: got %+v, want %+v", m, *meta)
	}
	// -0.0 and +0.0 compare equal under DeepEqual; check the bits.
	if math.Float64bits(got.Samples[2].Value) != math.Float64bits(-0.0) {
		t.Errorf("-0 lost")
	}
	if !reflect.DeepEqual(&got, b) {
		t.Errorf("batch:\n got %+v\nwant %+v", got, *b)
	}
	// Empty batch, nil meta.
	data = protobuf.Append(nil, &record.Batch{}, nil)
	if _, err := protobuf.Decode(data, &got); err != nil || got.Len() != 0 {
		t.Fatalf("empty: %v, %d records", err, got.Len())
	}
}

// The payload is a plain recordpb.Batch: any protobuf reader decodes it,
// and the samples' times travel as deltas (time_delta_ns).
func TestPayloadIsRecordsBatch(t *testing.T) {
	data := protobuf.Append(nil, testBatch(), &protobuf.Meta{Host: "node7"})
	var m recordpb.Batch
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if string(m.ProtoReflect().Descriptor().FullName()) != protobuf.MessageName {
		t.Errorf("message %s, want %s", m.ProtoReflect().Descriptor().FullName(), protobuf.MessageName)
	}
	if m.GetHost() != "node7" || m.GetSeq() != 42 || len(m.GetSamples().GetTimeNs()) != 0 || len(m.GetSamples().GetTimeDeltaNs()) != 4 {
		t.Errorf("message %v", &m)
	}
}

// Invalid UTF-8 (a driver string, say) is replaced, not a failure.
func TestInvalidUTF8(t *testing.T) {
	b := &record.Batch{Devices: []record.Device{{Name: "bad\xffname"}}}
	var got record.Batch
	if _, err := protobuf.Decode(protobuf.Append(nil, b, &protobuf.Meta{Host: "h\xfe"}), &got); err != nil {
		t.Fatal(err)
	}
	if got.Devices[0].Name != "bad\uFFFDname" {
		t.Errorf("name %q", got.Devices[0].Name)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := protobuf.Append(nil, testBatch(), &protobuf.Meta{Host: "h"})
	col := func(s *recordpb.SampleColumns) []byte {
		data, err := proto.Marshal(&recordpb.Batch{Samples: s})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	var b record.Batch
	for name, data := range map[string][]byte{
		"truncated":     good[:len(good)-2],
		"garbage":       []byte("GSPK\x01\x02\x03"),
		"huge length":   protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), nil)[:1],
		"columns":       col(&recordpb.SampleColumns{TimeNs: []int64{1, 2}, Value: []float64{1}, Device: []uint32{0, 0}, Metric: []uint32{1, 1}}),
		"both times":    col(&recordpb.SampleColumns{TimeNs: []int64{1}, TimeDeltaNs: []int64{1}, Value: []float64{1}, Device: []uint32{0}, Metric: []uint32{1}}),
		"device range":  col(&recordpb.SampleColumns{TimeNs: []int64{1}, Value: []float64{1}, Device: []uint32{70000}, Metric: []uint32{1}}),
		"summary range": mustMarshal(t, &recordpb.Batch{Summaries: &recordpb.SummaryColumns{StartNs: []int64{1}}}),
	} {
		if _, err := protobuf.Decode(data, &b); !errors.Is(err, protobuf.ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d records left after an error", name, b.Len())
		}
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	data, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func FuzzDecode(f *testing.F) {
	f.Add(protobuf.Append(nil, testBatch(), &protobuf.Meta{Host: "h", Tags: []protobuf.Tag{{"k", "v"}}}))
	f.Add(protobuf.Append(nil, &record.Batch{}, nil))
	f.Add([]byte("GSPK\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b record.Batch
		meta, err := protobuf.Decode(data, &b)
		if err != nil {
			return
		}
		// What decodes re-encodes to something that decodes the same.
		var again record.Batch
		meta2, err := protobuf.Decode(protobuf.Append(nil, &b, &meta), &again)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(meta, meta2) || !reflect.DeepEqual(b.Samples, again.Samples) || b.Len() != again.Len() {
			t.Fatalf("re-decoding differs")
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	batch := &record.Batch{Seq: 1}
	for i := range 4096 {
		batch.Samples = append(batch.Samples, record.Sample{TimeNS: 1.79e18 + int64(i)*1e6, Value: float64(i % 700), Metric: catalog.MetricPowerDraw})
	}
	var buf []byte
	var enc protobuf.Encoder
	b.ReportAllocs()
	for b.Loop() {
		buf = enc.Append(buf[:0], batch, nil)
	}
	b.ReportMetric(float64(len(buf))/4096, "B/sample")
	b.ReportMetric(float64(b.N)*4096/b.Elapsed().Seconds(), "samples/s")
}

// Append writes part of the message by hand: what it writes is the very
// message proto.Marshal makes of the same batch and meta (tags, UUIDs with
// a negative index, invalid UTF-8 replaced; an empty batch).
func TestAppendIsProtoMarshal(t *testing.T) {
	for _, tc := range []struct {
		b    *record.Batch
		meta *protobuf.Meta
	}{
		{testBatch(), &protobuf.Meta{Host: "node7", Tags: []protobuf.Tag{{"cluster", "c1"}, {"bad\xff", "v\xfe"}, {"", ""}},
			UUIDs: []protobuf.DeviceRef{{-1, ""}, {0, "GPU-a"}, {300, "GPU-\xff"}}}},
		{testBatch(), nil},
		{&record.Batch{}, &protobuf.Meta{Host: "h"}},
		{&record.Batch{}, nil},
	} {
		var want recordpb.Batch
		recordpb.FillBatch(&want, tc.b, true)
		if m := tc.meta; m != nil {
			want.Host = m.Host
			for _, tg := range m.Tags {
				if want.Tags == nil {
					want.Tags = map[string]string{}
				}
				want.Tags[strings.ToValidUTF8(tg.Key, "\uFFFD")] = strings.ToValidUTF8(tg.Value, "\uFFFD")
			}
			for _, r := range m.UUIDs {
				if want.DeviceUuids == nil {
					want.DeviceUuids = map[int32]string{}
				}
				want.DeviceUuids[int32(r.Index)] = strings.ToValidUTF8(r.UUID, "\uFFFD")
			}
		}
		wantBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(&want)
		if err != nil {
			t.Fatal(err)
		}
		var fromProto, got recordpb.Batch
		if err := proto.Unmarshal(wantBytes, &fromProto); err != nil {
			t.Fatal(err)
		}
		data := protobuf.Append(nil, tc.b, tc.meta)
		if err := proto.Unmarshal(data, &got); err != nil {
			t.Fatalf("%v: %v", tc.meta, err)
		}
		if !proto.Equal(&got, &fromProto) {
			t.Errorf("meta %+v:\n got %v\nwant %v", tc.meta, &got, &fromProto)
		}
		if len(data) != len(wantBytes) {
			t.Errorf("meta %+v: %d bytes, proto.Marshal %d", tc.meta, len(data), len(wantBytes))
		}
	}
}

// A batch with an Origin carries its host and tags in place of Meta's;
// the next batch without one carries Meta's again.
func TestAppendOrigin(t *testing.T) {
	var enc protobuf.Encoder
	meta := &protobuf.Meta{Host: "hostB", Tags: []protobuf.Tag{{Key: "cluster", Value: "west"}, {Key: "rack", Value: "r2"}}}
	for _, c := range []struct {
		origin *record.Origin
		want   protobuf.Meta
	}{
		{&record.Origin{Host: "hostA", Tags: map[string]string{"rack": "r1", "dc": "x"}},
			protobuf.Meta{Host: "hostA", Tags: []protobuf.Tag{{Key: "dc", Value: "x"}, {Key: "rack", Value: "r1"}}}},
		{nil, *meta},
		{&record.Origin{Host: "hostC"}, protobuf.Meta{Host: "hostC"}},
	} {
		b := &record.Batch{Seq: 1, Origin: c.origin, Samples: []record.Sample{{TimeNS: 1, Value: 2, Metric: 1}}}
		var got record.Batch
		m, err := protobuf.Decode(enc.Append(nil, b, meta), &got)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, c.want) || len(got.Samples) != 1 {
			t.Fatalf("origin %+v: meta %+v, %d samples; want %+v", c.origin, m, len(got.Samples), c.want)
		}
	}
}
