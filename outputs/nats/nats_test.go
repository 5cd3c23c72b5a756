package nats_test

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

func transports() map[string]func(c *natsout.Config) {
	return map[string]func(c *natsout.Config){
		"core":      func(c *natsout.Config) {},
		"jetstream": func(c *natsout.Config) { c.JetStream, c.CreateStream = true, true },
	}
}

func TestConformanceIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	for tname, setup := range transports() {
		for _, enc := range natsout.Encodings {
			t.Run(tname+"/"+enc, func(t *testing.T) {
				s := natstest.Start(t)
				var col *collector
				outputtest.Run(t, outputtest.Harness{
					New: func(t *testing.T) record.Output {
						col = collect(t, s, "gpusampler.>")
						cfg := natsout.DefaultConfig()
						cfg.Encoding = enc
						setup(&cfg)
						return newOutput(t, s, cfg, natsout.WithHost("node1"))
					},
					Received: func(t *testing.T) []record.Sample { return col.samples(nil) },
					Flush: func(t *testing.T, out record.Output) {
						out.(*natsout.Output).Conn().Flush()
					},
				})
			})
		}
	}
}

const t0 = 1_790_000_000_000_000_000

// roundTripBatch has two devices, samples of several groups (values an
// integer where the Influx type is an integer, throttle time in whole µs),
// summaries, a device event and a self-metrics event.
func roundTripBatch() *record.Batch {
	devs := []record.Device{
		{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA H200", PCIBusID: "00000000:17:00.0", MemoryTotalMiB: 143771, DriverVersion: "570.1", Backend: "nvml", SlowdownTempC: 89, Generation: 1},
		{Index: 1, UUID: "GPU-bb.b*>", Name: "NVIDIA H200", Backend: "sim", Simulated: true, Generation: 1},
	}
	b := &record.Batch{Seq: 9, Devices: devs}
	for i := range 200 {
		ts := int64(t0 + i*10e6)
		for d := uint16(0); d < 2; d++ {
			b.Samples = append(b.Samples,
				record.Sample{TimeNS: ts, Value: 600.25 + float64(i), Device: d, Metric: catalog.MetricPowerDraw},
				record.Sample{TimeNS: ts, Value: float64(i % 101), Device: d, Metric: catalog.MetricUtilGPU},
			)
			if i%10 == 0 {
				b.Samples = append(b.Samples,
					record.Sample{TimeNS: ts + 1, Value: 71, Device: d, Metric: catalog.MetricTempGPU},
					record.Sample{TimeNS: ts + 1, Value: 2_500_000, Device: d, Metric: catalog.MetricThrottleHWThermal},
					record.Sample{TimeNS: ts + 2, Value: 0, Device: d, Metric: catalog.MetricUtilMemory, Flags: record.FlagPointRead},
				)
			}
		}
	}
	b.Summaries = []record.Summary{{StartNS: t0, IntervalNS: 1e9, Mean: 97.5, Min: 90, Max: 100, Last: 99, Count: 10, Device: 1, Metric: catalog.MetricClockSM}}
	b.Events = []record.Event{
		{Kind: record.EventXID, Device: 1, StartNS: t0, EndNS: t0 + 5, Message: "Xid 79: fallen off the bus",
			Attrs: []record.Attr{{Key: "code", Value: "79"}, {Key: "pid", Value: "4242"}}},
		{Kind: record.EventSelf, Device: -1, StartNS: t0, EndNS: t0,
			Attrs:  []record.Attr{{Key: "output", Value: "nats"}, {Key: "scope", Value: "output"}},
			Fields: []record.Field{{Key: "published", Value: 12, Int: true}, {Key: "rate", Value: 0.5}}},
	}
	return b
}

// expected returns what an encoding carries of b (see package stream).
func expected(b *record.Batch, enc string) *record.Batch {
	want := &record.Batch{Samples: slices.Clone(b.Samples), Summaries: slices.Clone(b.Summaries)}
	for _, e := range b.Events {
		want.Events = append(want.Events, e.Clone())
	}
	if enc != natsout.EncodingInflux {
		want.Devices = slices.Clone(b.Devices)
	} else {
		for i := range want.Summaries {
			want.Summaries[i].IntervalNS = 0
		}
		// self-metrics: every tag but host comes back as an attribute
		for i, e := range want.Events {
			if e.Kind == record.EventSelf {
				want.Events[i].Attrs = append(e.Attrs, record.Attr{Key: "cluster", Value: "c1"})
				slices.SortFunc(want.Events[i].Attrs, func(a, b record.Attr) int { return cmp.Compare(a.Key, b.Key) })
			}
		}
	}
	return want
}

func canonical(b *record.Batch) {
	sortSamples(b.Samples)
	slices.SortFunc(b.Events, func(a, b record.Event) int { return cmp.Compare(a.Kind, b.Kind) })
	slices.SortFunc(b.Devices, func(a, b record.Device) int { return cmp.Compare(a.Index, b.Index) })
	b.Devices = slices.CompactFunc(b.Devices, func(a, b record.Device) bool { return a.Index == b.Index })
}

func TestRoundTripIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	for tname, setup := range transports() {
		for _, enc := range natsout.Encodings {
			t.Run(tname+"/"+enc, func(t *testing.T) {
				s := natstest.Start(t)
				col := collect(t, s, "gpusampler.>")
				cfg := natsout.DefaultConfig()
				cfg.Encoding = enc
				cfg.Stream = "RT_" + strings.ToUpper(enc)
				cfg.MaxMessageBytes = 1024 // several parts per subject
				setup(&cfg)
				out := newOutput(t, s, cfg, natsout.WithHost("node.7"), natsout.WithGlobalTags(map[string]string{"cluster": "c1"}))
				b := roundTripBatch()
				if err := out.Write(context.Background(), b); err != nil {
					t.Fatal(err)
				}
				recs := col.drain(out)
				var got record.Batch
				subjects := map[string]bool{}
				for i, r := range recs {
					subjects[col.subjects[i]] = true
					if r.Host != "node.7" || r.Seq != 9 || r.Tags["cluster"] != "c1" && len(r.Batch.Samples) > 0 {
						t.Errorf("message %d on %s: host %q seq %d tags %v", i, col.subjects[i], r.Host, r.Seq, r.Tags)
					}
					for _, s := range r.Batch.Samples {
						if want := b.Devices[s.Device].UUID; r.UUID(int(s.Device)) != want {
							t.Fatalf("message %d: UUID(%d) = %q, want %q", i, s.Device, r.UUID(int(s.Device)), want)
						}
					}
					got.Devices = append(got.Devices, r.Batch.Devices...)
					got.Samples = append(got.Samples, r.Batch.Samples...)
					got.Summaries = append(got.Summaries, r.Batch.Summaries...)
					got.Events = append(got.Events, r.Batch.Events...)
				}
				if st := out.Stats(); st.Splits == 0 {
					t.Errorf("no message was split (stats %+v)", st)
				}
				want := expected(b, enc)
				canonical(&got)
				canonical(want)
				if !reflect.DeepEqual(got.Samples, want.Samples) {
					t.Errorf("samples differ: got %d, want %d\n got %v\nwant %v", len(got.Samples), len(want.Samples), head(got.Samples), head(want.Samples))
				}
				for name, pair := range map[string][2]any{"devices": {got.Devices, want.Devices},
					"summaries": {got.Summaries, want.Summaries}, "events": {got.Events, want.Events}} {
					if !reflect.DeepEqual(pair[0], pair[1]) {
						t.Errorf("%s differ:\n got %+v\nwant %+v", name, pair[0], pair[1])
					}
				}
				for _, subj := range []string{"gpusampler.node_7.GPU-aaaa.power", "gpusampler.node_7.GPU-bb_b__.utilization",
					"gpusampler.node_7.GPU-bb_b__.events", "gpusampler.node_7.self", "gpusampler.node_7.GPU-aaaa.throttle"} {
					if !subjects[subj] {
						t.Errorf("nothing on %s (subjects: %v)", subj, subjects)
					}
				}
				if js := tname == "jetstream"; js {
					if st := out.Stats(); st.Acked != st.Messages || st.Duplicates != 0 {
						t.Errorf("stats %+v: want every message acked once", st)
					}
				}
			})
		}
	}
}

func head[T any](s []T) string {
	if len(s) > 4 {
		return fmt.Sprint(s[:4], "...")
	}
	return fmt.Sprint(s)
}

var _ = stream.ContentTypeJSON
