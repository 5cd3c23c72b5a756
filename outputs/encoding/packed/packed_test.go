package packed_test

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/gpusampler/gpusampler/outputs/encoding/packed"
	"github.com/gpusampler/gpusampler/sampler"
)

func testBatch() *sampler.Batch {
	const t0 = 1_790_000_000_000_000_000
	return &sampler.Batch{Seq: 42,
		Devices: []sampler.Device{{Index: 0, UUID: "GPU-a", Name: "NVIDIA H200", PCIBusID: "00000000:17:00.0", Serial: "123",
			MemoryTotalMiB: 143771, DriverVersion: "570.1", Backend: "nvml", SlowdownTempC: 89, ShutdownTempC: 92,
			MaxOperatingTempC: 87, MemoryMaxTempC: 95, Generation: 3},
			{Index: 1, UUID: "GPU-b", Backend: "sim", Simulated: true}},
		Samples: []sampler.Sample{
			{TimeNS: t0, Value: 612.5, Device: 0, Metric: sampler.MetricPowerDraw},
			{TimeNS: t0 - 5, Value: math.Inf(1), Device: 1, Metric: sampler.MetricUtilGPU, Flags: sampler.FlagPointRead},
			{TimeNS: -7, Value: -0.0, Device: 65535, Metric: 65535, Flags: 65535},
			{TimeNS: math.MaxInt64, Value: 1e300, Device: 3, Metric: sampler.MetricEnergy},
		},
		Summaries: []sampler.Summary{{StartNS: t0, IntervalNS: 1e9, Mean: 1, Min: 0.5, Max: 2, Last: 1.5, Count: 10, Device: 1, Metric: sampler.MetricTempGPU},
			{StartNS: math.MinInt64, IntervalNS: -1, Count: math.MaxUint32, Device: 65535, Metric: 1}},
		Events: []sampler.Event{{Kind: sampler.EventXID, Device: 0, StartNS: t0, EndNS: t0, Message: "Xid 79",
			Attrs: []sampler.Attr{{Key: "xid", Value: "79"}, {Key: "a", Value: ""}}},
			{Kind: sampler.EventSelf, Device: -1, StartNS: t0, Fields: []sampler.Field{{Key: "read", Value: 12, Int: true}, {Key: "r", Value: 0.5}}}},
	}
}

func TestRoundTrip(t *testing.T) {
	b := testBatch()
	meta := &packed.Meta{Host: "node7", Tags: []packed.Tag{{"cluster", "c1"}}, UUIDs: []packed.DeviceRef{{0, "GPU-a"}, {-1, ""}}}
	data := packed.Append([]byte("prefix"), b, meta)[len("prefix"):]
	var got sampler.Batch
	m, err := packed.Decode(data, &got)
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
	data = packed.Append(nil, &sampler.Batch{}, nil)
	if _, err := packed.Decode(data, &got); err != nil || got.Len() != 0 {
		t.Fatalf("empty: %v, %d records", err, got.Len())
	}
}

func TestDecodeRejects(t *testing.T) {
	good := packed.Append(nil, testBatch(), &packed.Meta{Host: "h"})
	var b sampler.Batch
	for name, data := range map[string][]byte{
		"empty":     nil,
		"magic":     []byte("XXXX\x01"),
		"truncated": good[:len(good)-3],
		"trailing":  append(append([]byte(nil), good...), 0),
		"huge count": func() []byte {
			d := packed.Append(nil, &sampler.Batch{}, nil)
			// tags count → 2^62
			return append(d[:len("GSPK")+3], 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40)
		}(),
	} {
		if _, err := packed.Decode(data, &b); !errors.Is(err, packed.ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
	v2 := append([]byte(nil), good...)
	v2[4] = 2
	if _, err := packed.Decode(v2, &b); err == nil || errors.Is(err, packed.ErrFormat) {
		t.Errorf("version 2: err = %v, want a version error", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(packed.Append(nil, testBatch(), &packed.Meta{Host: "h", Tags: []packed.Tag{{"k", "v"}}}))
	f.Add(packed.Append(nil, &sampler.Batch{}, nil))
	f.Add([]byte("GSPK\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var b sampler.Batch
		meta, err := packed.Decode(data, &b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes.
		again := packed.Append(nil, &b, &meta)
		if string(again) != string(data) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", data, again)
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	batch := &sampler.Batch{Seq: 1}
	for i := range 4096 {
		batch.Samples = append(batch.Samples, sampler.Sample{TimeNS: 1.79e18 + int64(i)*1e6, Value: float64(i % 700), Metric: sampler.MetricPowerDraw})
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = packed.Append(buf[:0], batch, nil)
	}
	b.ReportMetric(float64(len(buf))/4096, "B/sample")
	b.ReportMetric(float64(b.N)*4096/b.Elapsed().Seconds(), "samples/s")
}
