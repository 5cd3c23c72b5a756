package nats_test

import (
	"context"
	"fmt"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
)

// benchBatch: 4096 samples over 8 GPUs and three groups, like a pump's
// full batch.
func benchBatch() *record.Batch {
	b := &record.Batch{}
	for g := range 8 {
		b.Devices = append(b.Devices, record.Device{Index: g, UUID: "GPU-0000000" + string(rune('0'+g))})
	}
	metrics := []catalog.MetricID{catalog.MetricPowerDraw, catalog.MetricUtilGPU, catalog.MetricClockSM, catalog.MetricPowerInstant}
	for i := range 4096 {
		b.Samples = append(b.Samples, record.Sample{TimeNS: 1.79e18 + int64(i/32)*1e6, Value: float64(100 + i%500),
			Device: uint16(i % 8), Metric: metrics[(i/8)%len(metrics)]})
	}
	return b
}

// bench64: one sampling interval of 64 GPUs, the shape of a large node's
// batch: 10 samples of each of 5 metrics (power, utilization, clocks,
// temperature) per GPU, 3,200 samples in 256 (GPU, group) subjects.
func bench64() *record.Batch {
	b := &record.Batch{}
	for g := range 64 {
		b.Devices = append(b.Devices, record.Device{Index: g, UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-000000000000", g)})
	}
	metrics := []catalog.MetricID{catalog.MetricPowerDraw, catalog.MetricPowerInstant, catalog.MetricUtilGPU, catalog.MetricClockSM, catalog.MetricTempGPU}
	for i := range 10 {
		for g := range 64 {
			for _, m := range metrics {
				b.Samples = append(b.Samples, record.Sample{TimeNS: 1.79e18 + int64(i)*1e8, Value: float64(100 + i + g), Device: uint16(g), Metric: m})
			}
		}
	}
	return b
}

// BenchmarkPublish: samples/s through the output (encode, split, publish;
// JetStream waits for every ack), and beside it "raw": the very messages
// one Write produced, pre-encoded, published the same way — the cost of
// the transport alone, measured in the same run. Shapes: 8gpu (4,096
// samples), 64gpu (3,200 samples in 256 GPU×group subjects, the default
// subject), 64gpu-by-gpu (the same batch on subject
// "gpusampler.{host}.{gpu}": 64 larger messages).
func BenchmarkPublish(b *testing.B) {
	s := natstest.Start(b)
	for _, shape := range []string{"8gpu", "64gpu", "64gpu-by-gpu"} {
		for _, tname := range []string{"core", "jetstream"} {
			for _, enc := range natsout.Encodings {
				cfg := natsout.DefaultConfig()
				cfg.Encoding = enc
				cfg.JetStream, cfg.CreateStream = tname == "jetstream", tname == "jetstream"
				cfg.StreamMaxBytes = 256 << 20
				cfg.StreamStorage = "memory"
				batch := benchBatch()
				if shape != "8gpu" {
					batch = bench64()
				}
				if shape == "64gpu-by-gpu" {
					cfg.Subject = "gpusampler.{host}.{gpu}"
				}
				n := float64(len(batch.Samples))
				var msgs []*natsgo.Msg
				b.Run(shape+"/"+tname+"/"+enc+"/output", func(b *testing.B) {
					out := newOutput(b, s, cfg, natsout.WithHost("node1"))
					ctx := context.Background()
					// The first Write carries the identities, as a
					// pump's first flush does; later ones only samples.
					// The messages of the second, for raw (no subscriber
					// while timing: raw has none either).
					if err := out.Write(ctx, batch); err != nil {
						b.Fatal(err)
					}
					batch.Devices = nil
					batch.Seq++
					cap := captureMessages(b, s)
					if err := out.Write(ctx, batch); err != nil {
						b.Fatal(err)
					}
					out.Conn().Flush()
					msgs = cap.take()
					b.ReportAllocs()
					for b.Loop() {
						batch.Seq++
						if err := out.Write(ctx, batch); err != nil {
							b.Fatal(err)
						}
					}
					out.Conn().Flush()
					st := out.Stats()
					b.ReportMetric(float64(b.N)*n/b.Elapsed().Seconds(), "samples/s")
					b.ReportMetric(float64(st.Bytes)/float64(b.N+2)/n, "B/sample")
					b.ReportMetric(float64(st.Messages)/float64(b.N+2), "msgs/batch")
				})
				b.Run(shape+"/"+tname+"/"+enc+"/raw", func(b *testing.B) {
					if len(msgs) == 0 {
						b.Skip("no messages captured")
					}
					nc := natstest.Connect(b, s)
					js, _ := jetstream.New(nc)
					b.ReportAllocs()
					for b.Loop() {
						if tname == "core" {
							for _, m := range msgs {
								if err := nc.PublishMsg(&natsgo.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}); err != nil {
									b.Fatal(err)
								}
							}
							continue
						}
						futs := make([]jetstream.PubAckFuture, 0, len(msgs))
						for _, m := range msgs {
							f, err := js.PublishMsgAsync(&natsgo.Msg{Subject: m.Subject, Data: m.Data})
							if err != nil {
								b.Fatal(err)
							}
							futs = append(futs, f)
						}
						for _, f := range futs {
							select {
							case <-f.Ok():
							case err := <-f.Err():
								b.Fatal(err)
							}
						}
					}
					nc.Flush()
					b.ReportMetric(float64(b.N)*n/b.Elapsed().Seconds(), "samples/s")
				})
			}
		}
	}
}

// capture keeps one Write's messages.
type capture struct {
	sub *natsgo.Subscription
	nc  *natsgo.Conn
}

func captureMessages(b *testing.B, s interface{ ClientURL() string }) *capture {
	nc, err := natsgo.Connect(s.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	sub, _ := nc.SubscribeSync("gpusampler.>")
	sub.SetPendingLimits(-1, -1)
	nc.Flush()
	return &capture{sub: sub, nc: nc}
}

func (c *capture) take() []*natsgo.Msg {
	defer c.nc.Close()
	c.nc.Flush()
	var out []*natsgo.Msg
	seq := ""
	for {
		m, err := c.sub.NextMsg(50_000_000)
		if err != nil {
			return out
		}
		if seq == "" {
			seq = m.Header.Get("Gpusampler-Seq")
		}
		if m.Header.Get("Gpusampler-Seq") != seq {
			continue
		}
		out = append(out, m)
	}
}
