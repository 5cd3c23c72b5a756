package influxtest

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/record"
)

// What the line-protocol encoder writes, DecodeSamples reads back: every
// sample whole (base units, device, point-read flag), and nothing of the
// summaries, events and identities beside them.
func TestDecodeSamplesRoundTrip(t *testing.T) {
	const t0 = 1_700_000_000_000_000_000
	samples := []record.Sample{
		{TimeNS: t0, Value: 250.5, Device: 0, Metric: catalog.MetricPowerDraw},
		{TimeNS: t0, Value: 41, Device: 0, Metric: catalog.MetricUtilGPU},
		{TimeNS: t0 + 1e6, Value: 252.25, Device: 0, Metric: catalog.MetricPowerDraw},
		{TimeNS: t0, Value: 1410, Device: 1, Metric: catalog.MetricClockSM},
		{TimeNS: t0 + 2e6, Value: 300, Device: 1, Metric: catalog.MetricPowerDraw, Flags: record.FlagPointRead},
	}
	b := &record.Batch{Seq: 1,
		Devices: []record.Device{{Index: 0, UUID: "GPU-0", Name: "Test GPU"}, {Index: 1, UUID: "GPU-1", Name: "Test GPU"}},
		Samples: samples,
		Summaries: []record.Summary{{StartNS: t0, IntervalNS: 1e9, Mean: 251, Min: 250.5, Max: 252.25, Last: 252.25, Count: 2,
			Device: 0, Metric: catalog.MetricPowerDraw}},
		Events: []record.Event{{Kind: record.EventXID, Device: 0, StartNS: t0, Message: "xid 79",
			Attrs: []record.Attr{{Key: "xid", Value: "79"}}}},
	}
	enc := lineproto.New(lineproto.Options{Host: "node1"})
	enc.Encode(b)
	if err := enc.Err(); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSamples(enc.Bytes())
	if err != nil {
		t.Fatalf("DecodeSamples: %v\n%s", err, enc.Bytes())
	}
	order := func(a, b record.Sample) int {
		return cmp.Or(cmp.Compare(a.TimeNS, b.TimeNS), cmp.Compare(a.Device, b.Device), cmp.Compare(a.Metric, b.Metric))
	}
	want := slices.SortedFunc(slices.Values(samples), order)
	slices.SortFunc(got, order)
	if !slices.Equal(got, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v\nfrom\n%s", got, want, enc.Bytes())
	}
}

func TestDecodeSamplesErrors(t *testing.T) {
	for _, tc := range []struct{ name, lp, want string }{
		{"no index tag", "nvidia_smi,host=a power_draw=1 1\n", "line 1: nvidia_smi line without an index tag"},
		{"bad index tag", "nvidia_smi,index=x power_draw=1 1\n", `line 1: tag index="x": not a device index`},
		{"not line protocol", "nvidia_smi,index=0 power_draw=\n", "line 1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSamples([]byte(tc.lp))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Nothing to decode is no samples and no error.
func TestDecodeSamplesEmpty(t *testing.T) {
	got, err := DecodeSamples(nil)
	if err != nil || got != nil {
		t.Errorf("DecodeSamples(nil) = %v, %v; want no samples", got, err)
	}
}
