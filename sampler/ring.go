package sampler

import (
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// ring is one producer's bounded fan-out of Samples: a single-producer,
// multi-consumer ring built as one single-producer/single-consumer lane per
// reader (per output's pump).
//
// The producer (one device loop) never blocks and never waits for readers.
// When a reader's lane is full the producer drops the newest samples for
// that reader only and counts them, so for every cursor, exactly,
// read + dropped = published.
//
// Why per-reader lanes that drop the newest, rather than one shared ring
// with atomic slot words that overwrites the oldest: to stay clean under the
// race detector while a reader is being lapped, a shared ring must write
// every payload word with an atomic store, and on amd64 each atomic store is
// a full barrier (XCHG): ~60 ns per 32-byte sample measured, more than half
// an empty cgo call. In a lane the payload is plain memory ordered by one
// atomic head store per batch (producer) and one atomic tail store per read
// (consumer), so publishing costs a copy per reader (~1–2 ns a sample) and
// the code is data-race free by construction. The price: a reader that
// falls behind by a whole lane misses the newest samples instead of the
// oldest, and each reader holds its own copy (32 bytes × lane size). A lane
// covers tens of seconds at default rates; an output that is down for longer
// needs the per-output buffer, not a bigger ring.
//
// A lane starts small (laneStart samples) and the producer doubles it when a
// publish would not fit, up to the ring's size: a healthy reader keeps a
// few hundred samples in flight, so most lanes never need the whole size
// and the process does not hold size × 32 bytes per reader per device for
// nothing (8 GPUs × 4 outputs × 8192 samples were 6 MiB). Growing copies the
// unread samples into the new buffer and publishes it with one atomic store
// before any sample is written there; a reader loads the buffer after the
// head, so it always sees one holding every sample up to that head, and an
// old buffer is never written again. Lanes never shrink.
//
// Concurrency: Publish must be called from one goroutine at a time (the
// owner). NewCursor and Detach may be called from any goroutine. Each
// cursor's Read is called from one goroutine at a time; its counters may be
// read from any goroutine.
type ring struct {
	size      int
	start     int // a new lane's length (≤ size)
	lanes     atomic.Pointer[[]*cursor]
	published atomic.Uint64
	mu        sync.Mutex // serializes lane attach/detach
}

// newRing returns a ring whose lanes each hold size samples (rounded up to a
// power of two, minimum 2).
func newRing(size int) *ring {
	if size < 2 {
		size = 2
	}
	n := 1 << (64 - bits.LeadingZeros64(uint64(size-1)))
	r := &ring{size: n, start: min(n, laneStart)}
	r.lanes.Store(&[]*cursor{})
	return r
}

// laneStart is a new lane's length in samples (a power of two).
const laneStart = 256

// Cap returns how many unread samples one reader's lane holds.
func (r *ring) Cap() int { return r.size }

// Room returns how many samples the owner can publish now without a
// reader's lane dropping one: the free space of the fullest lane (Cap when
// no reader is attached). A lane that holds unread samples and has read
// none for stuckAfter (its output is stuck, not slow) is not waited for.
// now is the owner's clock. Only the ring's owner may call it.
func (r *ring) Room(now time.Time, stuckAfter time.Duration) int {
	room := uint64(r.size)
	for _, c := range *r.lanes.Load() {
		t := c.tail.Load()
		lag := c.head.Load() - t
		if lag == 0 || t != c.seenTail || c.seenAt.IsZero() {
			c.seenTail, c.seenAt = t, now
		}
		if lag > 0 && now.Sub(c.seenAt) >= stuckAfter {
			continue
		}
		room = min(room, uint64(r.size)-lag)
	}
	return int(room)
}

// Published returns how many samples were ever published.
func (r *ring) Published() uint64 { return r.published.Load() }

// Publish offers samples to every attached reader without blocking or
// allocating. Only the ring's owner may call it.
func (r *ring) Publish(samples ...record.Sample) {
	for _, c := range *r.lanes.Load() {
		c.push(samples)
	}
	r.published.Add(uint64(len(samples)))
}

// NewCursor attaches a reader; it sees what is published from now on.
func (r *ring) NewCursor() *cursor {
	c := r.newLane()
	r.mu.Lock()
	lanes := append(slices.Clone(*r.lanes.Load()), c)
	r.lanes.Store(&lanes)
	r.mu.Unlock()
	return c
}

// Swap attaches a new reader in old's place in one step: every sample
// published goes either to old (before) or to the new cursor (after), never
// to both or neither. old keeps what it holds and its counters.
func (r *ring) Swap(old *cursor) *cursor {
	c := r.newLane()
	r.mu.Lock()
	lanes := slices.Clone(*r.lanes.Load())
	if i := slices.Index(lanes, old); i >= 0 {
		lanes[i] = c
	} else {
		lanes = append(lanes, c)
	}
	r.lanes.Store(&lanes)
	r.mu.Unlock()
	return c
}

// newLane returns an unattached cursor with a laneStart-sized buffer.
func (r *ring) newLane() *cursor {
	c := &cursor{max: uint64(r.size)}
	c.buf.Store(newLaneBuf(r.start))
	return c
}

// Detach stops publishing to c. Its counters stay readable.
func (r *ring) Detach(c *cursor) {
	r.mu.Lock()
	lanes := slices.DeleteFunc(slices.Clone(*r.lanes.Load()), func(x *cursor) bool { return x == c })
	r.lanes.Store(&lanes)
	r.mu.Unlock()
}

// cursor is one reader's lane in a ring, with its exact accounting.
type cursor struct {
	buf  atomic.Pointer[laneBuf] // replaced (grown) by the producer only
	max  uint64                  // the longest buf may grow (the ring's size)
	_    [48]byte
	head atomic.Uint64 // samples written into the lane (producer)
	_    [56]byte
	tail atomic.Uint64 // samples read from the lane (consumer)
	_    [56]byte
	// dropped is written by the producer only.
	dropped atomic.Uint64
	// acked is how far (in tail positions) the reader's output has taken
	// what it read, ackedAt when it last said so (engine clock, Unix ns),
	// stuckAfter how long without that, samples waiting, the reader counts
	// as stuck (see ack.go). Written by the reader.
	acked               atomic.Uint64
	ackedAt, stuckAfter atomic.Int64
	// seenTail and seenAt are the producer's own record of when the
	// reader last made progress (Room).
	seenTail uint64
	seenAt   time.Time
}

// laneBuf is a lane's storage: a power-of-two number of slots, sample
// number p in slot p&mask.
type laneBuf struct {
	s    []record.Sample
	mask uint64
}

func newLaneBuf(n int) *laneBuf {
	return &laneBuf{s: make([]record.Sample, n), mask: uint64(n - 1)}
}

// push is the producer side: copy what fits, drop and count the rest.
func (c *cursor) push(s []record.Sample) {
	h := c.head.Load() // only the producer writes head
	n := uint64(len(s))
	b := c.buf.Load()
	if lag := h - c.tail.Load(); lag+n > uint64(len(b.s)) && uint64(len(b.s)) < c.max {
		b = c.grow(b, h, lag+n)
	}
	free := uint64(len(b.s)) - (h - c.tail.Load())
	if n > free {
		c.dropped.Add(n - free)
		s = s[:free]
		n = free
	}
	if n == 0 {
		return
	}
	i := h & b.mask
	k := copy(b.s[i:], s)
	copy(b.s, s[k:])
	c.head.Store(h + n)
}

// grow replaces the lane's buffer b by one of at least need slots (a power
// of two, at most max) holding the unread samples up to head h, and returns
// it. Producer only. The samples the reader has not taken yet are copied
// from the old buffer, which the producer never writes again; the reader
// may still be reading them there, which is two reads of the same memory.
func (c *cursor) grow(b *laneBuf, h, need uint64) *laneBuf {
	n := uint64(len(b.s))
	for n < need && n < c.max {
		n *= 2
	}
	nb := newLaneBuf(int(n))
	for p := c.tail.Load(); p < h; p++ {
		nb.s[p&nb.mask] = b.s[p&b.mask]
	}
	c.buf.Store(nb)
	return nb
}

// Read copies the next samples into dst and returns how many it copied. It
// never blocks and never allocates.
func (c *cursor) Read(dst []record.Sample) int {
	t := c.tail.Load() // only the consumer writes tail
	avail := c.head.Load() - t
	n := min(uint64(len(dst)), avail)
	if n == 0 {
		return 0
	}
	b := c.buf.Load() // after head: a buffer holding every sample up to it
	i := t & b.mask
	k := copy(dst[:n], b.s[i:])
	copy(dst[k:n], b.s)
	c.tail.Store(t + n)
	return int(n)
}

// Lag returns how many samples wait in the lane unread.
func (c *cursor) Lag() uint64 { return c.head.Load() - c.tail.Load() }

// ReadCount returns how many samples this cursor returned.
func (c *cursor) ReadCount() uint64 { return c.tail.Load() }

// Dropped returns how many samples were dropped because the lane was full.
func (c *cursor) Dropped() uint64 { return c.dropped.Load() }

// Published returns how many samples were offered to this cursor since it
// was attached. When the cursor is caught up (Lag() == 0),
// Published() == ReadCount() + Dropped().
func (c *cursor) Published() uint64 { return c.head.Load() + c.dropped.Load() }

// String describes the cursor's accounting.
func (c *cursor) String() string {
	return fmt.Sprintf("read=%d dropped=%d lag=%d", c.ReadCount(), c.Dropped(), c.Lag())
}
