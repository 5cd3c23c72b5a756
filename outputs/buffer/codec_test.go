package buffer

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gpusampler/gpusampler/sampler"
)

func TestCodecRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []*sampler.Batch{
		{Seq: 1},
		testBatch(10, 50),
		{Seq: math.MaxUint64, Samples: []sampler.Sample{{TimeNS: math.MinInt64, Value: math.Inf(-1), Device: math.MaxUint16,
			Metric: math.MaxUint16, Flags: math.MaxUint16}, {TimeNS: math.MaxInt64, Value: -0.0}}},
	}
	for i := range 200 {
		cases = append(cases, randomBatch(r, uint64(i)))
	}
	var got sampler.Batch
	for i, want := range cases {
		p := encode(want)
		if err := decodeBatch(&got, p); err != nil {
			t.Fatalf("case %d: decode: %v", i, err)
		}
		if !batchEqual(&got, want) {
			t.Fatalf("case %d: round trip differs:\n got %+v\nwant %+v", i, got, *want)
		}
	}
}

// batchEqual compares batches, treating nil and empty slices alike.
func batchEqual(a, b *sampler.Batch) bool {
	if a.Seq != b.Seq || len(a.Devices) != len(b.Devices) || len(a.Samples) != len(b.Samples) || len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Samples {
		x, y := a.Samples[i], b.Samples[i]
		if math.Float64bits(x.Value) != math.Float64bits(y.Value) {
			return false
		}
		x.Value, y.Value = 0, 0
		if x != y {
			return false
		}
	}
	for i := range a.Devices {
		if a.Devices[i] != b.Devices[i] {
			return false
		}
	}
	for i := range a.Events {
		x, y := a.Events[i], b.Events[i]
		if len(x.Attrs) == 0 && len(y.Attrs) == 0 {
			x.Attrs, y.Attrs = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func TestCodecRejectsCorruption(t *testing.T) {
	p := encode(testBatch(10, 20))
	var b sampler.Batch
	for n := range len(p) {
		if err := decodeBatch(&b, p[:n]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: decoded without error", n, len(p))
		}
	}
	if err := decodeBatch(&b, append(bytes.Clone(p), 0)); err == nil {
		t.Fatal("trailing byte: decoded without error")
	}
	// A huge count must fail before allocating.
	huge := []byte{codecVersion, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}
	if err := decodeBatch(&b, huge); err == nil {
		t.Fatal("huge device count: decoded without error")
	}
}

func TestCodecDecodeReusesBatch(t *testing.T) {
	p := encode(testBatch(3, 100))
	var b sampler.Batch
	if err := decodeBatch(&b, p); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = decodeBatch(&b, p) }); n != 0 {
		t.Errorf("decode of a sample-only batch into a reused Batch: %v allocs, want 0", n)
	}
}

// FuzzDecode: no input panics, and whatever decodes re-encodes to bytes
// that decode to the same batch.
func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	f.Add([]byte{})
	f.Add([]byte{codecVersion})
	f.Add(encode(testBatch(10, 3)))
	for i := range 8 {
		f.Add(encode(randomBatch(r, uint64(i))))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var b sampler.Batch
		if decodeBatch(&b, data) != nil {
			return
		}
		p := encode(&b)
		var b2 sampler.Batch
		if err := decodeBatch(&b2, p); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if !bytes.Equal(encode(&b2), p) {
			t.Fatal("decode(encode(x)) differs")
		}
	})
}

// FuzzScanSegment: arbitrary segment bytes never panic the scanner, and
// every record it reports is inside the data and passes its checksum.
func FuzzScanSegment(f *testing.F) {
	var seg []byte
	seg = append(seg, segMagic...)
	for i := range 4 {
		seg = appendFrame(seg, encode(testBatch(uint64(i+1), 5)), 5, int64(i))
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-7])
	f.Add([]byte(segMagic + frameMagic + "\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		frames, bad := scanSegment(data, segHeaderSize)
		for _, fr := range frames {
			if fr.off < 0 || fr.off+fr.total() > int64(len(data)) {
				t.Fatalf("record %+v outside %d bytes", fr, len(data))
			}
			if _, ok := parseFrame(data, fr.off); !ok {
				t.Fatalf("record %+v does not parse", fr)
			}
		}
		for _, r := range bad {
			if r.start >= r.end || r.end > int64(len(data)) {
				t.Fatalf("bad region %+v outside %d bytes", r, len(data))
			}
		}
	})
}
