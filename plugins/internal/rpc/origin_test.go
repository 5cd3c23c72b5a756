package rpc

import (
	"context"
	"maps"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// originOut keeps the Origin of every batch it is given (a copy).
type originOut struct{ got []*record.Origin }

func (o *originOut) Write(_ context.Context, b *record.Batch) error {
	var c *record.Origin
	if b.Origin != nil {
		c = &record.Origin{Host: b.Origin.Host, Tags: maps.Clone(b.Origin.Tags)}
	}
	o.got = append(o.got, c)
	return nil
}
func (o *originOut) Close() error { return nil }

// A batch's Origin (a replayed backlog's identity) crosses the plugin
// protocol to the plugin's output; a batch without one arrives without
// one (the plugin's configured host and global tags apply).
func TestWriteCarriesOrigin(t *testing.T) {
	out := &originOut{}
	c := serve(t, out)
	sent := []*record.Origin{{Host: "hostA", Tags: map[string]string{"rack": "r1"}}, nil, {Host: "hostC"}}
	for i, o := range sent {
		b := &record.Batch{Seq: uint64(i + 1), Origin: o,
			Samples: []record.Sample{{TimeNS: 1, Value: 2, Metric: catalog.MetricPowerDraw}}}
		if err := c.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if len(out.got) != len(sent) {
		t.Fatalf("plugin got %d batches, want %d", len(out.got), len(sent))
	}
	for i := range sent {
		if g := out.got[i]; !g.Equal(sent[i]) {
			t.Errorf("batch %d: plugin got origin %+v, want %+v", i+1, g, sent[i])
		}
	}
}
