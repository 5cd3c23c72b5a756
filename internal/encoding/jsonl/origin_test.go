package jsonl

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// A batch with an Origin is written with its host and tags, never the
// encoder's own or a mix; the next batch without one is the encoder's again.
func TestEncodeOrigin(t *testing.T) {
	e := New(Options{Host: "hostB", GlobalTags: map[string]string{"rack": "r2", "cluster": "west"}})
	batch := func(o *record.Origin) *record.Batch {
		return &record.Batch{Origin: o,
			Devices: []record.Device{{Index: 0, UUID: "GPU-1", Name: "H200"}},
			Samples: []record.Sample{{TimeNS: 1, Value: 300, Metric: catalog.MetricPowerDraw}},
			Summaries: []record.Summary{{StartNS: 0, IntervalNS: 10, Mean: 1, Min: 1, Max: 1, Last: 1, Count: 1,
				Metric: catalog.MetricPowerDraw}},
			Events: []record.Event{{Kind: record.EventXID, StartNS: 2, EndNS: 2, Message: "xid"},
				{Kind: record.EventSelf, Device: -1, StartNS: 3, EndNS: 3, Attrs: []record.Attr{{Key: "scope", Value: "output"}}},
				{Kind: record.EventProcess, StartNS: 4, EndNS: 4, Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 7, Int: true}}}}}
	}
	for _, c := range []struct {
		origin *record.Origin
		host   string
		tags   map[string]string
	}{
		{&record.Origin{Host: "hostA", Tags: map[string]string{"rack": "r1"}}, "hostA", map[string]string{"rack": "r1"}},
		{nil, "hostB", map[string]string{"rack": "r2", "cluster": "west"}},
		{&record.Origin{Host: "hostC"}, "hostC", nil},
	} {
		e.buf = e.buf[:0]
		e.Encode(batch(c.origin))
		lines := strings.Split(strings.TrimSpace(string(e.buf)), "\n")
		if len(lines) != 6 {
			t.Fatalf("origin %+v: %d lines, want 6:\n%s", c.origin, len(lines), e.buf)
		}
		for _, l := range lines {
			var r struct {
				Host string            `json:"host"`
				Tags map[string]string `json:"tags"`
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			if r.Host != c.host || !maps.Equal(r.Tags, c.tags) {
				t.Errorf("origin %+v: host %q tags %v, want %q %v: %s", c.origin, r.Host, r.Tags, c.host, c.tags, l)
			}
		}
	}
}
