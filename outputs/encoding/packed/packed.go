// Package packed is gpusampler's compact binary encoding of a batch: a
// versioned, columnar layout in which the samples of a batch travel as
// parallel arrays (time deltas as zig-zag varints, values as float64, device,
// metric and flags as varints), together with the device identities, window
// summaries, events, the batch's Seq and the sender's host and global tags.
// Decode restores exactly what Append encoded.
//
// The NATS output uses it as its "packed" encoding (content type
// ContentType). It should be unified with the plugin protocol's packed
// columnar batch (plugins/proto) once that lands: both describe the same
// records.
//
// Layout, version 1 (varint and uvarint as in encoding/binary; str is a
// uvarint length and that many bytes; f64 is 8 bytes little-endian IEEE 754):
//
//	magic    "GSPK"
//	version  byte (1)
//	seq      uvarint
//	host     str
//	tags     uvarint n, n × (key str, value str)
//	uuids    uvarint n, n × (index varint, uuid str)    devices referenced
//	devices  uvarint n, n × device
//	samples  uvarint n, then columns of n each:
//	           time   varint delta from the previous sample's time (the first from 0)
//	           value  f64
//	           device uvarint
//	           metric uvarint
//	           flags  uvarint
//	summaries uvarint n, then columns of n each:
//	           start varint delta (as time), interval varint,
//	           mean f64, min f64, max f64, last f64,
//	           count uvarint, device uvarint, metric uvarint
//	events   uvarint n, n × (kind str, device varint, start varint, end varint,
//	           message str, attrs uvarint n × (key str, value str),
//	           fields uvarint n × (key str, value f64, int byte))
//	device = index varint, uuid str, name str, pci_bus_id str, serial str,
//	         driver_version str, backend str, memory_total_mib uvarint,
//	         simulated byte, slowdown f64, shutdown f64, max_operating f64,
//	         memory_max f64, generation uvarint
//
// Nothing may follow the events. A decoder rejects other magics, versions
// it does not know, counts larger than the remaining bytes allow, values
// out of range (device and metric above 65535) and trailing bytes.
package packed

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gpusampler/gpusampler/sampler"
)

// Version is the layout version this package writes and reads.
const Version = 1

// ContentType is the content type of a packed message.
const ContentType = "application/x-gpusampler-packed"

const magic = "GSPK"

// Tag is one global tag (fleet identity) of the sender.
type Tag struct{ Key, Value string }

// DeviceRef names the UUID of a device that samples refer to by index, so
// that a consumer that missed the device's identity record still knows it.
type DeviceRef struct {
	Index int
	UUID  string
}

// Meta is what a message carries besides the batch: who sent it.
type Meta struct {
	Host  string
	Tags  []Tag
	UUIDs []DeviceRef
}

// Append appends the encoding of b (with meta) to dst and returns the
// extended slice. It does not retain b, meta or dst.
func Append(dst []byte, b *sampler.Batch, meta *Meta) []byte {
	if meta == nil {
		meta = &Meta{}
	}
	dst = append(dst, magic...)
	dst = append(dst, Version)
	dst = binary.AppendUvarint(dst, b.Seq)
	dst = appendStr(dst, meta.Host)
	dst = binary.AppendUvarint(dst, uint64(len(meta.Tags)))
	for _, t := range meta.Tags {
		dst = appendStr(appendStr(dst, t.Key), t.Value)
	}
	dst = binary.AppendUvarint(dst, uint64(len(meta.UUIDs)))
	for _, r := range meta.UUIDs {
		dst = appendStr(binary.AppendVarint(dst, int64(r.Index)), r.UUID)
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Devices)))
	for _, d := range b.Devices {
		dst = appendDevice(dst, d)
	}
	s := b.Samples
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	var prev int64
	for _, x := range s {
		dst = binary.AppendVarint(dst, x.TimeNS-prev)
		prev = x.TimeNS
	}
	for _, x := range s {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x.Value))
	}
	for _, x := range s {
		dst = binary.AppendUvarint(dst, uint64(x.Device))
	}
	for _, x := range s {
		dst = binary.AppendUvarint(dst, uint64(x.Metric))
	}
	for _, x := range s {
		dst = binary.AppendUvarint(dst, uint64(x.Flags))
	}
	u := b.Summaries
	dst = binary.AppendUvarint(dst, uint64(len(u)))
	prev = 0
	for _, x := range u {
		dst = binary.AppendVarint(dst, x.StartNS-prev)
		prev = x.StartNS
	}
	for _, x := range u {
		dst = binary.AppendVarint(dst, x.IntervalNS)
	}
	for _, col := range [...]func(sampler.Summary) float64{
		func(x sampler.Summary) float64 { return x.Mean }, func(x sampler.Summary) float64 { return x.Min },
		func(x sampler.Summary) float64 { return x.Max }, func(x sampler.Summary) float64 { return x.Last }} {
		for _, x := range u {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(col(x)))
		}
	}
	for _, x := range u {
		dst = binary.AppendUvarint(dst, uint64(x.Count))
	}
	for _, x := range u {
		dst = binary.AppendUvarint(dst, uint64(x.Device))
	}
	for _, x := range u {
		dst = binary.AppendUvarint(dst, uint64(x.Metric))
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.Events)))
	for _, e := range b.Events {
		dst = appendStr(dst, string(e.Kind))
		dst = binary.AppendVarint(dst, int64(e.Device))
		dst = binary.AppendVarint(dst, e.StartNS)
		dst = binary.AppendVarint(dst, e.EndNS)
		dst = appendStr(dst, e.Message)
		dst = binary.AppendUvarint(dst, uint64(len(e.Attrs)))
		for _, a := range e.Attrs {
			dst = appendStr(appendStr(dst, a.Key), a.Value)
		}
		dst = binary.AppendUvarint(dst, uint64(len(e.Fields)))
		for _, f := range e.Fields {
			dst = appendStr(dst, f.Key)
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(f.Value))
			dst = appendBool(dst, f.Int)
		}
	}
	return dst
}

func appendStr(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func appendF64(dst []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
}

func appendDevice(dst []byte, d sampler.Device) []byte {
	dst = binary.AppendVarint(dst, int64(d.Index))
	for _, s := range [...]string{d.UUID, d.Name, d.PCIBusID, d.Serial, d.DriverVersion, d.Backend} {
		dst = appendStr(dst, s)
	}
	dst = binary.AppendUvarint(dst, d.MemoryTotalMiB)
	dst = appendBool(dst, d.Simulated)
	for _, v := range [...]float64{d.SlowdownTempC, d.ShutdownTempC, d.MaxOperatingTempC, d.MemoryMaxTempC} {
		dst = appendF64(dst, v)
	}
	return binary.AppendUvarint(dst, d.Generation)
}

// ErrFormat is wrapped by every error about malformed input.
var ErrFormat = errors.New("packed: malformed batch")

// Decode decodes data into b (reset first; its capacity is reused) and
// returns the message's meta. Strings in the result do not alias data.
func Decode(data []byte, b *sampler.Batch) (Meta, error) {
	b.Reset()
	r := reader{buf: data}
	var meta Meta
	if len(data) < len(magic)+1 || string(data[:len(magic)]) != magic {
		return meta, fmt.Errorf("%w: not a packed batch (bad magic)", ErrFormat)
	}
	if v := data[len(magic)]; v != Version {
		return meta, fmt.Errorf("packed: version %d not supported (this decoder reads %d)", v, Version)
	}
	r.off = len(magic) + 1
	b.Seq = r.uvarint("seq")
	meta.Host = r.str("host")
	if n := r.count("tags", 2); n > 0 {
		meta.Tags = make([]Tag, n)
		for i := range meta.Tags {
			meta.Tags[i] = Tag{r.str("tag key"), r.str("tag value")}
		}
	}
	if n := r.count("uuids", 2); n > 0 {
		meta.UUIDs = make([]DeviceRef, n)
		for i := range meta.UUIDs {
			meta.UUIDs[i] = DeviceRef{r.int("uuid index"), r.str("uuid")}
		}
	}
	for n := r.count("devices", 42); n > 0 && r.err == nil; n-- {
		b.Devices = append(b.Devices, r.device())
	}
	if n := r.count("samples", 12); n > 0 {
		b.Samples = growSamples(b.Samples, n)
		var t int64
		for i := range b.Samples {
			t += r.varint("sample time")
			b.Samples[i].TimeNS = t
		}
		for i := range b.Samples {
			b.Samples[i].Value = r.f64("sample value")
		}
		for i := range b.Samples {
			b.Samples[i].Device = uint16(r.bounded("sample device", math.MaxUint16))
		}
		for i := range b.Samples {
			b.Samples[i].Metric = sampler.MetricID(r.bounded("sample metric", math.MaxUint16))
		}
		for i := range b.Samples {
			b.Samples[i].Flags = sampler.Flags(r.bounded("sample flags", math.MaxUint16))
		}
	}
	if n := r.count("summaries", 37); n > 0 {
		b.Summaries = growSummaries(b.Summaries, n)
		u := b.Summaries
		var t int64
		for i := range u {
			t += r.varint("summary start")
			u[i].StartNS = t
		}
		for i := range u {
			u[i].IntervalNS = r.varint("summary interval")
		}
		for i := range u {
			u[i].Mean = r.f64("summary mean")
		}
		for i := range u {
			u[i].Min = r.f64("summary min")
		}
		for i := range u {
			u[i].Max = r.f64("summary max")
		}
		for i := range u {
			u[i].Last = r.f64("summary last")
		}
		for i := range u {
			u[i].Count = uint32(r.bounded("summary count", math.MaxUint32))
		}
		for i := range u {
			u[i].Device = uint16(r.bounded("summary device", math.MaxUint16))
		}
		for i := range u {
			u[i].Metric = sampler.MetricID(r.bounded("summary metric", math.MaxUint16))
		}
	}
	for n := r.count("events", 7); n > 0 && r.err == nil; n-- {
		b.Events = append(b.Events, r.event())
	}
	if r.err == nil && r.off != len(data) {
		r.fail("trailing bytes", "%d bytes after the events", len(data)-r.off)
	}
	if r.err != nil {
		b.Reset()
		return Meta{}, r.err
	}
	return meta, nil
}

func growSamples(s []sampler.Sample, n int) []sampler.Sample {
	if cap(s) < n {
		return make([]sampler.Sample, n)
	}
	return s[:n]
}

func growSummaries(s []sampler.Summary, n int) []sampler.Summary {
	if cap(s) < n {
		return make([]sampler.Summary, n)
	}
	return s[:n]
}

// reader decodes with sticky errors: after the first error every read
// returns zero values.
type reader struct {
	buf []byte
	off int
	err error
}

func (r *reader) fail(field, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at byte %d: %s", ErrFormat, field, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *reader) uvarint(field string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf[r.off:])
	if n <= 0 {
		r.fail(field, "bad or truncated varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) varint(field string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.buf[r.off:])
	if n <= 0 {
		r.fail(field, "bad or truncated varint")
		return 0
	}
	r.off += n
	return v
}

func (r *reader) int(field string) int {
	v := r.varint(field)
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail(field, "%d out of range", v)
		return 0
	}
	return int(v)
}

func (r *reader) bounded(field string, max uint64) uint64 {
	v := r.uvarint(field)
	if v > max {
		r.fail(field, "%d out of range (max %d)", v, max)
		return 0
	}
	return v
}

// count reads a record count; each record takes at least minBytes, which
// bounds the count by what is left (no huge allocation from a bad count).
func (r *reader) count(field string, minBytes int) int {
	v := r.uvarint(field + " count")
	if r.err != nil {
		return 0
	}
	if left := uint64(len(r.buf) - r.off); v > left/uint64(minBytes) {
		r.fail(field+" count", "%d records cannot fit in %d bytes", v, left)
		return 0
	}
	return int(v)
}

func (r *reader) str(field string) string {
	n := r.uvarint(field)
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.buf)-r.off) {
		r.fail(field, "length %d past the end", n)
		return ""
	}
	s := string(r.buf[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}

func (r *reader) f64(field string) float64 {
	if r.err != nil {
		return 0
	}
	if len(r.buf)-r.off < 8 {
		r.fail(field, "truncated float64")
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.buf[r.off:]))
	r.off += 8
	return v
}

func (r *reader) bool(field string) bool {
	if r.err != nil {
		return false
	}
	if r.off >= len(r.buf) {
		r.fail(field, "truncated")
		return false
	}
	c := r.buf[r.off]
	r.off++
	if c > 1 {
		r.fail(field, "boolean byte %d", c)
	}
	return c == 1
}

func (r *reader) device() sampler.Device {
	d := sampler.Device{Index: r.int("device index")}
	d.UUID, d.Name, d.PCIBusID = r.str("device uuid"), r.str("device name"), r.str("device pci_bus_id")
	d.Serial, d.DriverVersion, d.Backend = r.str("device serial"), r.str("device driver_version"), r.str("device backend")
	d.MemoryTotalMiB = r.uvarint("device memory_total_mib")
	d.Simulated = r.bool("device simulated")
	d.SlowdownTempC, d.ShutdownTempC = r.f64("device slowdown_temp_c"), r.f64("device shutdown_temp_c")
	d.MaxOperatingTempC, d.MemoryMaxTempC = r.f64("device max_operating_temp_c"), r.f64("device memory_max_temp_c")
	d.Generation = r.uvarint("device generation")
	return d
}

func (r *reader) event() sampler.Event {
	e := sampler.Event{Kind: sampler.EventKind(r.str("event kind")), Device: r.int("event device")}
	e.StartNS, e.EndNS = r.varint("event start"), r.varint("event end")
	e.Message = r.str("event message")
	if n := r.count("event attrs", 2); n > 0 {
		e.Attrs = make([]sampler.Attr, n)
		for i := range e.Attrs {
			e.Attrs[i] = sampler.Attr{Key: r.str("attr key"), Value: r.str("attr value")}
		}
	}
	if n := r.count("event fields", 10); n > 0 {
		e.Fields = make([]sampler.Field, n)
		for i := range e.Fields {
			e.Fields[i] = sampler.Field{Key: r.str("field key"), Value: r.f64("field value"), Int: r.bool("field int")}
		}
	}
	return e
}
