package nats_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/natstest"
	"github.com/gpusampler/gpusampler/internal/pipeline/buffer"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// TestServerRestartJetStreamIntegration publishes steadily through the
// output behind a memory buffer (as the agent wires it) while the server is
// shut down and a new one starts on the same port and store directory. The
// stream ends with every sample: none lost; duplicates (what de-duplication
// cannot see) are counted; the output's stored counter is what the stream
// holds.
func TestServerRestartJetStreamIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	dir := t.TempDir()
	s := natstest.Start(t, natstest.WithStoreDir(dir))
	port := s.Addr().(*net.TCPAddr).Port
	cfg := natsout.DefaultConfig()
	cfg.Encoding = natsout.EncodingProtobuf
	cfg.JetStream, cfg.CreateStream = true, true
	cfg.AckTimeout, cfg.ReconnectWait, cfg.ConnectTimeout = 300*time.Millisecond, 50*time.Millisecond, time.Second
	out := newOutput(t, s, cfg, natsout.WithHost("node1"))
	buf, err := buffer.New(out, buffer.Config{Kind: "memory", MaxBytes: 64 << 20, MaxRecords: 1 << 20,
		RetryInitial: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, CloseTimeout: 20 * time.Second},
		buffer.WithWriteTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const batches, perBatch = 300, 20
	ctx := context.Background()
	write := func(seq int) bool {
		b := &record.Batch{Seq: uint64(seq), Devices: []record.Device{{Index: 0, UUID: "GPU-r"}}}
		for i := range perBatch {
			b.Samples = append(b.Samples, record.Sample{TimeNS: int64(seq*perBatch + i), Value: float64(i), Metric: catalog.MetricPowerDraw})
		}
		if err := buf.Write(ctx, b); err != nil {
			t.Error(err)
			return false
		}
		return true
	}
	// The first third of the batches goes to the first server, the second
	// third is written while no server runs (the buffer retries it), the
	// last third after the restart.
	seq := 1
	for ; seq <= batches/3 && write(seq); seq++ {
	}
	s.Shutdown()
	s.WaitForShutdown()
	for ; seq <= 2*batches/3 && write(seq); seq++ {
	}
	s2 := natstest.Start(t, natstest.WithPort(port), natstest.WithStoreDir(dir))
	for ; seq <= batches && write(seq); seq++ {
	}
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	bst, st := buf.Stats(), out.Stats()
	t.Logf("buffer: delivered %d batches, retries %d, dropped %+v; output: %+v", bst.Delivered, bst.Retries, bst.DroppedRecords, st)
	if st.Reconnects == 0 {
		t.Errorf("the output never reconnected (%+v)", st)
	}

	// Read the whole stream back from the new server.
	js, err := jetstream.New(natstest.Connect(t, s2))
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int{}
	var msgs uint64
	for msgs < info.State.Msgs {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			msgs++
			r, err := stream.Decode(m.Headers(), m.Data())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range r.Batch.Samples {
				seen[s.TimeNS]++
			}
		}
		if n == 0 {
			t.Fatalf("stream has %d messages, read %d", info.State.Msgs, msgs)
		}
	}
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	lost := batches*perBatch - len(seen)
	t.Logf("stream: %d messages, %d distinct samples of %d, %d lost, %d duplicates", msgs, len(seen), batches*perBatch, lost, dups)
	if lost != 0 {
		t.Errorf("%d samples lost", lost)
	}
	if st.Stored != info.State.Msgs {
		t.Errorf("the output counted %d messages stored (acked %d, duplicates %d), the stream holds %d",
			st.Stored, st.Acked, st.Duplicates, info.State.Msgs)
	}
}

// A batch whose attempt stored one message and failed on another is
// retried: the stored one is acknowledged again, as a duplicate, and
// counted stored once; acked then exceeds what the stream holds, and stored
// equals it. (TestNATSJetStreamRestartIntegration in internal/conservation
// covers the other way they part: a message stored by an attempt given up
// is first acknowledged to the retry, as a duplicate.)
func TestStoredCountsAPartialAttemptOnceIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t)
	ctx := context.Background()
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	// The stream takes device 0's subjects only, at first.
	str, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PARTIAL", Subjects: []string{"p.node1.0.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := natsout.DefaultConfig()
	cfg.Encoding, cfg.GPU = natsout.EncodingProtobuf, "index"
	cfg.Subject, cfg.EventSubject, cfg.SelfSubject = "p.{host}.{gpu}.{group}", "p.{host}.{gpu}.events", "p.{host}.self"
	cfg.JetStream, cfg.Stream, cfg.AckTimeout = true, "PARTIAL", time.Second
	out := newOutput(t, s, cfg, natsout.WithHost("node1"))
	b := &record.Batch{Seq: 7, Devices: []record.Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}},
		Samples: []record.Sample{{TimeNS: 1, Value: 100, Device: 0, Metric: catalog.MetricPowerDraw},
			{TimeNS: 1, Value: 200, Device: 1, Metric: catalog.MetricPowerDraw}}}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = out.Write(wctx, b)
	cancel()
	if err == nil {
		t.Fatal("a Write with a subject no stream takes succeeded")
	}
	if st := out.Stats(); st.Acked != 1 || st.Stored != 1 {
		t.Fatalf("after the partial attempt: %+v, want 1 acked and stored", st)
	}
	if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: "PARTIAL", Subjects: []string{"p.node1.>"}}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := out.Write(wctx, b); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := out.Stats()
	if info.State.Msgs != 2 || st.Stored != 2 || st.Acked != 3 || st.Duplicates != 1 {
		t.Errorf("stream holds %d messages; output: stored %d acked %d duplicates %d (want 2 stored, 3 acked, 1 duplicate)",
			info.State.Msgs, st.Stored, st.Acked, st.Duplicates)
	}
}

// An output restarted in a new process (a crash, a wedge, a memory restart
// of the outputs' child) is offered again the batches the old process had
// published but not answered for: they carry the same Nats-Msg-Ids (the
// message's records, not a per-process instance), so the stream keeps one
// copy, although the new process attaches the device identities again.
func TestRestartedOutputSameMsgIDsIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t)
	ctx := context.Background()
	cfg := natsout.DefaultConfig()
	cfg.Encoding = natsout.EncodingProtobuf
	cfg.JetStream, cfg.CreateStream, cfg.AckTimeout = true, true, 5*time.Second
	batch := func(seq int) *record.Batch {
		b := &record.Batch{Seq: uint64(seq)}
		if seq == 1 { // the pump sends identities once
			b.Devices = []record.Device{{Index: 0, UUID: "GPU-r"}, {Index: 1, UUID: "GPU-s"}}
		}
		for i := range 10 {
			b.Samples = append(b.Samples, record.Sample{TimeNS: int64(seq*100 + i), Value: float64(i), Device: uint16(i % 2), Metric: catalog.MetricPowerDraw})
		}
		b.Events = append(b.Events, record.Event{Kind: "phase", Device: 0, StartNS: int64(seq), EndNS: int64(seq), Message: "m",
			Attrs: []record.Attr{{Key: "k", Value: "v"}}, Fields: []record.Field{{Key: "f", Value: 1.5}}})
		return b
	}
	write := func(out *natsout.Output, seq int) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := out.Write(wctx, batch(seq)); err != nil {
			t.Fatal(err)
		}
	}
	old := newOutput(t, s, cfg, natsout.WithName("n"), natsout.WithHost("node1"))
	for seq := 1; seq <= 3; seq++ {
		write(old, seq)
	}
	// The new process: the host offers batch 1 (its identities were in it)
	// and batches 2 and 3 (whose answers it never had) again.
	restarted := newOutput(t, s, cfg, natsout.WithName("n"), natsout.WithHost("node1"))
	for seq := 1; seq <= 3; seq++ {
		write(restarted, seq)
	}
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o, r := old.Stats(), restarted.Stats()
	if info.State.Msgs != o.Stored || r.Stored != 0 || r.Duplicates != r.Acked || r.Acked != o.Acked {
		t.Errorf("stream holds %d messages; old process stored %d of %d acked; restarted process stored %d, acked %d, duplicates %d (want every message a duplicate)",
			info.State.Msgs, o.Stored, o.Acked, r.Stored, r.Acked, r.Duplicates)
	}
	// Another output (another name) with the same records is not taken
	// for a duplicate.
	other := newOutput(t, s, cfg, natsout.WithName("other"), natsout.WithHost("node1"))
	write(other, 2)
	if st := other.Stats(); st.Duplicates != 0 || st.Stored != st.Acked {
		t.Errorf("another output's batch was taken for a duplicate: %+v", st)
	}
}

// An identity-only message (a device with nothing else in its batch) is
// hashed over the whole identity: after a restart (a new process numbers
// its batches from 1 again) a changed identity, here the device's pod, at
// the Seq the old process had used is a new message, not a duplicate the
// stream drops within its duplicate window.
func TestRestartedOutputChangedIdentityNotDuplicateIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t)
	ctx := context.Background()
	cfg := natsout.DefaultConfig()
	cfg.Encoding = natsout.EncodingProtobuf
	cfg.JetStream, cfg.CreateStream, cfg.AckTimeout = true, true, 5*time.Second
	write := func(out *natsout.Output, pod, driver string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		d := record.Device{Index: 0, UUID: "GPU-r", Name: "NVIDIA H200", DriverVersion: driver, Generation: 1}
		d.Pod = pod
		if err := out.Write(wctx, &record.Batch{Seq: 1, Devices: []record.Device{d}}); err != nil {
			t.Fatal(err)
		}
	}
	old := newOutput(t, s, cfg, natsout.WithName("n"), natsout.WithHost("node1"))
	write(old, "train-a", "570.1")
	restarted := newOutput(t, s, cfg, natsout.WithName("n"), natsout.WithHost("node1"))
	write(restarted, "train-b", "570.1")
	// Another field than the attribution (an upgraded driver) counts too.
	upgraded := newOutput(t, s, cfg, natsout.WithName("n"), natsout.WithHost("node1"))
	write(upgraded, "train-b", "575.2")
	// The same identity offered again is a duplicate.
	again := newOutput(t, s, cfg, natsout.WithName("n"), natsout.WithHost("node1"))
	write(again, "train-b", "575.2")
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := str.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o, r, u, a := old.Stats(), restarted.Stats(), upgraded.Stats(), again.Stats()
	if info.State.Msgs != 3 || o.Stored != 1 || r.Stored != 1 || u.Stored != 1 || r.Duplicates+u.Duplicates != 0 || a.Duplicates != 1 {
		t.Errorf("stream holds %d messages (want 3: every identity); stored %d, %d, %d, %d; duplicates %d, %d, %d, %d (want only the last one's)",
			info.State.Msgs, o.Stored, r.Stored, u.Stored, a.Stored, o.Duplicates, r.Duplicates, u.Duplicates, a.Duplicates)
	}
}
