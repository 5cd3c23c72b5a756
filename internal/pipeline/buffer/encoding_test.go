package buffer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordpb"
	"github.com/gpusampler/gpusampler/record/recordtest"
)

// normalized returns a copy of b with empty slices as nil, so that batches
// compare with reflect.DeepEqual whatever capacity they were decoded into.
func normalized(b *record.Batch) *record.Batch {
	c := *b
	if len(c.Devices) == 0 {
		c.Devices = nil
	}
	if len(c.Samples) == 0 {
		c.Samples = nil
	}
	if len(c.Summaries) == 0 {
		c.Summaries = nil
	}
	if len(c.Events) == 0 {
		c.Events = nil
	} else {
		c.Events = append([]record.Event(nil), c.Events...)
		for i := range c.Events {
			if len(c.Events[i].Attrs) == 0 {
				c.Events[i].Attrs = nil
			}
			if len(c.Events[i].Fields) == 0 {
				c.Events[i].Fields = nil
			}
		}
	}
	return &c
}

// Batches returns the accepted batches, decoded, in order.
func (s *fakeSink) Batches(t testing.TB) []*record.Batch {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*record.Batch
	for _, p := range s.got {
		var b record.Batch
		if err := decodeBatch(&b, p); err != nil {
			t.Fatalf("sink holds an undecodable batch: %v", err)
		}
		out = append(out, normalized(&b))
	}
	return out
}

// TestBufferCarriesEveryRecordKind: whatever a pump writes comes out of the
// buffer whole — samples, summaries, events with attributes and fields
// (process records, self-metrics), device identities with the MIG and mode
// fields — compared record by record, for memory and disk.
func TestBufferCarriesEveryRecordKind(t *testing.T) {
	full := recordtest.FullBatch()
	if unset := recordtest.UnsetFields(full); len(unset) > 0 {
		t.Fatalf("fixture leaves fields unset: %v", unset)
	}
	r := rand.New(rand.NewPCG(1, 2))
	want := []*record.Batch{full}
	for i := range 50 {
		b := randomBatch(r, uint64(i+2))
		if len(b.Samples) == 0 {
			b.Samples = []record.Sample{{TimeNS: int64(i), Value: 1, Metric: catalog.MetricPowerDraw}}
		}
		// Every device the batch refers to has its identity in the
		// batch, so that the buffer adds none: what comes out must equal
		// what went in.
		b.Devices = nil
		for _, s := range b.Samples {
			b.Devices = append(b.Devices, record.Device{Index: int(s.Device), UUID: "GPU-x"})
		}
		for _, e := range b.Events {
			b.Devices = append(b.Devices, record.Device{Index: e.Device, UUID: "GPU-x"})
		}
		want = append(want, b)
	}
	for _, env := range kinds {
		t.Run(env.kind, func(t *testing.T) {
			sink := &fakeSink{}
			b := env.newBuffer(t, sink, Config{})
			for _, w := range want {
				if err := b.Write(context.Background(), w); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			got := sink.Batches(t)
			if len(got) != len(want) {
				t.Fatalf("sink got %d batches, want %d", len(got), len(want))
			}
			for i := range want {
				if w := normalized(want[i]); !reflect.DeepEqual(got[i], w) {
					t.Fatalf("batch %d differs:\n got %+v\nwant %+v", i, *got[i], *w)
				}
			}
		})
	}
}

// writeSegments leaves in dir what a process with the given catalog names
// and identities queued and never delivered: one segment whose header
// holds names and devs, and the batches.
func writeSegments(t *testing.T, dir string, names []string, devs []record.Device, batches ...*record.Batch) {
	t.Helper()
	h := &recordpb.BufferSegment{Format: 2, MetricNames: names}
	for i := range devs {
		h.Devices = append(h.Devices, recordpb.FromDevice(&devs[i]))
	}
	hdr, err := proto.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	q, err := openDiskQueue(dir, diskOptions{maxBytes: 1 << 30, header: hdr})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if err := q.push(encode(b), b.Len(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.close(); err != nil {
		t.Fatal(err)
	}
}

// TestDiskReplayMapsMetricsByName: a segment written by a version whose
// catalog numbered metrics differently is replayed with its samples and
// summaries relabelled by metric name; a metric this catalog lacks is
// dropped and counted, never sent under another metric's ID.
func TestDiskReplayMapsMetricsByName(t *testing.T) {
	c := catalog.Default()
	// The old catalog: power_draw and temp_gpu swapped, and a metric
	// since removed at ID 3.
	old := recordpb.MetricNames(c)
	pd, tg := int(catalog.MetricPowerDraw)-1, int(catalog.MetricTempGPU)-1
	old[pd], old[tg] = old[tg], old[pd]
	old[2] = "retired_metric"
	oldPower, oldTemp := catalog.MetricID(tg+1), catalog.MetricID(pd+1)

	in := &record.Batch{Seq: 4,
		Samples: []record.Sample{{TimeNS: 1, Value: 300, Metric: oldPower}, {TimeNS: 2, Value: 55, Metric: oldTemp},
			{TimeNS: 3, Value: 1, Metric: 3}, {TimeNS: 4, Value: 7, Metric: catalog.MetricClockSM}},
		Summaries: []record.Summary{{StartNS: 5, IntervalNS: 5, Mean: 54, Count: 2, Metric: oldTemp},
			{StartNS: 5, IntervalNS: 5, Mean: 1, Count: 1, Metric: 3}}}
	dir := t.TempDir()
	writeSegments(t, dir, old, nil, in)

	sink := &fakeSink{}
	b, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	want := &record.Batch{Seq: 4,
		Samples: []record.Sample{{TimeNS: 1, Value: 300, Metric: catalog.MetricPowerDraw},
			{TimeNS: 2, Value: 55, Metric: catalog.MetricTempGPU}, {TimeNS: 4, Value: 7, Metric: catalog.MetricClockSM}},
		Summaries: []record.Summary{{StartNS: 5, IntervalNS: 5, Mean: 54, Count: 2, Metric: catalog.MetricTempGPU}}}
	got := sink.Batches(t)
	if len(got) != 1 || !reflect.DeepEqual(got[0], normalized(want)) {
		for _, g := range got {
			t.Logf("replayed %+v", *g)
		}
		t.Fatalf("replayed %d batches, want one: %+v", len(got), *want)
	}
	st := b.Stats()
	if st.DroppedRecords.Unmapped != 2 || st.DroppedBatches.Unmapped != 1 || st.DeliveredRecords != 4 {
		t.Fatalf("stats: dropped %+v / %+v, delivered records %d; want 2 unmapped records in 1 batch, 4 delivered",
			st.DroppedRecords, st.DroppedBatches, st.DeliveredRecords)
	}
}

// TestDiskRefusesOldFormat: a segment in the format before the catalog was
// recorded is refused, naming the file, and left in place.
func TestDiskRefusesOldFormat(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "00000000000000000003.seg")
	if err := os.WriteFile(path, []byte("GSBQSEG1GSBF\x05\x00\x00\x00junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(&fakeSink{}, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "format 1") {
		t.Fatalf("open: %v, want an error naming %s and its format", err, path)
	}
	if _, serr := os.Stat(path); serr != nil {
		t.Fatalf("old segment removed: %v", serr)
	}
	// The directory is not left locked.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	b, err := New(&fakeSink{}, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir})
	if err != nil {
		t.Fatalf("reopen after removing it: %v", err)
	}
	b.Close()
}

// TestDiskReplayCarriesIdentity: the pump sends a device's identity once;
// after a restart the batches replayed from the disk still name their
// devices, so that the line protocol a sink receives has uuid, name and
// pci_bus_id on every sample line.
func TestDiskReplayCarriesIdentity(t *testing.T) {
	dir := t.TempDir()
	devs := []record.Device{
		{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA H200", PCIBusID: "00000000:19:00.0", Backend: "nvml", Generation: 1},
		{Index: 1, UUID: "GPU-bbbb", Name: "NVIDIA H200", PCIBusID: "00000000:3B:00.0", Backend: "nvml", Generation: 1,
			MIGMode: record.ModeDisabled},
	}
	batch := func(seq uint64) *record.Batch {
		return &record.Batch{Seq: seq, Samples: []record.Sample{
			{TimeNS: 1_700_000_000_000_000_000 + int64(seq), Value: float64(seq), Device: 0, Metric: catalog.MetricPowerDraw},
			{TimeNS: 1_700_000_000_000_000_000 + int64(seq), Value: float64(seq), Device: 1, Metric: catalog.MetricTempGPU}}}
	}
	first := batch(1)
	first.Devices = devs
	// Process 1: the sink takes batch 1 (with the identities), then hangs.
	gate := make(chan struct{})
	sink := &fakeSink{entered: make(chan uint64, 10), script: func(call int, b *record.Batch) error {
		if call > 1 {
			<-gate
			return errors.New("sink down")
		}
		return nil
	}}
	b1, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir, CloseTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, bt := range []*record.Batch{first, batch(2), batch(3)} {
		if err := b1.Write(context.Background(), bt); err != nil {
			t.Fatal(err)
		}
	}
	<-sink.entered
	<-sink.entered // batch 2 is in flight: batch 1 was accepted
	b1.Close()     // gives up on batch 2 at the close timeout
	close(gate)

	// Process 2 replays 2 and 3 into a line-protocol sink.
	sink2 := &fakeSink{}
	b2, err := New(sink2, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	got := sink2.Batches(t)
	if len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 3 {
		t.Fatalf("replayed %+v, want batches 2 and 3", got)
	}
	// The first replayed batch names both devices; the second needs not
	// (the sink has them).
	if !reflect.DeepEqual(got[0].Devices, devs) || len(got[1].Devices) != 0 {
		t.Fatalf("replayed identities: %+v and %+v, want %+v then none", got[0].Devices, got[1].Devices, devs)
	}
	enc := lineproto.New(lineproto.Options{Catalog: catalog.Default()})
	for _, bt := range got {
		enc.Encode(bt)
	}
	if err := enc.Err(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(enc.Bytes())), "\n")
	if len(lines) == 0 {
		t.Fatal("no lines")
	}
	for _, l := range lines {
		for _, tag := range []string{"uuid=GPU-", "name=NVIDIA\\ H200", "pci_bus_id=00000000:"} {
			if !strings.Contains(l, tag) {
				t.Fatalf("replayed line lacks %q: %s", tag, l)
			}
		}
	}
}

// FuzzScanSegment: arbitrary segment bytes never panic the scanner, and
// every record it reports is inside the data and passes its checksum.
func FuzzScanSegment(f *testing.F) {
	seg := appendSegmentHeader(nil, []byte("header"))
	for i := range 4 {
		seg = appendFrame(seg, encode(testBatch(uint64(i+1), 5)), 5, int64(i))
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-7])
	f.Add([]byte(segMagic + frameMagic + "\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, start, err := parseSegmentHeader(data)
		if err != nil {
			start = int64(len(segMagic))
		}
		frames, bad := scanSegment(data, start)
		for _, fr := range frames {
			if fr.off < 0 || fr.off+fr.total() > int64(len(data)) {
				t.Fatalf("record %+v outside %d bytes", fr, len(data))
			}
			if _, ok := parseFrame(data, fr.off); !ok {
				t.Fatalf("record %+v does not parse", fr)
			}
		}
		for _, r := range bad {
			if r.start >= r.end || r.end > int64(len(data)) {
				t.Fatalf("bad region %+v outside %d bytes", r, len(data))
			}
		}
	})
}

// levelHandler records each log record's level and message.
type levelHandler struct {
	mu   sync.Mutex
	recs []string
}

func (h *levelHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *levelHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelHandler) WithGroup(string) slog.Handler      { return h }
func (h *levelHandler) Count(rec string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r == rec {
			n++
		}
	}
	return n
}

// TestDiskCorruptRecordCounted: a record damaged on disk is dropped,
// counted with its records (dropped_corrupt) and logged at warn level;
// every other batch is delivered.
func TestDiskCorruptRecordCounted(t *testing.T) {
	dir := t.TempDir()
	var in []*record.Batch
	for seq := uint64(1); seq <= 10; seq++ {
		in = append(in, plainBatch(seq, 4))
	}
	writeSegments(t, dir, recordpb.MetricNames(catalog.Default()), nil, in...)
	ids, err := listSegments(dir)
	if err != nil || len(ids) != 1 {
		t.Fatalf("segments %v, %v; want one", ids, err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%020d%s", ids[0], segExt))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, start, err := parseSegmentHeader(data)
	if err != nil {
		t.Fatal(err)
	}
	frames, _ := scanSegment(data, start)
	data[frames[4].off+frameHeaderSize+3] ^= 0x40 // the payload of seq 5
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	logs := &levelHandler{}
	sink := &fakeSink{}
	b, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir}, WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := sink.Accepted(t), []uint64{1, 2, 3, 4, 6, 7, 8, 9, 10}; !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	st := b.Stats()
	if st.DroppedBatches.Corrupt != 1 || st.DroppedRecords.Corrupt != 4 || st.DroppedRecords.Total() != 4 {
		t.Fatalf("dropped batches %+v records %+v, want 1 corrupt batch of 4 records", st.DroppedBatches, st.DroppedRecords)
	}
	// One line for the segment (the cursor says what it held).
	if n := logs.Count("WARN buffer segment damaged while gpusampler was stopped; its lost records are counted as corrupt"); n != 1 {
		t.Fatalf("warn lines for the damaged segment: %d, want 1 (log: %v)", n, logs.recs)
	}
}

// TestDiskReplayPermanentRefusal: after a restart, a replayed batch that
// the sink refuses permanently (an InfluxDB 400) is sent once, dropped and
// counted; every batch after it arrives, whole.
func TestDiskReplayPermanentRefusal(t *testing.T) {
	dir := t.TempDir()
	var in []*record.Batch
	for seq := uint64(1); seq <= 5; seq++ {
		in = append(in, testBatch(seq, 3))
	}
	writeSegments(t, dir, recordpb.MetricNames(catalog.Default()), nil, in...)
	sink := &fakeSink{script: func(_ int, b *record.Batch) error {
		if b.Seq == 2 {
			return fmt.Errorf("influxdb: write: %w", record.Permanent(errors.New("400 field type conflict")))
		}
		return nil
	}}
	b, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(context.Background(), testBatch(6, 3)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sink.Calls(); !slices.Equal(got, seqRange(1, 6)) {
		t.Fatalf("calls %v, want 1..6: the refused batch is sent once", got)
	}
	got := sink.Batches(t)
	want := []*record.Batch{in[0], in[2], in[3], in[4], testBatch(6, 3)}
	if len(got) != len(want) {
		t.Fatalf("accepted %d batches, want %d", len(got), len(want))
	}
	for i := range want {
		if w := normalized(want[i]); !reflect.DeepEqual(got[i], w) {
			t.Fatalf("accepted batch %d:\n got %+v\nwant %+v", i, *got[i], *w)
		}
	}
	st := b.Stats()
	if st.DroppedBatches.Malformed != 1 || st.DroppedRecords.Malformed != 3 || st.Retries != 0 ||
		st.Delivered != 5 || st.Replayed != 4 || st.BufferedBatches != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestMemoryCapKeepsIdentity: the cap drops the batch that carried a
// device's identity (the pump sends it once); the next batch delivered
// for that device names it.
func TestMemoryCapKeepsIdentity(t *testing.T) {
	dev := record.Device{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA H200", PCIBusID: "00000000:19:00.0", Generation: 1}
	sample := func(seq uint64) *record.Batch {
		return &record.Batch{Seq: seq, Samples: []record.Sample{{TimeNS: int64(seq), Value: 1, Metric: catalog.MetricPowerDraw}}}
	}
	sink := &fakeSink{gate: make(chan struct{}), entered: make(chan uint64, 10)}
	b, err := New(sink, Config{Kind: KindMemory, MaxBytes: 1 << 20, MaxRecords: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Write(ctx, &record.Batch{Seq: 1, Events: []record.Event{{Kind: record.EventXID, Device: -1}}}); err != nil {
		t.Fatal(err)
	}
	<-sink.entered // batch 1 in flight
	first := sample(2)
	first.Devices = []record.Device{dev}
	for _, bt := range []*record.Batch{first, sample(3), sample(4)} {
		if err := b.Write(ctx, bt); err != nil {
			t.Fatal(err)
		}
	}
	close(sink.gate)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	got := sink.Batches(t)
	want := []*record.Batch{
		{Seq: 1, Events: []record.Event{{Kind: record.EventXID, Device: -1}}},
		{Seq: 3, Devices: []record.Device{dev}, Samples: sample(3).Samples},
		{Seq: 4, Samples: sample(4).Samples},
	}
	if len(got) != len(want) {
		t.Fatalf("delivered %d batches, want %d", len(got), len(want))
	}
	for i := range want {
		if w := normalized(want[i]); !reflect.DeepEqual(got[i], w) {
			t.Fatalf("batch %d:\n got %+v\nwant %+v", i, *got[i], *w)
		}
	}
	if st := b.Stats(); st.DroppedBatches.Cap != 1 || st.DroppedRecords.Cap != 2 {
		t.Fatalf("cap drops %d batches %d records, want 1 and 2", st.DroppedBatches.Cap, st.DroppedRecords.Cap)
	}
}

// TestDiskCorruptHeaderDropsSegment: a segment whose header fails its
// checksum cannot be mapped onto the catalog: its batches are dropped,
// counted with their records and logged at warn level, never delivered
// under guessed metric IDs.
func TestDiskCorruptHeaderDropsSegment(t *testing.T) {
	for _, cursor := range []bool{true, false} {
		t.Run(fmt.Sprint("cursor=", cursor), func(t *testing.T) { testCorruptHeader(t, cursor) })
	}
}

func testCorruptHeader(t *testing.T, cursor bool) {
	dir := t.TempDir()
	var in []*record.Batch
	for seq := uint64(1); seq <= 3; seq++ {
		in = append(in, plainBatch(seq, 5))
	}
	writeSegments(t, dir, recordpb.MetricNames(catalog.Default()), nil, in...)
	ids, err := listSegments(dir)
	if err != nil || len(ids) != 1 {
		t.Fatalf("segments %v, %v; want one", ids, err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%020d%s", ids[0], segExt))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[segHeaderSize+2] ^= 0x01 // inside the header
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if !cursor { // as after a crash before the first commit
		if err := os.Remove(filepath.Join(dir, cursorName)); err != nil {
			t.Fatal(err)
		}
	}
	logs := &levelHandler{}
	sink := &fakeSink{}
	b, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir}, WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(context.Background(), plainBatch(4, 5)); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sink.Accepted(t); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("delivered %v, want only the new batch 4", got)
	}
	st := b.Stats()
	if st.DroppedBatches.Corrupt != 3 || st.DroppedRecords.Corrupt != 15 {
		t.Fatalf("corrupt drops %d batches %d records, want 3 and 15", st.DroppedBatches.Corrupt, st.DroppedRecords.Corrupt)
	}
	msg := "WARN buffer segment dropped: its header is corrupt, so its batches cannot be mapped onto the metric catalog"
	if cursor { // one line for the segment, which the cursor describes
		msg = "WARN buffer segment damaged while gpusampler was stopped; its lost records are counted as corrupt"
	}
	if n := logs.Count(msg); n != 1 {
		t.Fatalf("warn lines: %d, want 1 (log: %v)", n, logs.recs)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("corrupt segment still there: %v", err)
	}
}

// TestDiskReplayKeepsOrigin: a backlog written by a process configured as
// host A with global tags X and replayed by one configured as host B with
// tags Y keeps A and X (record.Batch.Origin, and so the lines an encoder
// configured as B/Y writes); the new process's own batches carry none (B/Y
// apply). A process with the segment's own identity sees no Origin.
func TestDiskReplayKeepsOrigin(t *testing.T) {
	dir := t.TempDir()
	tagsA, tagsB := map[string]string{"rack": "r1"}, map[string]string{"rack": "r2", "cluster": "west"}
	// Process 1 (A/X): the sink is down; everything stays on disk.
	down := &fakeSink{script: func(int, *record.Batch) error { return record.Unavailable(errors.New("sink down")) }}
	b1, err := New(down, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir, CloseTimeout: time.Millisecond},
		WithOrigin("hostA", tagsA))
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := b1.Write(context.Background(), testBatch(seq*10, 4)); err != nil {
			t.Fatal(err)
		}
	}
	b1.Close()
	if n := len(down.Accepted(t)); n != 0 {
		t.Fatalf("process 1's sink accepted %d batches", n)
	}

	// Process 2 (B/Y) replays them, then writes its own.
	sink := &fakeSink{}
	logs := &countingHandler{}
	b2, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir}, WithOrigin("hostB", tagsB),
		WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(4); seq <= 5; seq++ {
		if err := b2.Write(context.Background(), testBatch(seq*10, 4)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	got := sink.Batches(t)
	if len(got) != 5 {
		t.Fatalf("delivered %d batches, want 5", len(got))
	}
	wantA := &record.Origin{Host: "hostA", Tags: tagsA}
	enc := lineproto.New(lineproto.Options{Host: "hostB", GlobalTags: lineproto.SortedTags(tagsB)})
	for i, g := range got {
		replayed := g.Seq <= 30
		if replayed && !g.Origin.Equal(wantA) || !replayed && g.Origin != nil {
			t.Fatalf("batch %d (seq %d): origin %+v, want %+v", i, g.Seq, g.Origin, map[bool]*record.Origin{true: wantA}[replayed])
		}
		enc.Reset()
		enc.Encode(g)
		if err := enc.Err(); err != nil {
			t.Fatal(err)
		}
		want, not := "host=hostA", "host=hostB"
		if !replayed {
			want, not = not, want
		}
		for l := range strings.Lines(string(enc.Bytes())) {
			if !strings.Contains(l, ","+want+",") || strings.Contains(l, not) ||
				replayed != (strings.Contains(l, ",rack=r1") && !strings.Contains(l, "cluster=")) ||
				!replayed != strings.Contains(l, ",cluster=west,") {
				t.Fatalf("seq %d (replayed %v): line %q", g.Seq, replayed, l)
			}
		}
	}
	if n := logs.Count("replaying segments sampled under another host name or other global tags; their records keep them"); n != 1 {
		t.Fatalf("%d log lines about the replayed identity, want 1", n)
	}

	// Process 3 (A/X again) writes under the segment's own identity: no
	// Origin needed.
	dir3 := t.TempDir()
	b3, err := New(down, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir3, CloseTimeout: time.Millisecond},
		WithOrigin("hostA", tagsA))
	if err != nil {
		t.Fatal(err)
	}
	if err := b3.Write(context.Background(), testBatch(60, 4)); err != nil {
		t.Fatal(err)
	}
	b3.Close()
	sink4 := &fakeSink{}
	b4, err := New(sink4, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir3}, WithOrigin("hostA", tagsA))
	if err != nil {
		t.Fatal(err)
	}
	if err := b4.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sink4.Batches(t); len(got) != 1 || got[0].Origin != nil {
		t.Fatalf("same identity: delivered %+v, want one batch without an Origin", got)
	}
}
