package buffer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// queueModel is the disk queue's specification: a FIFO with one entry in
// flight, dropping the oldest queued at the caps, and after a crash showing
// what the last committed cursor left plus everything appended since.
type queueModel struct {
	maxBytes   int64
	maxRecords int

	all      []*modelEntry // every entry ever appended, in order
	queued   []*modelEntry
	inflight *modelEntry
	capB     uint64
	capR     uint64

	// As of the last commit: which entries were unresolved, and how many
	// had been appended.
	commitUnresolved map[*modelEntry]bool
	commitAppended   int
}

type modelEntry struct {
	payload  []byte
	records  int
	resolved bool
}

func (m *modelEntry) total() int64 { return frameHeaderSize + int64(len(m.payload)) }

func (m *queueModel) push(p []byte, records int) {
	e := &modelEntry{payload: bytes.Clone(p), records: records}
	var qb, qr int64
	for _, x := range m.queued {
		qb += x.total()
		qr += int64(x.records)
	}
	for len(m.queued) > 0 && (qb+e.total() > m.maxBytes || (m.maxRecords > 0 && qr+int64(records) > int64(m.maxRecords))) {
		d := m.queued[0]
		m.queued = m.queued[1:]
		d.resolved = true
		qb -= d.total()
		qr -= int64(d.records)
		m.capB++
		m.capR += uint64(d.records)
	}
	m.queued = append(m.queued, e)
	m.all = append(m.all, e)
}

func (m *queueModel) unresolved() []*modelEntry {
	var out []*modelEntry
	if m.inflight != nil {
		out = append(out, m.inflight)
	}
	return append(out, m.queued...)
}

func (m *queueModel) commit() {
	m.commitUnresolved = map[*modelEntry]bool{}
	for _, e := range m.unresolved() {
		m.commitUnresolved[e] = true
	}
	m.commitAppended = len(m.all)
}

// restart turns the model into what a reopened queue shows.
func (m *queueModel) restart(crash bool) {
	var vis []*modelEntry
	if crash {
		for i, e := range m.all {
			if m.commitUnresolved[e] || i >= m.commitAppended {
				vis = append(vis, e)
			}
		}
	} else {
		vis = m.unresolved()
	}
	for _, e := range m.all {
		e.resolved = true
	}
	for _, e := range vis {
		e.resolved = false
	}
	m.all, m.queued, m.inflight = vis, vis, nil
	// Open enforces the caps on what it found.
	var qb, qr int64
	for _, e := range vis {
		qb += e.total()
		qr += int64(e.records)
	}
	for len(m.queued) > 0 && (qb > m.maxBytes || (m.maxRecords > 0 && qr > int64(m.maxRecords))) {
		d := m.queued[0]
		m.queued = m.queued[1:]
		d.resolved = true
		qb -= d.total()
		qr -= int64(d.records)
		m.capB++
		m.capR += uint64(d.records)
	}
	m.commit()
}

// TestDiskQueueModel runs random appends, takes, acknowledgements,
// failures (no ack), syncs, clean restarts and crashes (files abandoned
// without a sync) against the model; after every step the queue's visible
// content and gauges must match it exactly.
func TestDiskQueueModel(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4}
	steps := 2500
	if testing.Short() {
		seeds, steps = seeds[:1], 500
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runModel(t, seed, steps) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	r := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()
	m := &queueModel{maxBytes: 24 << 10, maxRecords: 300 + r.IntN(2)*1000000}
	committed := false
	opt := diskOptions{maxBytes: m.maxBytes, maxRecords: m.maxRecords, segmentBytes: 3 << 10,
		hooks: diskHooks{committed: func() { committed = true }}}
	open := func() *diskQueue {
		q, err := openDiskQueue(dir, opt)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return q
	}
	q := open()
	defer func() { q.close() }()
	m.commit()
	var capB0, capR0 uint64 // the model's cap counts when q was opened
	seq := uint64(0)
	for step := range steps {
		committed = false
		var op string
		switch x := r.IntN(100); {
		case x < 45:
			op = "push"
			seq++
			b := randomBatch(r, seq)
			p := encode(b)
			if err := q.push(p, b.Len(), int64(seq)); err != nil {
				t.Fatalf("step %d push: %v", step, err)
			}
			m.push(p, b.Len())
		case x < 65:
			op = "next"
			e, ok, err := q.next()
			if err != nil {
				t.Fatalf("step %d next: %v", step, err)
			}
			if m.inflight == nil && len(m.queued) > 0 {
				m.inflight, m.queued = m.queued[0], m.queued[1:]
			}
			if ok != (m.inflight != nil) {
				t.Fatalf("step %d next: ok=%v, model has in flight %v", step, ok, m.inflight != nil)
			}
			if ok && !bytes.Equal(e.payload, m.inflight.payload) {
				t.Fatalf("step %d next: payload differs from the model's oldest", step)
			}
		case x < 85:
			op = "ack"
			q.ack()
			if m.inflight != nil {
				m.inflight.resolved = true
				m.inflight = nil
			}
		case x < 92:
			op = "sync"
			if err := q.sync(); err != nil {
				t.Fatalf("step %d sync: %v", step, err)
			}
		case x < 96:
			op = "restart"
			if err := q.close(); err != nil {
				t.Fatalf("step %d close: %v", step, err)
			}
			q = open()
			capB0, capR0 = m.capB, m.capR
			m.restart(false)
		default:
			op = "crash"
			q.closeFiles()
			capB0, capR0 = m.capB, m.capR
			m.restart(true)
			q = open()
		}
		if committed && op != "restart" && op != "crash" {
			m.commit()
		}
		checkModel(t, fmt.Sprintf("step %d (%s)", step, op), q, m, capB0, capR0)
	}
}

func checkModel(t *testing.T, where string, q *diskQueue, m *queueModel, capB0, capR0 uint64) {
	t.Helper()
	want := m.unresolved()
	got, err := q.snapshot()
	if err != nil {
		t.Fatalf("%s: snapshot: %v", where, err)
	}
	if len(got) != len(want) {
		dumpModel(t, q, m)
		t.Fatalf("%s: queue shows %d entries, model %d", where, len(got), len(want))
	}
	var bytesWant, recWant int64
	for i := range got {
		if !bytes.Equal(got[i].payload, want[i].payload) || got[i].records != want[i].records {
			t.Fatalf("%s: entry %d differs from the model", where, i)
		}
		bytesWant += want[i].total()
		recWant += int64(want[i].records)
	}
	st := q.stats()
	if st.batches != int64(len(want)) || st.bytes != bytesWant || st.records != recWant {
		t.Fatalf("%s: gauges %d batches %d bytes %d records, model %d %d %d", where,
			st.batches, st.bytes, st.records, len(want), bytesWant, recWant)
	}
	if st.capBatches != m.capB-capB0 || st.capRecords != m.capR-capR0 || st.corruptBatches != 0 {
		dumpModel(t, q, m)
		t.Fatalf("%s: drops cap %d/%d corrupt %d, model cap %d/%d", where, st.capBatches, st.capRecords,
			st.corruptBatches, m.capB-capB0, m.capR-capR0)
	}
	if st.bytes > m.maxBytes+frameHeaderSize+int64(maxModelPayload) {
		t.Fatalf("%s: %d bytes queued over the cap %d", where, st.bytes, m.maxBytes)
	}
}

// maxModelPayload bounds randomBatch's encoding (the entry in flight may
// sit above the cap).
const maxModelPayload = 4 << 10

func TestDiskQueueClosedOps(t *testing.T) {
	q, err := openDiskQueue(t.TempDir(), diskOptions{maxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	q.close()
	if err := q.push([]byte{1}, 1, 1); !errors.Is(err, errQueueClosed) {
		t.Fatalf("push after close: %v", err)
	}
	if _, ok, err := q.next(); ok || err != nil {
		t.Fatalf("next after close: %v %v", ok, err)
	}
	q.ack()
}

func dumpModel(t *testing.T, q *diskQueue, m *queueModel) {
	got, _ := q.snapshot()
	idx := map[string]int{}
	for i, e := range m.all {
		idx[string(e.payload)] = i
	}
	var gs []int
	for _, e := range got {
		i, ok := idx[string(e.payload)]
		if !ok {
			i = -1
		}
		gs = append(gs, i)
	}
	var ws []int
	for _, e := range m.unresolved() {
		ws = append(ws, idx[string(e.payload)])
	}
	t.Logf("queue %v\nmodel %v\ncursor %+v", gs, ws, q.committed)
	for _, s := range q.segs {
		t.Logf("seg %d frames %d read %d old %v", s.id, len(s.frames), s.read, s.old)
	}
}

// TestDiskAckSurvivesProcessCrash: a record the output took is not replayed
// after a process crash (files abandoned without a sync), even though no
// sync committed the cursor since.
func TestDiskAckSurvivesProcessCrash(t *testing.T) {
	dir := t.TempDir()
	opt := diskOptions{maxBytes: 1 << 20, segmentBytes: 64 << 10}
	q, err := openDiskQueue(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for seq := uint64(1); seq <= 4; seq++ {
		p := encode(testBatch(seq, int(seq)))
		if err := q.push(p, int(seq), int64(seq)); err != nil {
			t.Fatal(err)
		}
		if seq > 2 {
			want = append(want, p)
		}
	}
	if err := q.sync(); err != nil { // the appends are durable; the cursor says nothing is resolved
		t.Fatal(err)
	}
	for range 2 {
		if _, ok, err := q.next(); !ok || err != nil {
			t.Fatalf("next: %v %v", ok, err)
		}
		q.ack()
	}
	q.closeFiles() // a crash: no sync, no commit
	q, err = openDiskQueue(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	got, err := q.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var payloads [][]byte
	for _, e := range got {
		payloads = append(payloads, e.payload)
	}
	if !slices.EqualFunc(payloads, want, bytes.Equal) {
		t.Fatalf("after the crash the queue holds %d records, want exactly the 2 not taken (3 and 4), whole", len(payloads))
	}
}

// TestLastAppended: a reopened disk buffer names the Seq of the newest
// batch the earlier process appended, delivered since or not; a memory
// buffer, or an empty directory, names none.
func TestLastAppended(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{Kind: KindDisk, MaxBytes: 1 << 20, Dir: dir}
	open := func(out *fakeSink) *Buffer {
		b, err := New(out, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sink := &fakeSink{}
	b := open(sink)
	if seq, ok := b.LastAppended(); ok {
		t.Errorf("a new buffer names Seq %d", seq)
	}
	for _, seq := range []uint64{40, 41, 42} {
		if err := b.Write(context.Background(), testBatch(seq, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := sink.Accepted(t); !slices.Equal(got, []uint64{40, 41, 42}) {
		t.Fatalf("accepted %v", got)
	}
	b = open(&fakeSink{}) // everything was delivered; the newest is still named
	if seq, ok := b.LastAppended(); !ok || seq != 42 {
		t.Errorf("LastAppended = %d, %v; want 42, true", seq, ok)
	}
	b.Close()
	m, err := New(&fakeSink{}, Config{Kind: KindMemory, MaxBytes: 1 << 20, MaxRecords: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if seq, ok := m.LastAppended(); ok {
		t.Errorf("a memory buffer names Seq %d", seq)
	}
}

// TestHandOver: a memory buffer closed after HandOver passes its queue —
// the batch in flight first — to its successor, ahead of the successor's
// own batches, with the identities they refer to; nothing is dropped, and
// the successor delivers nothing before the handover.
func TestHandOver(t *testing.T) {
	cfg := Config{Kind: KindMemory, MaxBytes: 1 << 20, MaxRecords: 10000, RetryInitial: time.Millisecond,
		RetryMax: time.Millisecond, CloseTimeout: time.Minute}
	down := &fakeSink{script: func(int, *record.Batch) error { return fmt.Errorf("down: %w", record.ErrUnavailable) }}
	old, err := New(down, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sink := &fakeSink{}
	next, err := New(sink, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.HandOver(next); err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for seq := uint64(1); seq <= 3; seq++ {
		b := testBatch(seq*10, 4) // seq 10 carries the device identity
		want = append(want, encode(b))
		if err := old.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	// The successor's own batch, written before the handover: it waits.
	own := testBatch(41, 4)
	if err := next.Write(context.Background(), own); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if err := next.Close(); err != nil {
		t.Fatal(err)
	}
	// The first handed-over batch already names device 0; the successor's
	// own batch refers to devices 0 and 1, of which it knows 0 only, sent.
	want = append(want, encode(own))
	sink.mu.Lock()
	got := slices.Clone(sink.got)
	sink.mu.Unlock()
	if !slices.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("successor delivered seqs %v, want 10 20 30 41, whole", sink.Accepted(t))
	}
	st := old.Stats()
	if st.HandedOver != 3 || st.HandedOverRecords != 3*(4+2) || st.DroppedBatches.Total() != 0 || st.DroppedRecords.Total() != 0 {
		t.Errorf("old buffer stats %+v: want 3 batches (18 records: 4 samples, a device and an event each) handed over, none dropped", st)
	}
	if st := next.Stats(); st.DroppedBatches.Total() != 0 || st.Delivered != 4 {
		t.Errorf("successor stats %+v: want 4 delivered, none dropped", st)
	}
	if _, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 20, Dir: t.TempDir()}); err == nil {
		d, _ := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 20, Dir: t.TempDir()})
		defer d.Close()
		if err := d.HandOver(next); err == nil {
			t.Error("a disk buffer handed its queue over")
		}
	}
}
