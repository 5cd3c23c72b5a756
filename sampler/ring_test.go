package sampler

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// ringUnderTest is what the conformance suite needs from a ring.
type ringUnderTest interface {
	Publish(...record.Sample)
	Cap() int
	newCursor() cursorUnderTest
}

type cursorUnderTest interface {
	Read(dst []record.Sample) int
	ReadCount() uint64
	Dropped() uint64
	Published() uint64
}

type lockFree struct{ *ring }

func (r lockFree) newCursor() cursorUnderTest { return r.NewCursor() }

// mutexRing is the simple reference: per-cursor bounded queues under one
// mutex, with the same drop-the-newest-when-full semantics.
type mutexRing struct {
	mu      sync.Mutex
	size    int
	cursors []*mutexCursor
}

func (r *mutexRing) Cap() int { return r.size }

func (r *mutexRing) Publish(s ...record.Sample) {
	r.mu.Lock()
	for _, c := range r.cursors {
		for _, x := range s {
			if len(c.queue) == r.size {
				c.dropped++
				continue
			}
			c.queue = append(c.queue, x)
		}
		c.published += uint64(len(s))
	}
	r.mu.Unlock()
}

type mutexCursor struct {
	r                        *mutexRing
	queue                    []record.Sample
	published, read, dropped uint64
}

func (r *mutexRing) newCursor() cursorUnderTest {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &mutexCursor{r: r}
	r.cursors = append(r.cursors, c)
	return c
}

func (c *mutexCursor) Read(dst []record.Sample) int {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	n := copy(dst, c.queue)
	c.queue = c.queue[n:]
	c.read += uint64(n)
	return n
}
func (c *mutexCursor) ReadCount() uint64 { c.r.mu.Lock(); defer c.r.mu.Unlock(); return c.read }
func (c *mutexCursor) Dropped() uint64   { c.r.mu.Lock(); defer c.r.mu.Unlock(); return c.dropped }
func (c *mutexCursor) Published() uint64 { c.r.mu.Lock(); defer c.r.mu.Unlock(); return c.published }

var ringImpls = []struct {
	name string
	make func(size int) ringUnderTest
}{
	{"lockfree", func(n int) ringUnderTest { return lockFree{newRing(n)} }},
	// lanes that start at 2 slots, so every case also runs while lanes grow
	{"lockfree-growing", func(n int) ringUnderTest { r := newRing(n); r.start = 2; return lockFree{r} }},
	{"mutex", func(n int) ringUnderTest { return &mutexRing{size: n} }},
}

func seqSample(i uint64) record.Sample {
	return record.Sample{TimeNS: int64(i), Value: float64(i), Device: uint16(i % 7), Metric: catalog.MetricID(i%40 + 1), Flags: record.Flags(i % 2)}
}

func checkSample(t *testing.T, s record.Sample) uint64 {
	t.Helper()
	i := uint64(s.TimeNS)
	if s != seqSample(i) {
		t.Fatalf("torn or corrupt sample %+v, want %+v", s, seqSample(i))
	}
	return i
}

func TestRingConformance(t *testing.T) {
	for _, impl := range ringImpls {
		t.Run(impl.name, func(t *testing.T) {
			t.Run("empty", func(t *testing.T) {
				r := impl.make(8)
				c := r.newCursor()
				if n := c.Read(make([]record.Sample, 4)); n != 0 {
					t.Fatalf("read %d from empty ring", n)
				}
			})
			t.Run("in order, batch reads", func(t *testing.T) {
				r := impl.make(64)
				c := r.newCursor()
				var next uint64
				buf := make([]record.Sample, 5)
				for round := 0; round < 50; round++ {
					batch := make([]record.Sample, round%9)
					for i := range batch {
						batch[i] = seqSample(next + uint64(i))
					}
					r.Publish(batch...)
					want := next
					next += uint64(len(batch))
					for {
						n := c.Read(buf)
						if n == 0 {
							break
						}
						for _, s := range buf[:n] {
							if got := checkSample(t, s); got != want {
								t.Fatalf("got sample %d, want %d", got, want)
							}
							want++
						}
					}
					if want != next {
						t.Fatalf("read up to %d, published %d", want, next)
					}
				}
				if c.Dropped() != 0 || c.ReadCount() != next || c.Published() != next {
					t.Fatalf("accounting: read=%d dropped=%d published=%d, want %d/0/%d", c.ReadCount(), c.Dropped(), c.Published(), next, next)
				}
			})
			t.Run("cursor starts at head", func(t *testing.T) {
				r := impl.make(8)
				r.Publish(seqSample(0), seqSample(1))
				c := r.newCursor()
				r.Publish(seqSample(2))
				buf := make([]record.Sample, 8)
				if n := c.Read(buf); n != 1 || buf[0] != seqSample(2) {
					t.Fatalf("read %d %+v, want just sample 2", n, buf[:n])
				}
			})
			t.Run("full cursor drops the newest, counted exactly", func(t *testing.T) {
				r := impl.make(16)
				c := r.newCursor()
				for i := uint64(0); i < 100; i++ {
					r.Publish(seqSample(i))
				}
				buf := make([]record.Sample, 100)
				n := c.Read(buf)
				if n != r.Cap() {
					t.Fatalf("read %d, want the lane's %d", n, r.Cap())
				}
				for i, s := range buf[:n] {
					if got := checkSample(t, s); got != uint64(i) {
						t.Fatalf("kept sample %d at %d, want the oldest in order", got, i)
					}
				}
				if c.Dropped() != 100-uint64(r.Cap()) || c.ReadCount()+c.Dropped() != 100 || c.Published() != 100 {
					t.Fatalf("accounting: read=%d dropped=%d published=%d", c.ReadCount(), c.Dropped(), c.Published())
				}
				// room again: new samples flow
				r.Publish(seqSample(100))
				if n := c.Read(buf); n != 1 || buf[0] != seqSample(100) {
					t.Fatalf("after catching up read %d %+v", n, buf[:n])
				}
			})
			t.Run("independent cursors", func(t *testing.T) {
				r := impl.make(32)
				fast, slow := r.newCursor(), r.newCursor()
				buf := make([]record.Sample, 64)
				for i := uint64(0); i < 200; i++ {
					r.Publish(seqSample(i))
					fast.Read(buf)
				}
				slow.Read(buf)
				if fast.Dropped() != 0 || fast.ReadCount() != 200 {
					t.Fatalf("fast cursor: read=%d dropped=%d", fast.ReadCount(), fast.Dropped())
				}
				if slow.Dropped() != 200-uint64(r.Cap()) || slow.ReadCount() != uint64(r.Cap()) {
					t.Fatalf("slow cursor: read=%d dropped=%d", slow.ReadCount(), slow.Dropped())
				}
			})
			t.Run("concurrent readers, some too slow", func(t *testing.T) {
				concurrentReaders(t, impl.make(64))
			})
		})
	}
}

// concurrentReaders publishes while several readers, some deliberately slow
// (their lanes fill up), read concurrently: every sample read is intact and
// in order, and for every reader read + dropped = published. Run under
// -race.
func concurrentReaders(t *testing.T, r ringUnderTest) {
	const total = 200_000
	const readers = 4
	cursors := make([]cursorUnderTest, readers)
	for i := range cursors {
		cursors[i] = r.newCursor()
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, readers)
	for i, c := range cursors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]record.Sample, 1+i*7)
			last := int64(-1)
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			drainOnce := func() bool {
				n := c.Read(buf)
				for _, s := range buf[:n] {
					if s != seqSample(uint64(s.TimeNS)) {
						errs <- fmt.Errorf("reader %d: torn sample %+v", i, s)
						return false
					}
					if s.TimeNS <= last {
						errs <- fmt.Errorf("reader %d: sample %d after %d", i, s.TimeNS, last)
						return false
					}
					last = s.TimeNS
				}
				return n > 0
			}
			for {
				select {
				case <-done:
					for drainOnce() {
					}
					return
				default:
				}
				drainOnce()
				if i%2 == 1 && rng.IntN(4) == 0 {
					for range rng.IntN(2000) { // a slow reader's lane fills up
					}
				}
			}
		}()
	}
	batch := make([]record.Sample, 16)
	for i := uint64(0); i < total; i += uint64(len(batch)) {
		for j := range batch {
			batch[j] = seqSample(i + uint64(j))
		}
		r.Publish(batch...)
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, c := range cursors {
		if c.Published() != total || c.ReadCount()+c.Dropped() != total {
			t.Fatalf("reader %d: read=%d dropped=%d published=%d, want read+dropped=%d", i, c.ReadCount(), c.Dropped(), c.Published(), total)
		}
	}
}

func TestRingSizeRoundsUp(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{0, 2}, {1, 2}, {2, 2}, {3, 4}, {1000, 1024}, {1024, 1024}} {
		if got := newRing(tc.in).Cap(); got != tc.want {
			t.Errorf("newRing(%d).Cap() = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestRingNoAllocs(t *testing.T) {
	r := newRing(1024)
	c := r.NewCursor()
	batch := make([]record.Sample, 64)
	buf := make([]record.Sample, 64)
	allocs := testing.AllocsPerRun(100, func() {
		r.Publish(batch...)
		c.Read(buf)
	})
	if allocs != 0 {
		t.Fatalf("publish+read allocated %.1f times per run", allocs)
	}
}

// Room is the free space of the fullest lane; a lane that holds unread
// samples and has read none for stuckAfter is not waited for.
func TestRingRoom(t *testing.T) {
	r := newRing(8)
	t0 := time.Unix(100, 0)
	if got := r.Room(t0, time.Second); got != 8 {
		t.Fatalf("room without readers %d, want 8", got)
	}
	fast, slow := r.NewCursor(), r.NewCursor()
	r.Publish(make([]record.Sample, 5)...)
	if got := r.Room(t0, time.Second); got != 3 {
		t.Fatalf("room %d, want 3", got)
	}
	buf := make([]record.Sample, 8)
	fast.Read(buf)
	if got := r.Room(t0.Add(500*time.Millisecond), time.Second); got != 3 {
		t.Fatalf("room %d with the slow lane still full of 5, want 3", got)
	}
	slow.Read(buf[:2]) // progress: the slow lane is waited for
	if got := r.Room(t0.Add(1500*time.Millisecond), time.Second); got != 5 {
		t.Fatalf("room %d after the slow lane read 2, want 5", got)
	}
	// No read for a second from then on: stuck, not waited for.
	if got := r.Room(t0.Add(2500*time.Millisecond), time.Second); got != 8 {
		t.Fatalf("room %d with the slow lane stuck, want the fast lane's 8", got)
	}
	slow.Read(buf)
	if got := r.Room(t0.Add(3*time.Second), time.Second); got != 8 {
		t.Fatalf("room %d once both lanes are read, want 8", got)
	}
}
