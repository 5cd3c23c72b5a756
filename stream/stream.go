// Package stream decodes what gpusampler publishes to NATS back into
// records, whatever the encoding: one call, DecodeMsg, selects the decoder
// by the message's Content-Type and Gpusampler-Schema headers. It is what a
// stream processor written in Go imports (see examples/natsrollup).
//
//	sub, _ := nc.Subscribe("gpusampler.*.*.power", func(m *nats.Msg) {
//		recs, err := stream.DecodeMsg(m)
//		if err != nil { ... }
//		for _, s := range recs.Batch.Samples {
//			uuid := recs.UUID(int(s.Device))
//			...
//		}
//	})
//
// What each encoding carries (see the output's README for the wire forms):
//
//   - protobuf (application/x-protobuf; proto=gpusampler.plugin.v1.Batch,
//     see internal/encoding/protobuf): everything, exactly — device
//     identities, samples, summaries, events, the batch Seq, host and global
//     tags.
//   - JSON Lines (application/x-ndjson): everything, exactly, except that
//     event attributes come back sorted by key, a self-metrics event's
//     device is -1 and its end equals its start, and integral numbers in
//     self-metrics and process fields come back as integer fields.
//   - line protocol (application/x-influx-line-protocol): samples in the
//     catalog's base unit (Telegraf's integer fields are rounded, as
//     written), events, process records, self-metrics and summaries
//     (integral process fields come back as integer fields); not device identities
//     (only their UUID, name and PCI tags: see Records.UUIDs), not the
//     pstate metric (a tag in Telegraf's schema), not a summary's interval
//     (0), and an event without a message comes back with none.
//
// Records and everything in them belong to the caller.
package stream

import (
	"errors"
	"fmt"
	"mime"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/internal/encoding/protobuf"
	"github.com/gpusampler/gpusampler/record"
)

// Header names set on every message by the NATS output.
const (
	// HeaderContentType names the encoding (one of the ContentType*
	// constants).
	HeaderContentType = "Content-Type"
	// HeaderSchema is the schema version of the records (SchemaVersion).
	HeaderSchema = "Gpusampler-Schema"
	// HeaderSeq is the batch sequence number (record.Batch.Seq).
	HeaderSeq = "Gpusampler-Seq"
	// HeaderPart is "i/n": the message's part of its batch on its subject.
	HeaderPart = "Gpusampler-Part"
)

// Content types of the encodings.
const (
	ContentTypeJSON         = "application/x-ndjson"
	ContentTypeLineProtocol = "application/x-influx-line-protocol"
	ContentTypeProtobuf     = protobuf.ContentType
)

// SchemaVersion is the record schema version this package writes and reads.
// A message with a newer version is refused (ErrSchema), not misread.
const SchemaVersion = 1

// Errors.
var (
	// ErrContentType: the message has no or an unknown Content-Type.
	ErrContentType = errors.New("stream: unknown content type")
	// ErrSchema: the message's schema version is not one this package reads.
	ErrSchema = errors.New("stream: unsupported schema version")
)

// Records is what one message carried.
type Records struct {
	// Subject the message was published on (DecodeMsg only).
	Subject string
	// ContentType is the encoding.
	ContentType string
	// Seq is the batch sequence number; Part is "i/n" (from the headers).
	Seq  uint64
	Part string
	// Host is the sender's host name; Tags its global tags.
	Host string
	Tags map[string]string
	// UUIDs maps every device index the message refers to onto its UUID,
	// where the message says it.
	UUIDs map[int]string
	// Attribution maps a device index onto its pod, namespace, container
	// and HPC job where a line-protocol message carries them as tags (JSON
	// and protobuf carry them in the device records).
	Attribution map[int]record.Attribution
	// Batch holds the records. Batch.Seq is Seq.
	Batch record.Batch
}

// UUID returns the UUID of device index, or "" when the message does not
// say.
func (r *Records) UUID(index int) string {
	for _, d := range r.Batch.Devices {
		if d.Index == index && d.UUID != "" {
			return d.UUID
		}
	}
	return r.UUIDs[index]
}

// DecodeMsg decodes m (headers and data).
func DecodeMsg(m *nats.Msg) (*Records, error) {
	r, err := Decode(m.Header, m.Data)
	if r != nil {
		r.Subject = m.Subject
	}
	if err != nil {
		return nil, fmt.Errorf("%w (subject %s)", err, m.Subject)
	}
	return r, nil
}

// Decode decodes data, selecting the decoder by h's Content-Type and
// Gpusampler-Schema. The records are new; data is not retained.
func Decode(h nats.Header, data []byte) (*Records, error) {
	ct := contentType(h.Get(HeaderContentType))
	if v := h.Get(HeaderSchema); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n != SchemaVersion {
			return nil, fmt.Errorf("%w %q (this decoder reads %d)", ErrSchema, v, SchemaVersion)
		}
	} else {
		return nil, fmt.Errorf("%w: no %s header", ErrSchema, HeaderSchema)
	}
	r := &Records{ContentType: ct, Part: h.Get(HeaderPart), UUIDs: map[int]string{}}
	if v := h.Get(HeaderSeq); v != "" {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("stream: %s header %q: not a sequence number", HeaderSeq, v)
		}
		r.Seq = seq
	}
	var err error
	switch ct {
	case ContentTypeProtobuf:
		err = r.decodeProtobuf(data)
	case ContentTypeJSON:
		err = r.decodeJSON(data)
	case ContentTypeLineProtocol:
		err = r.decodeLineProtocol(data)
	default:
		return nil, fmt.Errorf("%w %q (want %s, %s or %s)", ErrContentType, ct, ContentTypeJSON, ContentTypeLineProtocol, ContentTypeProtobuf)
	}
	if err != nil {
		return nil, err
	}
	if r.Batch.Seq == 0 {
		r.Batch.Seq = r.Seq
	}
	if r.Seq == 0 {
		r.Seq = r.Batch.Seq
	}
	for _, d := range r.Batch.Devices {
		if d.UUID != "" {
			r.UUIDs[d.Index] = d.UUID
		}
	}
	return r, nil
}

func (r *Records) decodeProtobuf(data []byte) error {
	meta, err := protobuf.Decode(data, &r.Batch)
	if err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	r.Host = meta.Host
	if len(meta.Tags) > 0 {
		r.Tags = make(map[string]string, len(meta.Tags))
		for _, t := range meta.Tags {
			r.Tags[t.Key] = t.Value
		}
	}
	for _, u := range meta.UUIDs {
		r.UUIDs[u.Index] = u.UUID
	}
	return nil
}

// contentType normalizes a Content-Type header: a protobuf payload is
// recognized by its media type (application/x-protobuf) and its proto
// parameter, whatever the spacing and case; other values are trimmed.
func contentType(v string) string {
	v = strings.TrimSpace(v)
	mt, params, err := mime.ParseMediaType(v)
	if err != nil || mt != "application/x-protobuf" {
		return v
	}
	if p, ok := params["proto"]; ok && p != protobuf.MessageName {
		return v // another message: unknown
	}
	return ContentTypeProtobuf
}
