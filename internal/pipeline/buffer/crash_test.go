//go:build linux

package buffer

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusampler/gpusampler/record"
)

// The crash test's child role is selected by these environment variables.
const (
	envCrashChild = "GPUSAMPLER_BUFFER_CRASH_CHILD" // the queue directory
	envCrashSeed  = "GPUSAMPLER_BUFFER_CRASH_SEED"
	envCrashStart = "GPUSAMPLER_BUFFER_CRASH_START" // first Seq to append
	envCrashPoint = "GPUSAMPLER_BUFFER_CRASH_POINT" // hook point to die at ("" none)
	envCrashAfter = "GPUSAMPLER_BUFFER_CRASH_AFTER" // at its n-th hit
)

// crashPoints are the named points of the crash-safety order the child
// kills itself at; "" means the parent kills it at a random moment.
var crashPoints = []string{"", "append.written", "append.torn", "roll.created", "sync.fsynced", "cursor.tmp",
	"cursor.renamed", "delete.committed", "delete.removed", ""}

// crashSamples is how many samples batch seq holds (so that the parent can
// rebuild and compare every batch).
func crashSamples(seq uint64) int { return 1 + int(seq*7%23) }

// TestDiskCrashRecovery kills a child process (SIGKILL) that appends,
// syncs, delivers and acknowledges, mid-append, mid-commit and mid-delete,
// then reopens the queue and checks that every batch the child had made
// durable (synced) and the sink had not accepted is replayed, in order,
// intact; a torn record is skipped and counted, never replayed.
func TestDiskCrashRecovery(t *testing.T) {
	if dir := os.Getenv(envCrashChild); dir != "" {
		crashChild(dir)
		return
	}
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(7, 7))
	mustHave := map[uint64]bool{} // durable and not yet accepted
	next := uint64(1)
	rounds := 3 * len(crashPoints)
	for round := range rounds {
		point := crashPoints[round%len(crashPoints)]
		after := 1 + r.IntN(12)
		cmd := exec.Command(os.Args[0], "-test.run=^TestDiskCrashRecovery$", "-test.count=1")
		cmd.Env = append(os.Environ(), envCrashChild+"="+dir, envCrashSeed+"="+strconv.Itoa(round),
			envCrashStart+"="+strconv.FormatUint(next, 10), envCrashPoint+"="+point,
			envCrashAfter+"="+strconv.Itoa(after))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killAfter := -1
		if point == "" {
			killAfter = 1 + r.IntN(60)
		}
		sc := bufio.NewScanner(stdout)
		lines := 0
		maxAppended := next - 1
		durableUpTo := next - 1
		accepted := map[uint64]bool{}
		var log []string
		for sc.Scan() {
			log = append(log, sc.Text())
			f := strings.Fields(sc.Text())
			if len(f) != 2 {
				continue
			}
			seq, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				continue
			}
			switch f[0] {
			case "D": // every Seq up to seq is durable
				for s := durableUpTo + 1; s <= seq; s++ {
					if !accepted[s] {
						mustHave[s] = true
					}
				}
				durableUpTo = max(durableUpTo, seq)
				maxAppended = max(maxAppended, seq)
			case "P":
				maxAppended = max(maxAppended, seq)
			case "A":
				delete(mustHave, seq)
				accepted[seq] = true
			}
			if lines++; lines == killAfter {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		err = cmd.Wait()
		killed := false
		if ee, ok := err.(*exec.ExitError); ok {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
				killed = true
			}
		}
		if err != nil && !killed {
			t.Fatalf("round %d (%q): child failed: %v", round, point, err)
		}
		next = maxAppended + 1

		// Restart: open the queue here, deliver a random prefix.
		q, err := openDiskQueue(dir, diskOptions{maxBytes: 1 << 30, segmentBytes: 4 << 10})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		st := q.stats()
		switch {
		case point == "append.torn" && killed && st.corruptBatches != 1:
			t.Fatalf("round %d: torn append: %d corrupt counted, want 1", round, st.corruptBatches)
		case point != "append.torn" && point != "" && st.corruptBatches != 0:
			t.Fatalf("round %d (%q): %d corrupt counted, want 0", round, point, st.corruptBatches)
		}
		all, err := q.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		var b record.Batch
		for _, e := range all {
			if err := decodeBatch(&b, e.payload); err != nil {
				t.Fatalf("round %d: replayed garbage: %v", round, err)
			}
			if want := encode(testBatch(b.Seq, crashSamples(b.Seq))); string(want) != string(e.payload) {
				t.Fatalf("round %d: batch %d replayed with other content", round, b.Seq)
			}
			seqs = append(seqs, b.Seq)
		}
		if !slices.IsSorted(seqs) || len(slices.Compact(slices.Clone(seqs))) != len(seqs) {
			t.Fatalf("round %d: replay out of order: %v", round, seqs)
		}
		for s := range mustHave {
			if _, ok := slices.BinarySearch(seqs, s); !ok {
				t.Logf("child said: %v", log)
				t.Fatalf("round %d (%q, killed %v): durable batch %d lost; replay %v", round, point, killed, s, seqs)
			}
		}
		// A batch appended but not yet reported ("P") may be there: never
		// reuse its Seq.
		if n := len(seqs); n > 0 {
			next = max(next, seqs[n-1]+1)
		}
		// Whatever is visible now is durable after the clean close below.
		for _, s := range seqs {
			mustHave[s] = true
		}
		deliver := r.IntN(len(seqs) + 1)
		for range deliver {
			e, ok, err := q.next()
			if !ok || err != nil {
				t.Fatalf("round %d: next: %v %v", round, ok, err)
			}
			decodeBatch(&b, e.payload)
			delete(mustHave, b.Seq)
			q.ack()
		}
		if err := q.close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: point %q after %d killed=%v: replayed %d, delivered %d, corrupt %d",
			round, point, after, killed, len(seqs), deliver, st.corruptBatches)
	}
}

// crashChild appends, syncs, takes, accepts and acknowledges at random,
// reporting on stdout: "P seq" appended, "D seq" durable up to seq,
// "A seq" accepted by the sink (before its ack).
func crashChild(dir string) {
	seed, _ := strconv.ParseUint(os.Getenv(envCrashSeed), 10, 64)
	seq, _ := strconv.ParseUint(os.Getenv(envCrashStart), 10, 64)
	point := os.Getenv(envCrashPoint)
	after, _ := strconv.Atoi(os.Getenv(envCrashAfter))
	r := rand.New(rand.NewPCG(seed, 1))
	hits := 0
	die := func() {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	hooks := diskHooks{
		crash: func(p string) {
			if p == point && p != "append.torn" {
				if hits++; hits == after {
					die()
				}
			}
		},
		tear: func() bool {
			if point == "append.torn" {
				hits++
				return hits == after
			}
			return false
		},
	}
	hooks.crash = func(inner func(string)) func(string) {
		return func(p string) {
			if p == "append.torn" {
				die()
			}
			inner(p)
		}
	}(hooks.crash)
	q, err := openDiskQueue(dir, diskOptions{maxBytes: 1 << 30, segmentBytes: 4 << 10, hooks: hooks})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	var b record.Batch
	for range 600 {
		switch x := r.IntN(100); {
		case x < 50:
			tb := testBatch(seq, crashSamples(seq))
			if err := q.push(encode(tb), tb.Len(), int64(seq)); err != nil {
				fmt.Fprintln(os.Stderr, "child push:", err)
				os.Exit(2)
			}
			fmt.Printf("P %d\n", seq)
			seq++
		case x < 90:
			e, ok, err := q.next()
			if err != nil {
				fmt.Fprintln(os.Stderr, "child next:", err)
				os.Exit(2)
			}
			if ok {
				if err := decodeBatch(&b, e.payload); err != nil {
					fmt.Fprintln(os.Stderr, "child decode:", err)
					os.Exit(2)
				}
				fmt.Printf("A %d\n", b.Seq)
				q.ack()
			}
		default:
			if err := q.sync(); err != nil {
				fmt.Fprintln(os.Stderr, "child sync:", err)
				os.Exit(2)
			}
			fmt.Printf("D %d\n", seq-1)
		}
	}
	q.close()
	fmt.Printf("D %d\n", seq-1)
	os.Exit(0)
}

// TestDiskCorruptRecordSkipped damages a record in the middle of a segment
// and the cursor: the damaged record is counted and skipped, the records
// after it are found again, and a bad cursor means "replay everything".
func TestDiskCorruptRecordSkipped(t *testing.T) {
	dir := t.TempDir()
	q, err := openDiskQueue(dir, diskOptions{maxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for seq := uint64(1); seq <= 10; seq++ {
		tb := testBatch(seq, 4)
		if err := q.push(encode(tb), tb.Len(), 1); err != nil {
			t.Fatal(err)
		}
		a := q.active()
		offs = append(offs, a.frames[len(a.frames)-1].off)
	}
	path := q.active().path
	q.close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[offs[4]+frameHeaderSize+3] ^= 0x40 // payload of seq 5
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/"+cursorName, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	q, err = openDiskQueue(dir, diskOptions{maxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer q.close()
	all, err := q.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var b record.Batch
	for _, e := range all {
		if err := decodeBatch(&b, e.payload); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, b.Seq)
	}
	if want := []uint64{1, 2, 3, 4, 6, 7, 8, 9, 10}; !slices.Equal(seqs, want) {
		t.Fatalf("replay %v, want %v", seqs, want)
	}
	if st := q.stats(); st.corruptBatches != 1 || st.corruptBytes != uint64(offs[5]-offs[4]) {
		t.Fatalf("corrupt %d batches %d bytes, want 1 and %d", st.corruptBatches, st.corruptBytes, offs[5]-offs[4])
	}
}
