// Package protobuf is gpusampler's compact binary encoding of a batch: one
// protobuf message, gpusampler.plugin.v1.Batch, defined in
// record/recordpb/records.proto — the same record messages the
// output plugin protocol carries, so one .proto file documents both wire
// forms and a consumer in any language decodes it with generated code.
// Samples travel as parallel packed columns (timestamps as zig-zag varint
// deltas, values as doubles, device, metric and flags as varints: about 14
// bytes a sample), together with the device identities, window summaries,
// events, the batch's Seq and the sender's host, global tags and the UUIDs
// of the devices it refers to. Decode restores exactly what Append encoded.
//
// The NATS output uses it as its "protobuf" encoding (Content-Type
// ContentType, Gpusampler-Schema 1); package stream decodes it.
//
// Versioning: the message only ever gains fields (old readers skip them);
// a change old readers would misread comes with a new Gpusampler-Schema
// version and a new protobuf package (gpusampler.plugin.v2), so the
// content type names the message it holds.
package protobuf

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
)

// MessageName is the full name of the protobuf message a payload holds.
const MessageName = "gpusampler.plugin.v1.Batch"

// ContentType is the content type of an encoded batch.
const ContentType = "application/x-protobuf; proto=" + MessageName

// Tag is one global tag (fleet identity) of the sender.
type Tag struct{ Key, Value string }

// DeviceRef names the UUID of a device that samples refer to by index, so
// that a consumer that missed the device's identity record still knows it.
type DeviceRef struct {
	Index int
	UUID  string
}

// Meta is what a message carries besides the batch: who sent it. Decode
// returns Tags sorted by key and UUIDs by index.
type Meta struct {
	Host  string
	Tags  []Tag
	UUIDs []DeviceRef
}

// Encoder encodes batches, reusing its message between calls. One
// goroutine at a time.
type Encoder struct {
	msg recordpb.Batch
	// origin is the last batch Origin seen (a copy), originTags its tags
	// sorted by key.
	origin     *record.Origin
	originTags []Tag
}

var marshal = proto.MarshalOptions{Deterministic: true}

// Append appends the encoding of b (with meta; a batch with an Origin
// carries its host and tags in place of meta's) to dst and returns the
// extended slice. It does not retain b, meta or dst.
//
// The bulk of a message — the sample columns (field 3), the global tags
// (7) and the device UUIDs (8) — is written here with protowire, the rest
// by proto.Marshal: the generic marshaller's cost per packed column and
// per map entry was most of a NATS publish. Field 3 follows fields 4–6 on
// the wire; protobuf readers accept fields in any order, and the result is
// the same message (TestAppendIsProtoMarshal).
func (e *Encoder) Append(dst []byte, b *record.Batch, meta *Meta) []byte {
	m := &e.msg
	recordpb.FillBatch(m, b, true)
	samples := m.Samples
	m.Samples, m.Host, m.Tags, m.DeviceUuids = nil, "", nil, nil
	var tags []Tag
	var uuids []DeviceRef
	if meta != nil {
		m.Host, tags, uuids = meta.Host, meta.Tags, meta.UUIDs
	}
	if b.Origin != nil {
		// A replayed batch sampled under another identity carries that one.
		if !b.Origin.Equal(e.origin) {
			e.origin = &record.Origin{Host: b.Origin.Host, Tags: maps.Clone(b.Origin.Tags)}
			e.originTags = e.originTags[:0]
			for _, k := range slices.Sorted(maps.Keys(e.origin.Tags)) {
				e.originTags = append(e.originTags, Tag{k, e.origin.Tags[k]})
			}
		}
		m.Host, tags = e.origin.Host, e.originTags
	}
	out, err := marshal.MarshalAppend(dst, m)
	if err != nil {
		// The only failure is invalid UTF-8 in a string (protobuf strings
		// must be UTF-8): replace it and encode again.
		validUTF8(m)
		if out, err = marshal.MarshalAppend(dst, m); err != nil {
			panic(fmt.Sprintf("protobuf: encode batch: %v", err))
		}
	}
	m.Samples = samples
	out = appendSamples(out, samples)
	for _, t := range tags {
		k, v := validString(t.Key), validString(t.Value)
		n := 1 + protowire.SizeBytes(len(k)) + 1 + protowire.SizeBytes(len(v))
		out = protowire.AppendTag(out, 7, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(n))
		out = protowire.AppendString(protowire.AppendTag(out, 1, protowire.BytesType), k)
		out = protowire.AppendString(protowire.AppendTag(out, 2, protowire.BytesType), v)
	}
	for _, r := range uuids {
		key, v := uint64(int64(int32(r.Index))), validString(r.UUID)
		n := 1 + protowire.SizeVarint(key) + 1 + protowire.SizeBytes(len(v))
		out = protowire.AppendTag(out, 8, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(n))
		out = protowire.AppendVarint(protowire.AppendTag(out, 1, protowire.VarintType), key)
		out = protowire.AppendString(protowire.AppendTag(out, 2, protowire.BytesType), v)
	}
	clear(m.Events)
	return out
}

func validString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// appendSamples appends c as Batch field 3, its columns packed in field
// order as proto.Marshal writes them (an empty column is left out).
func appendSamples(out []byte, c *recordpb.SampleColumns) []byte {
	if c == nil {
		return out
	}
	varints := func(v []uint32) int {
		n := 0
		for _, x := range v {
			n += protowire.SizeVarint(uint64(x))
		}
		return n
	}
	deltas := 0
	for _, x := range c.TimeDeltaNs {
		deltas += protowire.SizeVarint(protowire.EncodeZigZag(x))
	}
	sizes := [6]int{8 * len(c.TimeNs), 8 * len(c.Value), varints(c.Device), varints(c.Metric), varints(c.Flags), deltas}
	total := 0
	for _, n := range sizes {
		if n > 0 {
			total += 1 + protowire.SizeBytes(n)
		}
	}
	out = protowire.AppendTag(out, 3, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(total))
	field := func(num protowire.Number) {
		if n := sizes[num-1]; n > 0 {
			out = protowire.AppendVarint(protowire.AppendTag(out, num, protowire.BytesType), uint64(n))
		}
	}
	field(1)
	for _, t := range c.TimeNs {
		out = protowire.AppendFixed64(out, uint64(t))
	}
	field(2)
	for _, v := range c.Value {
		out = protowire.AppendFixed64(out, math.Float64bits(v))
	}
	for i, col := range [][]uint32{c.Device, c.Metric, c.Flags} {
		field(protowire.Number(3 + i))
		for _, x := range col {
			out = protowire.AppendVarint(out, uint64(x))
		}
	}
	field(6)
	for _, x := range c.TimeDeltaNs {
		out = protowire.AppendVarint(out, protowire.EncodeZigZag(x))
	}
	return out
}

func validUTF8(m *recordpb.Batch) {
	v := func(s *string) { *s = strings.ToValidUTF8(*s, "\uFFFD") }
	v(&m.Host)
	for _, d := range m.Devices {
		for _, s := range []*string{&d.Uuid, &d.Name, &d.PciBusId, &d.Serial, &d.DriverVersion, &d.CudaVersion, &d.VbiosVersion, &d.Backend} {
			v(s)
		}
	}
	for _, e := range m.Events {
		v(&e.Kind)
		v(&e.Message)
		for _, a := range e.Attrs {
			v(&a.Key)
			v(&a.Value)
		}
		for _, f := range e.Fields {
			v(&f.Key)
		}
	}
	tags := make(map[string]string, len(m.Tags))
	for k, x := range m.Tags {
		v(&k)
		v(&x)
		tags[k] = x
	}
	m.Tags = tags
	for i, u := range m.DeviceUuids {
		v(&u)
		m.DeviceUuids[i] = u
	}
}

// Append encodes with a new Encoder (see Encoder.Append).
func Append(dst []byte, b *record.Batch, meta *Meta) []byte {
	var e Encoder
	return e.Append(dst, b, meta)
}

// ErrFormat is wrapped by every error about malformed input.
var ErrFormat = errors.New("protobuf: malformed batch")

// Decode decodes data into b (reset first; its capacity is reused) and
// returns the message's meta. Nothing in the result aliases data.
func Decode(data []byte, b *record.Batch) (Meta, error) {
	b.Reset()
	var m recordpb.Batch
	if err := proto.Unmarshal(data, &m); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if err := recordpb.ToBatch(&m, b); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	meta := Meta{Host: m.GetHost()}
	for _, k := range slices.Sorted(maps.Keys(m.GetTags())) {
		meta.Tags = append(meta.Tags, Tag{k, m.Tags[k]})
	}
	for i, u := range m.GetDeviceUuids() {
		meta.UUIDs = append(meta.UUIDs, DeviceRef{int(i), u})
	}
	slices.SortFunc(meta.UUIDs, func(a, b DeviceRef) int { return cmp.Compare(a.Index, b.Index) })
	return meta, nil
}
