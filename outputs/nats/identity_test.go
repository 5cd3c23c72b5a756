package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
)

var simDevices = []record.Device{{Index: 0, UUID: "GPU-aaaa", Name: "Simulated H100", Simulated: true},
	{Index: 1, UUID: "GPU-bbbb", Name: "Simulated A100", Simulated: true}}

// identityBatch has a power and a utilization sample of each device (four
// subjects), the identities only when withDevices.
func identityBatch(seq int, withDevices bool) *record.Batch {
	b := &record.Batch{Seq: uint64(seq)}
	if withDevices {
		b.Devices = simDevices
	}
	for _, d := range simDevices {
		t := int64(seq) * int64(time.Millisecond)
		b.Samples = append(b.Samples,
			record.Sample{TimeNS: t, Value: float64(100 + seq), Device: uint16(d.Index), Metric: catalog.MetricPowerDraw},
			record.Sample{TimeNS: t, Value: float64(seq % 100), Device: uint16(d.Index), Metric: catalog.MetricUtilGPU})
	}
	return b
}

// A consumer that subscribes after the publisher started learns every
// device's identity on every subject within identity_interval (timed by
// the output's clock, one tick per batch), and at once after a reconnect.
func TestLateSubscriberLearnsIdentitiesIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	const tick, interval = 100 * time.Millisecond, time.Second
	for _, enc := range []string{natsout.EncodingJSON, natsout.EncodingProtobuf} {
		t.Run(enc, func(t *testing.T) {
			s := natstest.Start(t)
			port := s.Addr().(*net.TCPAddr).Port
			var clock atomic.Int64
			now := func() time.Time { return time.Unix(0, clock.Load()) }
			cfg := natsout.DefaultConfig()
			cfg.Encoding, cfg.IdentityInterval, cfg.ReconnectWait = enc, interval, 20*time.Millisecond
			out := newOutput(t, s, cfg, natsout.WithHost("n1"), natsout.WithClock(now))
			write := func(seq int, withDevices bool) {
				t.Helper()
				if err := out.Write(context.Background(), identityBatch(seq, withDevices)); err != nil {
					t.Fatalf("batch %d: %v", seq, err)
				}
			}
			write(1, true)                             // identities go out once; nobody listens yet
			if err := out.Conn().Flush(); err != nil { // the server has batch 1 before anyone subscribes
				t.Fatal(err)
			}
			col := collect(t, s, "gpusampler.>")
			const last = 1 + 25 // 2.5 intervals of batches after the subscriber joined
			for seq := 2; seq <= last; seq++ {
				clock.Add(int64(tick))
				write(seq, false)
			}
			// Per subject (a consumer of that subject alone), in arrival order.
			known := map[string]map[int]record.Device{}
			unknownBefore, identitiesBefore := 0, 0
			bound := 1 + int(interval/tick) // the first batch at least interval after batch 1
			recs := col.drain(out)
			for i, r := range recs {
				subj := col.subjects[i]
				if known[subj] == nil {
					known[subj] = map[int]record.Device{}
				}
				for _, d := range r.Batch.Devices {
					known[subj][d.Index] = d
					if int(r.Seq) < bound {
						identitiesBefore++
					}
				}
				for _, smp := range r.Batch.Samples {
					d, ok := known[subj][int(smp.Device)]
					learned := ok && d.Name != "" && d.Simulated
					switch {
					case int(r.Seq) >= bound && !learned:
						t.Errorf("batch %d on %s: device %d has no identity %d ticks after the subscriber joined",
							r.Seq, subj, smp.Device, int(r.Seq)-1)
					case !learned:
						unknownBefore++
					}
				}
			}
			if len(known) != 4 {
				t.Errorf("%d subjects, want 4", len(known))
			}
			if identitiesBefore != 0 {
				t.Errorf("%d identity records in batches 2..%d, want none before the interval passed", identitiesBefore, bound-1)
			}
			st := out.Stats()
			t.Logf("%s: %d messages; %d samples before the identity arrived (bound: batch %d); %d identities re-sent",
				enc, len(recs), unknownBefore, bound, st.Identities)

			// After a reconnect the next batch carries every identity,
			// though the interval has not passed.
			s.Shutdown()
			s.WaitForShutdown()
			s2 := natstest.Start(t, natstest.WithPort(port))
			col2 := collect(t, s2, "gpusampler.>")
			for i := 0; out.Stats().Reconnects == 0 || !out.Conn().IsConnected(); i++ {
				if i == 60_000 {
					t.Fatal("the output never reconnected")
				}
				time.Sleep(5 * time.Millisecond)
			}
			clock.Add(int64(tick))
			write(last+1, false)
			recs = col2.drain(out)
			if len(recs) != 4 {
				t.Fatalf("%d messages after the reconnect, want 4", len(recs))
			}
			for i, r := range recs {
				if len(r.Batch.Devices) != 1 || r.Batch.Devices[0] != simDevices[r.Batch.Samples[0].Device] {
					t.Errorf("after the reconnect, %s carried identities %+v, want its device's", col2.subjects[i], r.Batch.Devices)
				}
			}
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// With retry_on_failed_connect, what is written before the first server
// answers is held and published, in order, once it does; beyond
// reconnect_buffer_bytes Write fails retryably, and what is still held at
// Close is counted as dropped.
func TestPublishBeforeFirstConnectIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	port := freePort(t)
	cfg := natsout.DefaultConfig()
	cfg.Servers = []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}
	cfg.RetryOnFailedConnect, cfg.ReconnectWait, cfg.ConnectTimeout = true, 20*time.Millisecond, time.Second
	out, err := natsout.New(cfg, natsout.WithHost("n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	var want []record.Sample
	const early = 20
	for seq := 1; seq <= early; seq++ {
		b := identityBatch(seq, seq == 1)
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatalf("batch %d before the server started: %v", seq, err)
		}
		want = append(want, b.Samples...)
	}
	if st := out.Stats(); st.Held != 4*early || st.Messages != 0 {
		t.Fatalf("before the server started: %+v, want %d messages held, none published", st, 4*early)
	}
	s := natstest.Start(t, natstest.WithPort(port))
	col := collect(t, s, "gpusampler.>")
	for i := 0; !out.Conn().IsConnected(); i++ {
		if i == 60_000 {
			t.Fatal("the output never connected")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := identityBatch(early+1, false)
	if err := out.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	want = append(want, b.Samples...)
	recs := col.drain(out)
	var got []record.Sample
	lastSeq := map[string]uint64{}
	for i, r := range recs {
		got = append(got, r.Batch.Samples...)
		if r.Seq <= lastSeq[col.subjects[i]] {
			t.Errorf("%s: batch %d after batch %d", col.subjects[i], r.Seq, lastSeq[col.subjects[i]])
		}
		lastSeq[col.subjects[i]] = r.Seq
	}
	sortSamples(got)
	sortSamples(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("received %d samples, want %d\n got %v\nwant %v", len(got), len(want), got, want)
	}
	st := out.Stats()
	t.Logf("held %d messages (%d samples) before the first connection; published %d, dropped %d", 4*early, 4*early, st.Messages, st.HeldDropped)
	if st.Held != 0 || st.HeldDropped != 0 || st.Messages != 4*(early+1) {
		t.Errorf("stats %+v, want nothing held or dropped and %d messages", st, 4*(early+1))
	}
}

func TestHeldBeforeFirstConnectIsBounded(t *testing.T) {
	cfg := natsout.DefaultConfig()
	cfg.Servers = []string{fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))}
	cfg.RetryOnFailedConnect, cfg.ReconnectWait, cfg.ReconnectBufferBytes = true, time.Hour, 4096
	out, err := natsout.New(cfg, natsout.WithHost("n1"))
	if err != nil {
		t.Fatal(err)
	}
	seq := 1
	for ; seq < 1000; seq++ {
		err = out.Write(context.Background(), identityBatch(seq, seq == 1))
		if err != nil {
			break
		}
	}
	if !errors.Is(err, record.ErrUnavailable) || record.IsPermanent(err) {
		t.Fatalf("write %d past reconnect_buffer_bytes: %v, want a retryable record.ErrUnavailable", seq, err)
	}
	held := out.Stats().Held
	if held != uint64(4*(seq-1)) {
		t.Errorf("%d messages held, want %d (the %d batches accepted)", held, 4*(seq-1), seq-1)
	}
	err = out.Close()
	if err == nil || !strings.Contains(err.Error(), "never sent") {
		t.Errorf("close with held messages: %v, want an error saying they were never sent", err)
	}
	if st := out.Stats(); st.HeldDropped != held || st.Held != 0 {
		t.Errorf("after close: %+v, want the %d held messages counted as dropped", st, held)
	}
}
