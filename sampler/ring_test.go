package sampler

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// ringUnderTest is what the conformance suite needs from a ring.
type ringUnderTest interface {
	Publish(...Sample)
	Cap() int
	newCursor() cursorUnderTest
}

type cursorUnderTest interface {
	Read(dst []Sample) int
	ReadCount() uint64
	Dropped() uint64
	Published() uint64
}

type lockFree struct{ *Ring }

func (r lockFree) newCursor() cursorUnderTest { return r.NewCursor() }

// mutexRing is the simple reference: a slice of slots under a mutex, with
// the same overwrite-oldest semantics.
type mutexRing struct {
	mu    sync.Mutex
	slots []Sample
	head  uint64
}

func (r *mutexRing) Cap() int { return len(r.slots) }

func (r *mutexRing) Publish(s ...Sample) {
	r.mu.Lock()
	for _, x := range s {
		r.slots[r.head%uint64(len(r.slots))] = x
		r.head++
	}
	r.mu.Unlock()
}

type mutexCursor struct {
	r                         *mutexRing
	pos, start, read, dropped uint64
}

func (r *mutexRing) newCursor() cursorUnderTest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &mutexCursor{r: r, pos: r.head, start: r.head}
}

func (c *mutexCursor) Read(dst []Sample) int {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	size := uint64(len(c.r.slots))
	if c.r.head-c.pos > size {
		c.dropped += c.r.head - size - c.pos
		c.pos = c.r.head - size
	}
	n := 0
	for c.pos < c.r.head && n < len(dst) {
		dst[n] = c.r.slots[c.pos%size]
		n++
		c.pos++
	}
	c.read += uint64(n)
	return n
}
func (c *mutexCursor) ReadCount() uint64 { return c.read }
func (c *mutexCursor) Dropped() uint64   { return c.dropped }
func (c *mutexCursor) Published() uint64 { return c.pos - c.start }

var ringImpls = []struct {
	name string
	make func(size int) ringUnderTest
}{
	{"lockfree", func(n int) ringUnderTest { return lockFree{NewRing(n)} }},
	{"mutex", func(n int) ringUnderTest { return &mutexRing{slots: make([]Sample, n)} }},
}

func seqSample(i uint64) Sample {
	return Sample{TimeNS: int64(i), Value: float64(i), Device: uint16(i % 7), Metric: MetricID(i%40 + 1), Flags: Flags(i % 2)}
}

func checkSample(t *testing.T, s Sample) uint64 {
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
				if n := c.Read(make([]Sample, 4)); n != 0 {
					t.Fatalf("read %d from empty ring", n)
				}
			})
			t.Run("in order, batch reads", func(t *testing.T) {
				r := impl.make(64)
				c := r.newCursor()
				var next uint64
				buf := make([]Sample, 5)
				for round := 0; round < 50; round++ {
					batch := make([]Sample, round%9)
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
				buf := make([]Sample, 8)
				if n := c.Read(buf); n != 1 || buf[0] != seqSample(2) {
					t.Fatalf("read %d %+v, want just sample 2", n, buf[:n])
				}
			})
			t.Run("lapped cursor counts exactly", func(t *testing.T) {
				r := impl.make(16)
				c := r.newCursor()
				for i := uint64(0); i < 100; i++ {
					r.Publish(seqSample(i))
				}
				buf := make([]Sample, 100)
				n := c.Read(buf)
				if n != r.Cap() {
					t.Fatalf("read %d, want the ring's %d newest", n, r.Cap())
				}
				if first := checkSample(t, buf[0]); first != 100-uint64(r.Cap()) {
					t.Fatalf("oldest kept is %d, want %d", first, 100-r.Cap())
				}
				if c.Dropped() != 100-uint64(r.Cap()) || c.ReadCount()+c.Dropped() != 100 || c.Published() != 100 {
					t.Fatalf("accounting: read=%d dropped=%d published=%d", c.ReadCount(), c.Dropped(), c.Published())
				}
			})
			t.Run("independent cursors", func(t *testing.T) {
				r := impl.make(32)
				fast, slow := r.newCursor(), r.newCursor()
				buf := make([]Sample, 64)
				for i := uint64(0); i < 200; i++ {
					r.Publish(seqSample(i))
					fast.Read(buf)
				}
				slow.Read(buf)
				if fast.Dropped() != 0 || fast.ReadCount() != 200 {
					t.Fatalf("fast cursor: read=%d dropped=%d", fast.ReadCount(), fast.Dropped())
				}
				if slow.Dropped() != 200-32 || slow.ReadCount() != 32 {
					t.Fatalf("slow cursor: read=%d dropped=%d", slow.ReadCount(), slow.Dropped())
				}
			})
			t.Run("concurrent lapping readers", func(t *testing.T) {
				concurrentLapping(t, impl.make(64))
			})
		})
	}
}

// concurrentLapping publishes while several readers, some deliberately slow,
// read concurrently: every sample read is intact and in order, and for every
// reader read + dropped = published. Run under -race.
func concurrentLapping(t *testing.T, r ringUnderTest) {
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
			buf := make([]Sample, 1+i*7)
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
					for range rng.IntN(2000) { // a slow reader gets lapped
					}
				}
			}
		}()
	}
	batch := make([]Sample, 16)
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
		if got := NewRing(tc.in).Cap(); got != tc.want {
			t.Errorf("NewRing(%d).Cap() = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestRingNoAllocs(t *testing.T) {
	r := NewRing(1024)
	c := r.NewCursor()
	batch := make([]Sample, 64)
	buf := make([]Sample, 64)
	allocs := testing.AllocsPerRun(100, func() {
		r.Publish(batch...)
		c.Read(buf)
	})
	if allocs != 0 {
		t.Fatalf("publish+read allocated %.1f times per run", allocs)
	}
}
