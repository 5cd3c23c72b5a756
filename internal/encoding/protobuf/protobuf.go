// Package protobuf is gpusampler's compact binary encoding of a batch: one
// protobuf message, gpusampler.plugin.v1.Batch, defined in
// plugins/proto/records/records.proto — the same record messages the
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
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/plugins/proto/records"
	"github.com/gpusampler/gpusampler/sampler"
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
	msg records.Batch
}

var marshal = proto.MarshalOptions{Deterministic: true}

// Append appends the encoding of b (with meta) to dst and returns the
// extended slice. It does not retain b, meta or dst.
func (e *Encoder) Append(dst []byte, b *sampler.Batch, meta *Meta) []byte {
	m := &e.msg
	records.FillBatch(m, b, true)
	m.Host, m.Tags, m.DeviceUuids = "", nil, nil
	if meta != nil {
		m.Host = meta.Host
		if len(meta.Tags) > 0 {
			m.Tags = make(map[string]string, len(meta.Tags))
			for _, t := range meta.Tags {
				m.Tags[t.Key] = t.Value
			}
		}
		if len(meta.UUIDs) > 0 {
			m.DeviceUuids = make(map[int32]string, len(meta.UUIDs))
			for _, r := range meta.UUIDs {
				m.DeviceUuids[int32(r.Index)] = r.UUID
			}
		}
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
	clear(m.Events)
	return out
}

// validUTF8 replaces invalid UTF-8 in every string of m with U+FFFD.
func validUTF8(m *records.Batch) {
	v := func(s *string) { *s = strings.ToValidUTF8(*s, "\uFFFD") }
	v(&m.Host)
	for _, d := range m.Devices {
		for _, s := range []*string{&d.Uuid, &d.Name, &d.PciBusId, &d.Serial, &d.DriverVersion, &d.Backend} {
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
func Append(dst []byte, b *sampler.Batch, meta *Meta) []byte {
	var e Encoder
	return e.Append(dst, b, meta)
}

// ErrFormat is wrapped by every error about malformed input.
var ErrFormat = errors.New("protobuf: malformed batch")

// Decode decodes data into b (reset first; its capacity is reused) and
// returns the message's meta. Nothing in the result aliases data.
func Decode(data []byte, b *sampler.Batch) (Meta, error) {
	b.Reset()
	var m records.Batch
	if err := proto.Unmarshal(data, &m); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if err := records.ToBatch(&m, b); err != nil {
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
