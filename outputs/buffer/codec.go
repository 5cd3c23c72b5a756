package buffer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gpusampler/gpusampler/sampler"
)

// The batch codec: a compact, versioned binary form of a sampler.Batch, used
// as the payload of every queued entry (memory and disk alike).
//
//	payload  = version:byte(1) seq:uvarint
//	           ndev:uvarint device*  nsmp:uvarint sample*  nev:uvarint event*
//	device   = index:varint uuid name pci serial:string mem:uvarint
//	           driver backend:string simulated:byte temps:4×fixed64 gen:uvarint
//	sample   = dtime:varint (TimeNS minus the previous sample's, zig-zag)
//	           value:fixed64 device:uvarint metric:uvarint flags:uvarint
//	event    = kind:string device:varint start end:varint message:string
//	           nattr:uvarint (key value:string)*
//	string   = len:uvarint bytes
//
// fixed64 is little-endian IEEE 754 bits. A sample costs 11–30 bytes (about
// 15 for samples 10–100 ms apart) against 32 in memory.
//
// Decoding never panics and never allocates more than the input can
// describe: every count is checked against the bytes left before anything
// is allocated.

const codecVersion = 1

// Minimum encoded sizes, used to bound counts before allocating.
const (
	minDeviceBytes = 1 + 4 + 1 + 2 + 1 + 4*8 + 1 // index, 6 strings, mem, simulated, temps, gen
	minSampleBytes = 1 + 8 + 1 + 1 + 1
	minEventBytes  = 1 + 1 + 1 + 1 + 1 + 1
	minAttrBytes   = 2
)

// errCorruptPayload is wrapped by every decode error.
var errCorruptPayload = errors.New("buffer: corrupt batch payload")

// appendBatch appends the encoding of b to dst and returns the extended
// slice. It does not retain b.
func appendBatch(dst []byte, b *sampler.Batch) []byte {
	dst = append(dst, codecVersion)
	dst = binary.AppendUvarint(dst, b.Seq)
	dst = binary.AppendUvarint(dst, uint64(len(b.Devices)))
	for i := range b.Devices {
		d := &b.Devices[i]
		dst = binary.AppendVarint(dst, int64(d.Index))
		dst = appendString(dst, d.UUID)
		dst = appendString(dst, d.Name)
		dst = appendString(dst, d.PCIBusID)
		dst = appendString(dst, d.Serial)
		dst = binary.AppendUvarint(dst, d.MemoryTotalMiB)
		dst = appendString(dst, d.DriverVersion)
		dst = appendString(dst, d.Backend)
		if d.Simulated {
			dst = append(dst, 1)
		} else {
			dst = append(dst, 0)
		}
		for _, t := range [...]float64{d.SlowdownTempC, d.ShutdownTempC, d.MaxOperatingTempC, d.MemoryMaxTempC} {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(t))
		}
		dst = binary.AppendUvarint(dst, d.Generation)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Samples)))
	var prev int64
	for i := range b.Samples {
		s := &b.Samples[i]
		dst = binary.AppendVarint(dst, s.TimeNS-prev)
		prev = s.TimeNS
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(s.Value))
		dst = binary.AppendUvarint(dst, uint64(s.Device))
		dst = binary.AppendUvarint(dst, uint64(s.Metric))
		dst = binary.AppendUvarint(dst, uint64(s.Flags))
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Events)))
	for i := range b.Events {
		e := &b.Events[i]
		dst = appendString(dst, string(e.Kind))
		dst = binary.AppendVarint(dst, int64(e.Device))
		dst = binary.AppendVarint(dst, e.StartNS)
		dst = binary.AppendVarint(dst, e.EndNS)
		dst = appendString(dst, e.Message)
		dst = binary.AppendUvarint(dst, uint64(len(e.Attrs)))
		for _, a := range e.Attrs {
			dst = appendString(dst, a.Key)
			dst = appendString(dst, a.Value)
		}
	}
	return dst
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// decodeBatch decodes data into dst, reusing dst's slices' capacity. dst is
// reset first. The decoded batch shares nothing with data. Trailing bytes
// are an error.
func decodeBatch(dst *sampler.Batch, data []byte) error {
	dst.Reset()
	d := decoder{buf: data}
	if v := d.byte(); d.err == nil && v != codecVersion {
		return fmt.Errorf("%w: version %d", errCorruptPayload, v)
	}
	dst.Seq = d.uvarint()
	n := d.count(minDeviceBytes)
	for range n {
		var dev sampler.Device
		dev.Index = d.int()
		dev.UUID = d.string()
		dev.Name = d.string()
		dev.PCIBusID = d.string()
		dev.Serial = d.string()
		dev.MemoryTotalMiB = d.uvarint()
		dev.DriverVersion = d.string()
		dev.Backend = d.string()
		switch d.byte() {
		case 0:
		case 1:
			dev.Simulated = true
		default:
			d.fail("device simulated flag")
		}
		dev.SlowdownTempC = d.float()
		dev.ShutdownTempC = d.float()
		dev.MaxOperatingTempC = d.float()
		dev.MemoryMaxTempC = d.float()
		dev.Generation = d.uvarint()
		if d.err != nil {
			break
		}
		dst.Devices = append(dst.Devices, dev)
	}
	n = d.count(minSampleBytes)
	if d.err == nil {
		dst.Samples = growSamples(dst.Samples, n)
	}
	var prev int64
	for range n {
		var s sampler.Sample
		prev += d.varint()
		s.TimeNS = prev
		s.Value = d.float()
		s.Device = uint16(d.uvarintMax(math.MaxUint16, "sample device"))
		s.Metric = sampler.MetricID(d.uvarintMax(math.MaxUint16, "sample metric"))
		s.Flags = sampler.Flags(d.uvarintMax(math.MaxUint16, "sample flags"))
		if d.err != nil {
			break
		}
		dst.Samples = append(dst.Samples, s)
	}
	n = d.count(minEventBytes)
	for range n {
		var e sampler.Event
		e.Kind = sampler.EventKind(d.string())
		e.Device = d.int()
		e.StartNS = d.varint()
		e.EndNS = d.varint()
		e.Message = d.string()
		if na := d.count(minAttrBytes); na > 0 {
			e.Attrs = make([]sampler.Attr, 0, na)
			for range na {
				k, v := d.string(), d.string()
				if d.err != nil {
					break
				}
				e.Attrs = append(e.Attrs, sampler.Attr{Key: k, Value: v})
			}
		}
		if d.err != nil {
			break
		}
		dst.Events = append(dst.Events, e)
	}
	if d.err == nil && len(d.buf) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.buf)))
	}
	if d.err != nil {
		dst.Reset()
		return d.err
	}
	return nil
}

func growSamples(s []sampler.Sample, n int) []sampler.Sample {
	if cap(s) < n {
		return make([]sampler.Sample, 0, n)
	}
	return s[:0]
}

// decoder reads from buf; the first error sticks and every later read
// returns a zero value.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errCorruptPayload, what)
	}
	d.buf = nil
}

func (d *decoder) byte() byte {
	if len(d.buf) < 1 {
		d.fail("truncated")
		return 0
	}
	v := d.buf[0]
	d.buf = d.buf[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) uvarintMax(max uint64, what string) uint64 {
	v := d.uvarint()
	if v > max {
		d.fail(what + " out of range")
		return 0
	}
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) int() int {
	v := d.varint()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("int out of range")
		return 0
	}
	return int(v)
}

func (d *decoder) float() float64 {
	if len(d.buf) < 8 {
		d.fail("truncated")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(d.buf))
	d.buf = d.buf[8:]
	return v
}

// count reads an element count and checks that the bytes left can hold that
// many elements of at least minSize bytes each.
func (d *decoder) count(minSize int) int {
	v := d.uvarint()
	if d.err != nil {
		return 0
	}
	if v > uint64(len(d.buf)/minSize) {
		d.fail("count exceeds payload")
		return 0
	}
	return int(v)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.buf)) {
		d.fail("string exceeds payload")
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}
