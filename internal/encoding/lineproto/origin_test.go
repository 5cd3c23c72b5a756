package lineproto

import (
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// originBatch has a sample line, an event line and a self-metrics line.
func originBatch(o *record.Origin) *record.Batch {
	return &record.Batch{Origin: o,
		Devices: []record.Device{{Index: 0, UUID: "GPU-1", Name: "H200"}},
		Samples: []record.Sample{{TimeNS: 1, Value: 300, Metric: catalog.MetricPowerDraw}},
		Events: []record.Event{{Kind: record.EventXID, StartNS: 2, EndNS: 2, Message: "xid"},
			{Kind: record.EventSelf, Device: -1, StartNS: 3, EndNS: 3, Attrs: []record.Attr{{Key: "scope", Value: "output"}},
				Fields: []record.Field{{Key: "delivered", Value: 1, Int: true}}}}}
}

// A batch with an Origin is written with its host and tags, never the
// encoder's own or a mix; the next batch without one is the encoder's again.
func TestEncodeOrigin(t *testing.T) {
	e := New(Options{Host: "hostB", GlobalTags: []Tag{{"cluster", "west"}, {"rack", "r2"}}})
	for _, c := range []struct {
		origin    *record.Origin
		want, not []string
	}{
		{&record.Origin{Host: "hostA", Tags: map[string]string{"rack": "r1"}}, []string{",host=hostA,", ",rack=r1"},
			[]string{"hostB", "r2", "cluster"}},
		{nil, []string{",cluster=west,", ",host=hostB,", ",rack=r2"}, []string{"hostA", "r1"}},
		{&record.Origin{Host: "hostC"}, []string{",host=hostC,"}, []string{"hostA", "hostB", "rack", "cluster"}},
	} {
		e.Reset()
		e.Encode(originBatch(c.origin))
		if err := e.Err(); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(e.Bytes())), "\n")
		if len(lines) != 3 {
			t.Fatalf("origin %+v: %d lines, want 3:\n%s", c.origin, len(lines), e.Bytes())
		}
		for _, l := range lines {
			for _, w := range c.want {
				if !strings.Contains(l, w) {
					t.Errorf("origin %+v: line lacks %q: %s", c.origin, w, l)
				}
			}
			for _, n := range c.not {
				if strings.Contains(l, n) {
					t.Errorf("origin %+v: line has %q: %s", c.origin, n, l)
				}
			}
		}
	}
}
