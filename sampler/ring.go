package sampler

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
)

// Ring is a bounded single-producer, multi-consumer ring of Samples.
//
// The producer (one device loop) never blocks and never waits for readers:
// when a reader falls more than the ring's capacity behind, the oldest
// samples are overwritten and that reader's Cursor counts exactly how many it
// lost, so that for every cursor read + dropped = published.
//
// Why atomic slot words rather than per-output rings dropping the newest:
// one copy of each sample serves every output (fan-out costs one cursor per
// output, not one copy), and when an output lags it is the oldest data that
// goes, which is what a telemetry reader wants. Each slot is a small seqlock
// whose words are all accessed with sync/atomic: the producer marks the slot
// busy (seq = 0), stores the payload, then publishes seq = position+1; a
// reader loads seq, the payload, then seq again and keeps the sample only if
// both loads saw position+1. Go's atomics are sequentially consistent, so a
// reader that sees the same seq twice has read the payload of that position,
// and the race detector sees no data race even while a cursor is being
// lapped. Torn reads are counted as dropped, never returned.
//
// Concurrency: Publish must be called from one goroutine at a time (the
// owner). Cursors may be created and read from any goroutine; each Cursor is
// used by one goroutine at a time.
type Ring struct {
	slots []slot
	mask  uint64
	_     [48]byte
	head  atomic.Uint64 // number of samples ever published
	_     [56]byte
}

type slot struct {
	seq  atomic.Uint64 // position+1 once complete; 0 while being written
	time atomic.Int64
	val  atomic.Uint64
	meta atomic.Uint64 // device | metric<<16 | flags<<32
}

// NewRing returns a ring holding the most recent size samples; size is
// rounded up to a power of two (minimum 2).
func NewRing(size int) *Ring {
	if size < 2 {
		size = 2
	}
	n := uint64(1) << (64 - bits.LeadingZeros64(uint64(size-1)))
	return &Ring{slots: make([]slot, n), mask: n - 1}
}

// Cap returns how many samples the ring holds.
func (r *Ring) Cap() int { return len(r.slots) }

// Published returns how many samples were ever published.
func (r *Ring) Published() uint64 { return r.head.Load() }

// Publish appends samples to the ring without blocking or allocating. Only
// the ring's owner may call it.
func (r *Ring) Publish(samples ...Sample) {
	h := r.head.Load()
	for i := range samples {
		s := &samples[i]
		p := h + uint64(i)
		sl := &r.slots[p&r.mask]
		sl.seq.Store(0)
		sl.time.Store(s.TimeNS)
		sl.val.Store(math.Float64bits(s.Value))
		sl.meta.Store(uint64(s.Device) | uint64(s.Metric)<<16 | uint64(s.Flags)<<32)
		sl.seq.Store(p + 1)
	}
	r.head.Store(h + uint64(len(samples)))
}

// NewCursor returns a cursor positioned at the ring's current head: it sees
// what is published from now on.
func (r *Ring) NewCursor() *Cursor {
	h := r.head.Load()
	return &Cursor{r: r, pos: h, start: h}
}

// Cursor is one reader's position in a Ring, with its exact accounting.
type Cursor struct {
	r       *Ring
	pos     uint64
	start   uint64
	read    uint64
	dropped uint64
}

// Read copies the next samples into dst and returns how many it copied. It
// never blocks and never allocates. Samples the producer overwrote before
// this cursor read them are skipped and counted in Dropped.
func (c *Cursor) Read(dst []Sample) int {
	r := c.r
	h := r.head.Load()
	size := uint64(len(r.slots))
	if h-c.pos > size {
		c.dropped += h - size - c.pos
		c.pos = h - size
	}
	n := 0
	for c.pos < h && n < len(dst) {
		sl := &r.slots[c.pos&r.mask]
		want := c.pos + 1
		if sl.seq.Load() != want {
			c.dropped++ // overwritten by a later lap
			c.pos++
			continue
		}
		t := sl.time.Load()
		v := sl.val.Load()
		m := sl.meta.Load()
		if sl.seq.Load() != want {
			c.dropped++ // overwritten while we read it
			c.pos++
			continue
		}
		dst[n] = Sample{TimeNS: t, Value: math.Float64frombits(v),
			Device: uint16(m), Metric: MetricID(m >> 16), Flags: Flags(m >> 32)}
		n++
		c.pos++
	}
	c.read += uint64(n)
	return n
}

// Lag returns how many published samples this cursor has not read yet
// (possibly more than the ring holds, if it is being lapped).
func (c *Cursor) Lag() uint64 { return c.r.head.Load() - c.pos }

// ReadCount returns how many samples this cursor returned.
func (c *Cursor) ReadCount() uint64 { return c.read }

// Dropped returns how many samples this cursor lost to overwriting.
func (c *Cursor) Dropped() uint64 { return c.dropped }

// Published returns how many samples were published since the cursor was
// created, up to the position it has reached or skipped to. When the cursor
// is caught up, Published() == ReadCount() + Dropped().
func (c *Cursor) Published() uint64 { return c.pos - c.start }

// String describes the cursor's accounting.
func (c *Cursor) String() string {
	return fmt.Sprintf("read=%d dropped=%d lag=%d", c.read, c.dropped, c.Lag())
}
