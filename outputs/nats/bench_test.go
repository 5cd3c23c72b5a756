package nats_test

import (
	"context"
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

// BenchmarkPublish: samples/s through the output (encode, split, publish;
// JetStream waits for every ack), and beside it "raw": the very messages
// one Write produced, pre-encoded, published the same way — the cost of
// the transport alone, measured in the same run.
func BenchmarkPublish(b *testing.B) {
	s := natstest.Start(b)
	for _, tname := range []string{"core", "jetstream"} {
		for _, enc := range natsout.Encodings {
			cfg := natsout.DefaultConfig()
			cfg.Encoding = enc
			cfg.JetStream, cfg.CreateStream = tname == "jetstream", tname == "jetstream"
			cfg.StreamMaxBytes = 256 << 20
			cfg.StreamStorage = "memory"
			batch := benchBatch()
			var msgs []*natsgo.Msg
			b.Run(tname+"/"+enc+"/output", func(b *testing.B) {
				out := newOutput(b, s, cfg, natsout.WithHost("node1"))
				cap := captureMessages(b, s)
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					batch.Seq++
					if err := out.Write(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				out.Conn().Flush()
				st := out.Stats()
				msgs = cap.take()
				b.ReportMetric(float64(b.N)*4096/b.Elapsed().Seconds(), "samples/s")
				b.ReportMetric(float64(st.Bytes)/float64(b.N)/4096, "B/sample")
				b.ReportMetric(float64(st.Messages)/float64(b.N), "msgs/batch")
			})
			b.Run(tname+"/"+enc+"/raw", func(b *testing.B) {
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
				b.ReportMetric(float64(b.N)*4096/b.Elapsed().Seconds(), "samples/s")
			})
		}
	}
}

// capture keeps the first batch's messages (one Write's worth).
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
