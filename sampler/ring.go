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
// Concurrency: Publish must be called from one goroutine at a time (the
// owner). NewCursor and Detach may be called from any goroutine. Each
// cursor's Read is called from one goroutine at a time; its counters may be
// read from any goroutine.
type ring struct {
	size      int
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
	r := &ring{size: n}
	r.lanes.Store(&[]*cursor{})
	return r
}

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
	c := &cursor{buf: make([]record.Sample, r.size), mask: uint64(r.size - 1)}
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
	c := &cursor{buf: make([]record.Sample, r.size), mask: uint64(r.size - 1)}
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

// Detach stops publishing to c. Its counters stay readable.
func (r *ring) Detach(c *cursor) {
	r.mu.Lock()
	lanes := slices.DeleteFunc(slices.Clone(*r.lanes.Load()), func(x *cursor) bool { return x == c })
	r.lanes.Store(&lanes)
	r.mu.Unlock()
}

// cursor is one reader's lane in a ring, with its exact accounting.
type cursor struct {
	buf  []record.Sample
	mask uint64
	_    [40]byte
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

// push is the producer side: copy what fits, drop and count the rest.
func (c *cursor) push(s []record.Sample) {
	h := c.head.Load() // only the producer writes head
	free := uint64(len(c.buf)) - (h - c.tail.Load())
	n := uint64(len(s))
	if n > free {
		c.dropped.Add(n - free)
		s = s[:free]
		n = free
	}
	if n == 0 {
		return
	}
	i := h & c.mask
	k := copy(c.buf[i:], s)
	copy(c.buf, s[k:])
	c.head.Store(h + n)
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
	i := t & c.mask
	k := copy(dst[:n], c.buf[i:])
	copy(dst[k:n], c.buf)
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
