package buffer

import (
	"context"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// benchSamples is the samples per batch in the benchmarks: a pump batch of
// 8 GPUs × ~12 metrics at 10 Hz over 100 ms.
const benchSamples = 100

type discardOutput struct{}

func (discardOutput) Write(context.Context, *record.Batch) error { return nil }
func (discardOutput) Close() error                               { return nil }

func benchQueue(b *testing.B, kind string) queue {
	switch kind {
	case KindMemory:
		return newMemQueue(1<<40, 1<<40)
	default:
		q, err := openDiskQueue(b.TempDir(), diskOptions{maxBytes: 1 << 40})
		if err != nil {
			b.Fatal(err)
		}
		return q
	}
}

func reportRates(b *testing.B, payload []byte, records int) {
	b.SetBytes(int64(len(payload)))
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N*records)/s, "records/s")
	b.ReportMetric(float64(b.N)/s, "batches/s")
}

// BenchmarkQueueAppend: encode and append one batch (disk: one write
// syscall, no fsync; fsync runs on the interval).
func BenchmarkQueueAppend(b *testing.B) {
	tb := testBatch(1, benchSamples)
	for _, kind := range []string{KindMemory, KindDisk} {
		b.Run(kind, func(b *testing.B) {
			q := benchQueue(b, kind)
			defer q.close()
			var enc []byte
			b.ReportAllocs()
			for b.Loop() {
				enc = appendBatch(enc[:0], tb)
				if err := q.push(enc, tb.Len(), 1); err != nil {
					b.Fatal(err)
				}
			}
			reportRates(b, enc, tb.Len())
		})
	}
}

// BenchmarkDiskReplay: reopen a queue that an earlier process left full
// (scan and verify every record) and deliver it all: read, check, decode,
// acknowledge.
func BenchmarkDiskReplay(b *testing.B) {
	tb := testBatch(1, benchSamples)
	enc := appendBatch(nil, tb)
	dir := b.TempDir()
	q, err := openDiskQueue(dir, diskOptions{maxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		if err := q.push(enc, tb.Len(), 1); err != nil {
			b.Fatal(err)
		}
	}
	if err := q.close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	q, err = openDiskQueue(dir, diskOptions{maxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	var batch record.Batch
	n := 0
	for {
		e, ok, err := q.next()
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			break
		}
		if err := decodeBatch(&batch, e.payload); err != nil {
			b.Fatal(err)
		}
		q.ack()
		n++
	}
	b.StopTimer()
	q.close()
	if n != b.N {
		b.Fatalf("replayed %d of %d", n, b.N)
	}
	reportRates(b, enc, tb.Len())
}

// BenchmarkBuffer is the cost per batch through a whole Buffer — Write
// (copy, encode, queue), delivery goroutine (read, decode, Write to a
// discarding output, acknowledge) — for each kind in the same run; the
// disk/memory ratio of their ns/op is the disk queue's relative cost.
// disk-no-ack-commit is the disk queue without the cursor write at each
// acknowledgement (what a process crash would replay): the disk/
// disk-no-ack-commit ratio is that write's cost.
func BenchmarkBuffer(b *testing.B) {
	tb := testBatch(1, benchSamples)
	payload := appendBatch(nil, tb)
	for _, name := range []string{KindMemory, KindDisk, "disk-no-ack-commit"} {
		b.Run(name, func(b *testing.B) {
			kind := name
			var opts []Option
			if name == "disk-no-ack-commit" {
				kind = KindDisk
				opts = append(opts, withDiskHooks(diskHooks{noAckCommit: true}))
			}
			cfg := Config{Kind: kind, MaxBytes: 1 << 40, MaxRecords: 1 << 40, CloseTimeout: time.Hour}
			if kind == KindDisk {
				cfg.Dir = b.TempDir()
			}
			buf, err := New(discardOutput{}, cfg, opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := buf.Write(ctx, tb); err != nil {
					b.Fatal(err)
				}
			}
			if err := buf.Close(); err != nil { // drains: delivery is inside the timing
				b.Fatal(err)
			}
			if st := buf.Stats(); st.Delivered != uint64(b.N) {
				b.Fatalf("delivered %d of %d", st.Delivered, b.N)
			}
			reportRates(b, payload, tb.Len())
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tb.Len()), "ns/record")
		})
	}
}
