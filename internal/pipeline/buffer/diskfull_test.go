//go:build linux

package buffer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// duBytes is what `du -s --block-size=1 dir` reports: the blocks every file
// in dir and dir itself use.
func duBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatalf("du %s: %v", dir, err)
	}
	return total
}

// switchSink fails every write (retryable) while down is set.
type switchSink struct {
	fakeSink
	down atomic.Bool
}

func (s *switchSink) Write(ctx context.Context, b *record.Batch) error {
	if s.down.Load() {
		s.mu.Lock()
		s.calls++
		s.mu.Unlock()
		return errors.New("sink: down")
	}
	return s.fakeSink.Write(ctx, b)
}

// awaitDelivered waits (liveness bound) until b delivered n batches.
func awaitDelivered(t *testing.T, b *Buffer, n uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for b.Stats().Delivered+b.Stats().DroppedBatches.Cap < n {
		if time.Now().After(deadline) {
			t.Fatalf("delivered %d of %d within the liveness bound: %+v", b.Stats().Delivered, n, b.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDiskBudget: with max_bytes = 100000, a sink that is down and then up
// and then keeps up, the buffer directory (du, every file and the directory
// itself) never uses more than max_bytes, what the cap drops is counted
// exactly (delivered + dropped = written), and once the sink keeps up the
// delivered segments are removed as it goes.
func TestDiskBudget(t *testing.T) {
	const maxBytes = 100000
	dir := t.TempDir()
	sink := &switchSink{}
	sink.down.Store(true)
	clock := newFakeClock()
	b, err := New(sink, Config{Kind: KindDisk, MaxBytes: maxBytes, Dir: dir, FsyncInterval: time.Hour, CloseTimeout: time.Minute},
		withSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }), withClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	largest := duBytes(t, dir)
	var atLargest []string
	written := uint64(0)
	write := func(n int) {
		for range n {
			written++
			if err := b.Write(context.Background(), testBatch(written, 60)); err != nil {
				t.Fatal(err)
			}
			clock.Advance(100 * time.Millisecond)
			if du := duBytes(t, dir); du > largest {
				largest, atLargest = du, nil
				for _, e := range must(os.ReadDir(dir)) {
					var st syscall.Stat_t
					syscall.Lstat(filepath.Join(dir, e.Name()), &st)
					atLargest = append(atLargest, fmt.Sprintf("%s %d bytes %d blocks", e.Name(), st.Size, st.Blocks))
				}
			}
		}
	}
	write(100) // the sink is down: the cap drops the oldest ...
	// ... and only the oldest: what stays is most of what the budget holds,
	// never an emptied backlog (the budget once counted segments already
	// collected for deletion and dropped everything, every ~68 batches).
	least := int64(-1)
	for range 300 {
		write(1)
		if n := b.Stats().BufferedBatches; least < 0 || n < least {
			least = n
		}
	}
	if least < 40 {
		t.Fatalf("while the cap drops the oldest, the backlog fell to %d batches of ~1 KB under a %d-byte budget", least, maxBytes)
	}
	st := b.Stats()
	if st.DroppedBatches.Cap == 0 {
		t.Fatalf("400 batches of ~1 KB fit in 100000 bytes? %+v", st)
	}
	if st.DiskBytes > maxBytes {
		t.Fatalf("DiskBytes %d over max_bytes", st.DiskBytes)
	}
	sink.down.Store(false)
	awaitDelivered(t, b, written)
	write(400) // the sink keeps up
	awaitDelivered(t, b, written)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	st = b.Stats()
	if st.Delivered+st.DroppedBatches.Cap != written || st.DroppedBatches.Total() != st.DroppedBatches.Cap {
		t.Fatalf("written %d, delivered %d + dropped %+v", written, st.Delivered, st.DroppedBatches)
	}
	if got := uint64(len(sink.Accepted(t))); got != st.Delivered {
		t.Fatalf("sink took %d, buffer says %d delivered", got, st.Delivered)
	}
	if largest > maxBytes {
		t.Logf("at the largest: %q", atLargest)
		t.Fatalf("largest du of the buffer dir %d bytes, over max_bytes %d", largest, maxBytes)
	}
	t.Logf("largest du %d bytes (max_bytes %d); delivered %d, dropped at the cap %d of %d batches; smallest backlog while dropping %d batches",
		largest, maxBytes, st.Delivered, st.DroppedBatches.Cap, written, least)
}

// TestDiskReclaimsDelivered: with the default segment size (16 MiB for a
// 1 GiB cap) and a sink that keeps up, the active segment is closed and
// removed once what it holds was delivered: the directory stays near
// reclaimBytes instead of growing to a segment.
func TestDiskReclaimsDelivered(t *testing.T) {
	dir := t.TempDir()
	sink := &fakeSink{}
	b, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir, FsyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var largest int64
	for seq := uint64(1); seq <= 1000; seq++ {
		if err := b.Write(context.Background(), testBatch(seq, 60)); err != nil {
			t.Fatal(err)
		}
		awaitDelivered(t, b, seq)
		largest = max(largest, duBytes(t, dir))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// reclaimBytes of records, the batch that crossed it, a header, the
	// cursor and the directory.
	if bound := int64(reclaimBytes + 8*blockSize); largest > bound {
		t.Fatalf("largest du %d bytes with a sink that keeps up, want at most %d", largest, bound)
	}
}

// fullDisk is a write-error seam: while full is set every segment create
// and record write fails with ENOSPC.
type fullDisk struct{ full atomic.Bool }

func (f *fullDisk) err(string) error {
	if f.full.Load() {
		return syscall.ENOSPC
	}
	return nil
}

// levelCounter counts log records by level and message.
type levelCounter struct {
	mu     sync.Mutex
	counts map[slog.Level]int
	msgs   []string
}

func (h *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.counts == nil {
		h.counts = map[slog.Level]int{}
	}
	h.counts[r.Level]++
	h.msgs = append(h.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (h *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelCounter) WithGroup(string) slog.Handler      { return h }
func (h *levelCounter) Count(l slog.Level) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[l]
}

// TestDiskFullDegrades: writes to disk fail (ENOSPC, through the seam)
// while the sink is up, then while it is down: the buffer keeps
// delivering, holds new batches in memory within its cap (the oldest
// dropped, counted), says so once at error level and in Stats, and goes
// back to disk when writes succeed again; nothing is lost but what the cap
// dropped, and the order is kept.
func TestDiskFullDegrades(t *testing.T) {
	dir := t.TempDir()
	disk := &fullDisk{}
	sink := &switchSink{}
	clock := newFakeClock()
	logs := &levelCounter{}
	const capRecords = 50 * 61 // 50 batches
	b, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, MaxRecords: capRecords, Dir: dir, FsyncInterval: time.Hour,
		CloseTimeout: time.Minute}, withDiskHooks(diskHooks{writeErr: disk.err}), withClock(clock.Now),
		withSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }), WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	write := func(n int) {
		for range n {
			seq++
			if err := b.Write(context.Background(), testBatch(seq, 60)); err != nil {
				t.Fatalf("write %d: %v", seq, err)
			}
			clock.Advance(100 * time.Millisecond)
		}
	}
	write(20)
	disk.full.Store(true)
	write(30) // sink up, disk full: delivered from memory
	awaitDelivered(t, b, seq)
	if st := b.Stats(); !st.Degraded || st.DiskErrors == 0 || st.Degradations != 1 || st.DroppedBatches.Total() != 0 {
		t.Fatalf("disk full, sink up: %+v", st)
	}
	sink.down.Store(true)
	write(80) // sink down too: 50 held at most, the oldest dropped
	st := b.Stats()
	// The cap, plus the batch in flight (never dropped).
	if st.HeldBatches > 51 || st.DroppedBatches.Cap == 0 || st.BufferedRecords > capRecords+62 {
		t.Fatalf("disk full, sink down: %+v", st)
	}
	if n := logs.Count(slog.LevelError); n != 1 {
		t.Fatalf("%d error lines, want 1: %v", n, logs.msgs)
	}
	disk.full.Store(false)
	clock.Advance(time.Second)
	write(5) // moves what is held to disk; the one in flight stays in memory
	if st := b.Stats(); st.Degraded || st.HeldBatches > 1 {
		t.Fatalf("disk writable again: %+v", st)
	}
	sink.down.Store(false)
	awaitDelivered(t, b, seq)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	st = b.Stats()
	got := sink.Accepted(t)
	if st.Delivered+st.DroppedBatches.Cap != seq || uint64(len(got)) != st.Delivered || st.DroppedBatches.Total() != st.DroppedBatches.Cap {
		t.Fatalf("written %d: delivered %d (sink %d), dropped %+v", seq, st.Delivered, len(got), st.DroppedBatches)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("order: %d after %d", got[i], got[i-1])
		}
	}
	t.Logf("written %d, delivered %d, dropped at the cap %d (counted), disk errors %d", seq, st.Delivered,
		st.DroppedBatches.Cap, st.DiskErrors)
}

// mountSmall mounts a tmpfs of size bytes on a new temp dir and unmounts it
// at the end of the test; it skips the test, saying why, where mounting is
// not possible (not root, no tmpfs, a container without CAP_SYS_ADMIN).
func mountSmall(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as a full disk (TestDiskFullDegrades covers it through the write seam)")
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs (%v: %s); TestDiskFullDegrades covers a full disk through the write seam", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// TestDiskFullRealFilesystem: a 512 KiB tmpfs as the buffer's disk, with
// the default (1 GiB) cap. A backlog written while the sink is down fills
// the disk; the buffer degrades, then the sink comes up: everything is
// delivered. Then the disk fills again with the sink down and the buffer
// stops (what it held in memory is counted lost at close); a filler file
// takes what is left of the disk; a buffer started on the full disk opens,
// delivers the backlog and takes new batches, and is back on disk once the
// backlog's segments are gone. Nothing is lost but what is counted.
func TestDiskFullRealFilesystem(t *testing.T) {
	mnt := mountSmall(t, "512k")
	dir := filepath.Join(mnt, "influxdb")
	sink := &switchSink{}
	sink.down.Store(true)
	clock := newFakeClock()
	open := func() *Buffer {
		// Close gives up at once on a sink that is down: what is on disk
		// stays there.
		b, err := New(sink, Config{Kind: KindDisk, MaxBytes: 1 << 30, Dir: dir, FsyncInterval: time.Hour, CloseTimeout: time.Millisecond},
			withClock(clock.Now), withSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return b
	}
	b := open()
	seq := uint64(0)
	write := func(b *Buffer, n int) {
		for range n {
			seq++
			if err := b.Write(context.Background(), testBatch(seq, 200)); err != nil {
				t.Fatalf("write %d: %v", seq, err)
			}
			clock.Advance(100 * time.Millisecond)
		}
	}
	for !b.Stats().Degraded {
		write(b, 10)
	}
	write(b, 50)
	sink.down.Store(false)
	awaitDelivered(t, b, seq)
	clock.Advance(time.Second)
	write(b, 50)
	awaitDelivered(t, b, seq)
	if st := b.Stats(); st.Degraded || st.DroppedBatches.Total() != 0 {
		t.Fatalf("backlog delivered, sink up: %+v", st)
	}
	sink.down.Store(true)
	for !b.Stats().Degraded {
		write(b, 10)
	}
	write(b, 5)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	st1 := b.Stats()
	if st1.DroppedRecords.Shutdown == 0 || st1.DroppedBatches.Total() != st1.DroppedBatches.Shutdown {
		t.Fatalf("closed with batches held in memory on a full disk: %+v", st1)
	}
	filler, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	filler.Close()
	sink.down.Store(false)
	b2 := open() // on a full disk
	backlog := uint64(b2.Stats().BufferedBatches)
	if backlog == 0 {
		t.Fatal("no backlog on disk")
	}
	write(b2, 30)
	awaitDelivered(t, b2, backlog+30)
	clock.Advance(time.Second)
	write(b2, 5)
	awaitDelivered(t, b2, backlog+35)
	if st := b2.Stats(); st.Degraded || st.DroppedBatches.Total() != 0 {
		t.Fatalf("started on a full disk, backlog delivered: %+v", st)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := uint64(len(sink.Accepted(t))); got+st1.DroppedBatches.Shutdown != seq {
		t.Fatalf("written %d, sink took %d, counted lost at close %d", seq, got, st1.DroppedBatches.Shutdown)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestDiskPlantedSegmentNames: a regular file and a symlink planted under
// the next segments' names (another user, in a directory they may write
// to) do not stop the queue: their names are skipped, the file is never
// read or changed, the symlink's target never written.
func TestDiskPlantedSegmentNames(t *testing.T) {
	dir := t.TempDir()
	q, err := openDiskQueue(dir, diskOptions{maxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	push := func(seq uint64) {
		tb := testBatch(seq, 4)
		if err := q.push(encode(tb), tb.Len(), int64(seq)); err != nil {
			t.Fatalf("push %d: %v", seq, err)
		}
	}
	push(1)
	next := q.nextID
	planted := q.segPath(next)
	if err := os.WriteFile(planted, []byte("not yours"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, q.segPath(next+1)); err != nil {
		t.Fatal(err)
	}
	q.setHeader([]byte("another header")) // the next push starts a segment
	push(2)
	if a := q.active(); a.id != next+2 {
		t.Fatalf("active segment %d, want %d (two names skipped)", a.id, next+2)
	}
	got, err := q.snapshot()
	if err != nil || len(got) != 2 {
		t.Fatalf("queue holds %d entries (%v), want 2", len(got), err)
	}
	if b, _ := os.ReadFile(planted); string(b) != "not yours" {
		t.Fatalf("planted file changed: %q", b)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("symlink target changed: %q", b)
	}
}

// TestDiskBudgetCountsSharedFiles: a file another writer keeps in the
// buffer's directory (the aggregate journal, WithSharedFiles) counts in
// the disk budget: with a 40 KB journal beside the segments, the whole
// directory stays within max_bytes (the cap drops sooner), and DiskBytes
// includes the journal.
func TestDiskBudgetCountsSharedFiles(t *testing.T) {
	const maxBytes = 100000
	dir := t.TempDir()
	journal := filepath.Join(dir, "aggregate.journal")
	if err := os.WriteFile(journal, make([]byte, 40000), 0o600); err != nil {
		t.Fatal(err)
	}
	sink := &switchSink{}
	sink.down.Store(true)
	clock := newFakeClock()
	b, err := New(sink, Config{Kind: KindDisk, MaxBytes: maxBytes, Dir: dir, FsyncInterval: time.Hour, CloseTimeout: time.Millisecond},
		withSleep(func(ctx context.Context, d time.Duration) error { return ctx.Err() }), withClock(clock.Now),
		WithSharedFiles("aggregate.journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var largest int64
	for seq := uint64(1); seq <= 200; seq++ {
		if err := b.Write(context.Background(), testBatch(seq, 60)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(100 * time.Millisecond)
		largest = max(largest, duBytes(t, dir))
	}
	st := b.Stats()
	if largest > maxBytes || st.DroppedBatches.Cap == 0 {
		t.Fatalf("largest du of the directory with the journal %d bytes (max_bytes %d), cap drops %d", largest, maxBytes, st.DroppedBatches.Cap)
	}
	if st.DiskBytes < 40000 || st.DiskBytes > maxBytes {
		t.Fatalf("DiskBytes %d: want the journal's 40000 bytes counted, within %d", st.DiskBytes, maxBytes)
	}
	t.Logf("largest du %d bytes with a 40000-byte journal; %d batches held, %d dropped at the cap", largest, st.BufferedBatches, st.DroppedBatches.Cap)
}
