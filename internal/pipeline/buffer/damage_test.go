package buffer

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// TestDiskDamageWhileStopped: a queue of several segments is closed
// cleanly, one of its segments is damaged (emptied, truncated, overwritten
// with garbage, deleted) or its cursor is; at the next open the loss is
// logged once for the segment and counted exactly: what the test computes
// from the files before and after the damage. A damaged cursor loses
// nothing (everything is replayed) and says so once.
func TestDiskDamageWhileStopped(t *testing.T) {
	const damageMsg = "WARN buffer segment damaged while gpusampler was stopped; its lost records are counted as corrupt"
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, data []byte) // path is the second segment
	}{
		{"empty", func(t *testing.T, path string, _ []byte) { must0(t, os.Truncate(path, 0)) }},
		{"truncated", func(t *testing.T, path string, data []byte) { must0(t, os.Truncate(path, int64(len(data)/2))) }},
		{"garbage", func(t *testing.T, path string, data []byte) {
			bad := append([]byte(nil), data...)
			for i := len(bad) / 3; i < 2*len(bad)/3; i++ {
				bad[i] = 0x5a
			}
			must0(t, os.WriteFile(path, bad, 0o600))
		}},
		{"deleted", func(t *testing.T, path string, _ []byte) { must0(t, os.Remove(path)) }},
		{"cursor", func(t *testing.T, path string, _ []byte) {
			must0(t, os.WriteFile(filepath.Join(filepath.Dir(path), cursorName), []byte("GSBC garbage"), 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			q, err := openDiskQueue(dir, diskOptions{maxBytes: 1 << 20, segmentBytes: 2 << 10})
			if err != nil {
				t.Fatal(err)
			}
			for seq := uint64(1); seq <= 40; seq++ {
				tb := testBatch(seq, 3+int(seq%4))
				if err := q.push(encode(tb), tb.Len(), int64(seq)); err != nil {
					t.Fatal(err)
				}
			}
			// Deliver the first batch, so the cursor is not at the start.
			if _, ok, err := q.next(); !ok || err != nil {
				t.Fatalf("next: %v %v", ok, err)
			}
			q.ack()
			if len(q.segs) < 3 {
				t.Fatalf("%d segments, want several", len(q.segs))
			}
			target := q.segs[1]
			if err := q.close(); err != nil {
				t.Fatal(err)
			}
			// What the second segment holds, from its file.
			before, err := os.ReadFile(target.path)
			if err != nil {
				t.Fatal(err)
			}
			tc.damage(t, target.path, before)
			wantB, wantR := lostFromFiles(t, before, target.path)
			if tc.name == "cursor" {
				wantB, wantR = 0, 0
			}
			logs := &levelHandler{}
			q2, err := openDiskQueue(dir, diskOptions{maxBytes: 1 << 20, segmentBytes: 2 << 10, log: slog.New(logs)})
			if err != nil {
				t.Fatal(err)
			}
			defer q2.close()
			st := q2.stats()
			if int64(st.corruptBatches) != wantB || int64(st.corruptRecords) != wantR {
				t.Fatalf("counted %d batches %d records corrupt; the files say %d and %d were lost (log %v)",
					st.corruptBatches, st.corruptRecords, wantB, wantR, logs.recs)
			}
			lines := logs.Count(damageMsg)
			if tc.name == "cursor" {
				if n := logs.Count("WARN buffer cursor unreadable; replaying every segment"); n != 1 || lines != 0 {
					t.Fatalf("cursor: %d cursor lines, %d damage lines (log %v)", n, lines, logs.recs)
				}
				return
			}
			if lines != 1 || len(logs.recs) != 1 {
				t.Fatalf("%d damage lines, log %v: want exactly one line for the segment", lines, logs.recs)
			}
			t.Logf("%s: lost %d batches, %d records, counted and logged once", tc.name, wantB, wantR)
		})
	}
}

// lostFromFiles returns the batches and records of the segment before (its
// content before the damage) that its file at path no longer holds whole.
func lostFromFiles(t *testing.T, before []byte, path string) (batches, records int64) {
	t.Helper()
	_, start, err := parseSegmentHeader(before)
	if err != nil {
		t.Fatal(err)
	}
	was, _ := scanSegment(before, start)
	after, _ := os.ReadFile(path) // nil when deleted
	for _, fr := range was {
		end := fr.off + fr.total()
		if end <= int64(len(after)) && string(after[fr.off:end]) == string(before[fr.off:end]) {
			if _, _, herr := parseSegmentHeader(after); herr == nil {
				continue // still there, whole
			}
		}
		batches++
		records += int64(fr.records)
	}
	return batches, records
}

func must0(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
