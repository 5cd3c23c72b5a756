package opentelemetry

import (
	"bytes"
	"maps"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// An encoder that reuses its request tree and arenas from one encode to
// the next, and puts sample points' attributes in wire form, sends the
// bytes a fresh encoder (same devices, origin and counter state) that sets
// every point's Attributes sends for the same records: through batches
// that grow and shrink past an arena chunk, change origin and attribution,
// mix shapes, point reads and unknown devices, committed or discarded.
func TestEncoderReuseSameBytes(t *testing.T) {
	opts := &Options{Host: "node1", Version: "1.0.0", GlobalTags: map[string]string{"a": "b"}}
	g, c, s := benchBatch(false), benchBatch(true), benchSummaries()
	s.Summaries[5].Hist = nil
	c.Samples[3].Flags |= record.FlagPointRead
	c.Samples = append(c.Samples, record.Sample{TimeNS: 1.79e18, Value: 5, Device: 42, Metric: catalog.MetricTempGPU})
	pod := *g
	pod.Devices = []record.Device{g.Devices[0]}
	pod.Devices[0].Attribution = record.Attribution{Pod: "p1", Namespace: "ns"}
	pod.Samples = g.Samples[:900]
	events := []record.Event{{Kind: record.EventSelf, StartNS: 1.79e18, Fields: []record.Field{record.IntField("x", 1)}}}
	batches := []*record.Batch{g, c, s, &pod, {Samples: g.Samples[:100], Events: events}, c,
		{Origin: &record.Origin{Host: "x"}, Samples: c.Samples[:700], Summaries: s.Summaries[:300]}, g, s, {Events: events}, g}
	e := newEncoder(opts, 1.79e18)
	var devices []record.Device
	for i, b := range batches {
		devices = append(devices, b.Devices...)
		// the reference: a fresh encoder in the same state
		ref := newEncoder(opts, 1.79e18)
		ref.rawAttrs = false
		ref.setDevices(devices)
		ref.series = maps.Clone(e.series)
		ref.useOrigin(b.Origin)
		want, _ := ref.encode(b.Samples, b.Summaries, b.Events)
		wantBody, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}

		e.setDevices(b.Devices)
		e.useOrigin(b.Origin)
		got, points := e.encode(b.Samples, b.Summaries, b.Events)
		gotBody, err := proto.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if points == 0 || !bytes.Equal(gotBody, wantBody) {
			t.Fatalf("batch %d: %d points, %d bytes, a fresh encoder's %d bytes differ", i, points, len(gotBody), len(wantBody))
		}
		if i%3 == 2 {
			e.discard()
		} else {
			e.commit()
		}
	}
}
