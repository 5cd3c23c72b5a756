package stream_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/stream"
)

func TestDecodeRefuses(t *testing.T) {
	h := func(ct, schema string) nats.Header {
		h := nats.Header{}
		if ct != "" {
			h.Set(stream.HeaderContentType, ct)
		}
		if schema != "" {
			h.Set(stream.HeaderSchema, schema)
		}
		return h
	}
	for name, tc := range map[string]struct {
		h    nats.Header
		want error
	}{
		"no content type": {h("", "1"), stream.ErrContentType},
		"unknown type":    {h("text/csv", "1"), stream.ErrContentType},
		"newer schema":    {h(stream.ContentTypeJSON, "2"), stream.ErrSchema},
		"no schema":       {h(stream.ContentTypeJSON, ""), stream.ErrSchema},
		"other protobuf":  {h("application/x-protobuf; proto=other.v1.Thing", "1"), stream.ErrContentType},
	} {
		if _, err := stream.Decode(tc.h, []byte("{}")); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
	if _, err := stream.Decode(h(stream.ContentTypeProtobuf, "1"), []byte("junk")); err == nil {
		t.Error("junk protobuf data decoded")
	}
	// The media type is matched loosely (spacing, case, no proto
	// parameter); an empty payload is an empty batch.
	for _, ct := range []string{"application/x-protobuf;proto=gpusampler.plugin.v1.Batch", "Application/X-Protobuf", stream.ContentTypeProtobuf} {
		if r, err := stream.Decode(h(ct, "1"), nil); err != nil || r.ContentType != stream.ContentTypeProtobuf {
			t.Errorf("%q: %+v, %v", ct, r, err)
		}
	}
	if _, err := stream.Decode(h(stream.ContentTypeJSON, "1"), []byte("{not json\n")); err == nil {
		t.Error("bad JSON decoded")
	}
	r, err := stream.Decode(h(stream.ContentTypeLineProtocol, "1"), []byte("nvidia_smi,host=n1,index=0,uuid=GPU-x power_draw=612.5 1790000000000000000\n"))
	if err != nil || len(r.Batch.Samples) != 1 || r.UUID(0) != "GPU-x" || r.Host != "n1" {
		t.Errorf("line protocol: %+v, %v", r, err)
	}
}
