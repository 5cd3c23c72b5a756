package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
)

// TestRollupIntegration: three nodes in two clusters publish power through
// the NATS output (each in another encoding); the processor's roll-up sums
// per host and per cluster.
func TestRollupIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t)
	nc := natstest.Connect(t, s)
	rollups, err := nc.SubscribeSync("gpusampler.rollup.power")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, natstest.Connect(t, s), Options{Subject: "gpusampler.*.*.power", Queue: "q",
			Out: "gpusampler.rollup.power", Interval: 50 * time.Millisecond, MaxAge: time.Hour})
	}()
	// Run publishes roll-ups on the connection it subscribed on, after it
	// subscribed: once one arrives, the server has the subscription.
	if _, err := rollups.NextMsg(time.Minute); err != nil { // a hang, not a slow machine
		t.Fatalf("waiting for the processor's first roll-up: %v", err)
	}
	now := time.Now().UnixNano()
	for _, n := range []struct {
		host, cluster, enc string
		watts              []float64
	}{{"node1", "a", "json", []float64{600, 650}}, {"node2", "a", "protobuf", []float64{500}}, {"node3", "b", "influx", []float64{300, 100}}} {
		cfg := natsout.DefaultConfig()
		cfg.Servers, cfg.Encoding = []string{s.ClientURL()}, n.enc
		out, err := natsout.New(cfg, natsout.WithHost(n.host), natsout.WithGlobalTags(map[string]string{"cluster": n.cluster}))
		if err != nil {
			t.Fatal(err)
		}
		b := &record.Batch{Seq: 1}
		for i, w := range n.watts {
			b.Devices = append(b.Devices, record.Device{Index: i, UUID: n.host + "-gpu" + string(rune('0'+i))})
			b.Samples = append(b.Samples, record.Sample{TimeNS: now - 1e9, Value: 1, Device: uint16(i), Metric: catalog.MetricPowerDraw},
				record.Sample{TimeNS: now, Value: w, Device: uint16(i), Metric: catalog.MetricPowerDraw},
				record.Sample{TimeNS: now, Value: 99, Device: uint16(i), Metric: catalog.MetricUtilGPU})
		}
		if err := out.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		out.Close()
	}
	deadline := time.Now().Add(time.Minute) // a hang, not a slow machine
	for time.Now().Before(deadline) {
		m, err := rollups.NextMsg(time.Second)
		if err != nil {
			continue
		}
		var r Rollup
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		if r.GPUs < 5 {
			continue
		}
		if r.Hosts["node1"] != 1250 || r.Hosts["node2"] != 500 || r.Hosts["node3"] != 400 ||
			r.Clusters["a"] != 1750 || r.Clusters["b"] != 400 || r.GPUs != 5 {
			t.Fatalf("roll-up %+v", r)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no complete roll-up within a minute")
}
