package sampler

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpusampler/gpusampler/internal/cgocall"
)

// BenchmarkPublish: ring publish cost per sample with one reader attached,
// one sample at a time and in batches of 64 (what a drain publishes). The
// reader drains inline every 256 samples, so its copy is included: the
// figure is publish + read.
func BenchmarkPublish(b *testing.B) {
	for _, size := range []int{1, 64} {
		b.Run(map[int]string{1: "single", 64: "batch64"}[size], func(b *testing.B) {
			r := NewRing(1 << 12)
			c := r.NewCursor()
			batch := make([]Sample, size)
			for i := range batch {
				batch[i] = seqSample(uint64(i))
			}
			buf := make([]Sample, 1<<12)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				r.Publish(batch...)
				if (i+1)*size%256 == 0 {
					c.Read(buf)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/sample")
			if c.Dropped() != 0 {
				b.Fatalf("dropped %d", c.Dropped())
			}
		})
	}
}

// BenchmarkCgoEmptyCall is the baseline for BenchmarkPublish/batch64: one
// empty cgo call, the floor of any NVML call (goal: batched publish per
// sample ≤ 0.15× of it).
func BenchmarkCgoEmptyCall(b *testing.B) {
	if !cgocall.Available {
		b.Skip("built without cgo")
	}
	b.ReportAllocs()
	for range b.N {
		cgocall.Empty()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/call")
}

// BenchmarkFanout moves samples from one producer to 4 consumers: the ring
// with 64-sample batches against a buffered channel of single samples per
// consumer (goal: ring ≥ 10× faster per sample).
func BenchmarkFanout(b *testing.B) {
	const consumers = 4
	b.Run("ring64", func(b *testing.B) {
		total := b.N * 64
		r := NewRing(1 << 16)
		var wg sync.WaitGroup
		var produced atomic.Bool
		cursors := make([]*Cursor, consumers)
		for i := range cursors {
			cursors[i] = r.NewCursor()
		}
		b.ReportAllocs()
		b.ResetTimer()
		for _, c := range cursors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Like a pump: read in large batches, yield while little
				// is waiting.
				buf := make([]Sample, 4096)
				for c.ReadCount()+c.Dropped() < uint64(total) {
					if c.Lag() < 1024 && !produced.Load() {
						runtime.Gosched()
						continue
					}
					c.Read(buf)
				}
			}()
		}
		batch := make([]Sample, 64)
		for i := 0; i < b.N; i++ {
			for j := range batch {
				batch[j].TimeNS = int64(i*64 + j)
			}
			// stay within the lanes so consumers read everything (a fair race)
			for slices.ContainsFunc(cursors, func(c *Cursor) bool { return c.Lag() > 1<<15 }) {
				runtime.Gosched()
			}
			r.Publish(batch...)
		}
		produced.Store(true)
		wg.Wait()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/sample")
		var dropped uint64
		for _, c := range cursors {
			dropped += c.Dropped()
		}
		b.ReportMetric(float64(dropped), "dropped")
	})
	b.Run("chan1", func(b *testing.B) {
		total := b.N * 64
		chans := make([]chan Sample, consumers)
		var wg sync.WaitGroup
		for i := range chans {
			chans[i] = make(chan Sample, 1<<15)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for _, ch := range chans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range total {
					<-ch
				}
			}()
		}
		for i := range total {
			s := Sample{TimeNS: int64(i)}
			for _, ch := range chans {
				ch <- s
			}
		}
		wg.Wait()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/sample")
	})
}
