package buffer

import "sync"

// queue is the storage behind a Buffer: a FIFO of encoded batches with at
// most one entry in flight (taken by next, not yet resolved by ack).
//
// Every method is safe for concurrent use; in practice the pump's goroutine
// calls push and the delivery goroutine calls next and ack.
type queue interface {
	// push appends one encoded batch holding records records, dropping the
	// oldest queued entries (never the one in flight) to stay within the
	// caps. push does not retain payload.
	push(payload []byte, records int, nowNS int64) error
	// next takes the oldest queued entry into flight and returns it; ok is
	// false when nothing is queued. The entry's payload is valid until the
	// next call of next. At most one entry is in flight: call ack first.
	next() (e entry, ok bool, err error)
	// ack resolves the entry in flight (delivered, or dropped by the
	// caller): it will not be handed out again, not even after a restart
	// once the resolution is committed.
	ack()
	// stats returns the queue's counters.
	stats() queueStats
	// sync makes what was pushed and acknowledged so far durable (disk).
	sync() error
	// close syncs and releases the queue; what remains queued stays there
	// (disk) or is discarded (memory: the caller counts it).
	close() error
	// setHeader sets the header (an encoded records.BufferSegment) that
	// entries pushed from now on are read back with; the queue keeps
	// header, which the caller must not modify afterwards. Disk segments
	// store it once; memory has no use for it.
	setHeader(header []byte)
	// snapshot returns every unresolved entry, in flight first, without
	// taking anything (tests).
	snapshot() ([]entry, error)
}

// entry is one queued batch.
type entry struct {
	payload []byte
	records int
	// timeNS is when the batch was appended (Unix ns).
	timeNS int64
	// replayed is true for entries found on disk at start (written by an
	// earlier process).
	replayed bool
	// segment and header: the disk segment holding the entry and that
	// segment's header (nil in memory). Shared, read-only.
	segment uint64
	header  []byte
}

// queueStats are a queue's gauges and counters. Gauges include the entry
// in flight.
type queueStats struct {
	batches, records, bytes int64
	oldestNS                int64 // 0 when empty
	appended                uint64
	capBatches, capRecords  uint64
	corruptBatches          uint64
	corruptRecords          uint64 // known only where a header survived
	corruptBytes            uint64
	// Disk only: degraded is set while writes to disk fail and new
	// batches are held in memory (heldNow*, included in the gauges);
	// diskErrors counts failed writes, degradedEpisodes the times it
	// degraded, heldBatches the batches held in memory since the start.
	// shutdown* count held batches the disk still refused at close (lost).
	// diskBytes is what the queue's files use, as its budget counts it.
	degraded                         bool
	heldNowBatches, heldNowRecords   int64
	diskErrors, degradedEpisodes     uint64
	heldBatches                      uint64
	shutdownBatches, shutdownRecords uint64
	diskBytes                        int64
}

// memQueue is the "memory" kind: a deque of copied payloads bounded by
// bytes (payload bytes) and records.
type memQueue struct {
	maxBytes   int64
	maxRecords int

	mu       sync.Mutex
	items    []entry // items[head:] are queued
	head     int
	inflight *entry
	cur      entry // the entry in flight
	free     [][]byte
	qBytes   int64 // queued, not in flight
	qRecords int64
	st       queueStats
}

func newMemQueue(maxBytes int64, maxRecords int) *memQueue {
	return &memQueue{maxBytes: maxBytes, maxRecords: maxRecords}
}

func (q *memQueue) push(payload []byte, records int, nowNS int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	size := int64(len(payload))
	if size > q.maxBytes || records > q.maxRecords {
		return tooLarge(size, records)
	}
	for q.head < len(q.items) && (q.qBytes+size > q.maxBytes || q.qRecords+int64(records) > int64(q.maxRecords)) {
		q.recycle(q.evictOldest().payload)
	}
	if q.head > 64 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
		q.head = 0
	}
	var p []byte
	if n := len(q.free); n > 0 && cap(q.free[n-1]) >= len(payload) {
		p = q.free[n-1][:len(payload)]
		q.free = q.free[:n-1]
	} else {
		p = make([]byte, len(payload))
	}
	copy(p, payload)
	q.items = append(q.items, entry{payload: p, records: records, timeNS: nowNS})
	q.qBytes += size
	q.qRecords += int64(records)
	q.st.appended++
	return nil
}

func (q *memQueue) recycle(p []byte) {
	if len(q.free) < 4 {
		q.free = append(q.free, p[:0])
	}
}

func (q *memQueue) next() (entry, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inflight != nil {
		return *q.inflight, true, nil
	}
	if q.head == len(q.items) {
		return entry{}, false, nil
	}
	q.cur = q.items[q.head]
	q.items[q.head] = entry{}
	q.head++
	q.qBytes -= int64(len(q.cur.payload))
	q.qRecords -= int64(q.cur.records)
	q.inflight = &q.cur
	return q.cur, true, nil
}

func (q *memQueue) ack() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inflight == nil {
		return
	}
	q.recycle(q.cur.payload)
	q.cur = entry{}
	q.inflight = nil
}

func (q *memQueue) stats() queueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.st
	st.batches = int64(len(q.items) - q.head)
	st.bytes, st.records = q.qBytes, q.qRecords
	if q.head < len(q.items) {
		st.oldestNS = q.items[q.head].timeNS
	}
	if q.inflight != nil {
		st.batches++
		st.bytes += int64(len(q.cur.payload))
		st.records += int64(q.cur.records)
		st.oldestNS = q.cur.timeNS
	}
	return st
}

func (q *memQueue) sync() error { return nil }

func (q *memQueue) setHeader([]byte) {}

// close discards what is queued (the Buffer has counted it as dropped).
func (q *memQueue) close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items, q.head, q.free = nil, 0, nil
	q.qBytes, q.qRecords = 0, 0
	q.inflight, q.cur = nil, entry{}
	return nil
}

func (q *memQueue) snapshot() ([]entry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []entry
	if q.inflight != nil {
		out = append(out, q.cur)
	}
	return append(out, q.items[q.head:]...), nil
}

// take removes and returns every unresolved entry, the one in flight
// first, leaving the queue empty (a handover to another buffer).
func (q *memQueue) take() []entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []entry
	if q.inflight != nil {
		out = append(out, q.cur)
	}
	out = append(out, q.items[q.head:]...)
	q.items, q.head = nil, 0
	q.qBytes, q.qRecords = 0, 0
	q.inflight, q.cur = nil, entry{}
	return out
}

// prepend queues es (oldest first) before everything queued, then drops
// the oldest queued entries beyond the caps, as push does (counted). Call
// it while nothing is in flight.
func (q *memQueue) prepend(es []entry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := make([]entry, 0, len(es)+len(q.items)-q.head)
	items = append(append(items, es...), q.items[q.head:]...)
	q.items, q.head = items, 0
	for _, e := range es {
		q.qBytes += int64(len(e.payload))
		q.qRecords += int64(e.records)
	}
	for q.head < len(q.items) && (q.qBytes > q.maxBytes || q.qRecords > int64(q.maxRecords)) {
		q.evictOldest()
	}
}

// evictOldest drops the oldest queued entry to make room under the caps,
// counts it (capBatches, capRecords) and returns it. The caller holds mu
// and has checked that an entry is queued.
func (q *memQueue) evictOldest() entry {
	old := q.items[q.head]
	q.items[q.head] = entry{}
	q.head++
	q.qBytes -= int64(len(old.payload))
	q.qRecords -= int64(old.records)
	q.st.capBatches++
	q.st.capRecords += uint64(old.records)
	return old
}
