package aggregate_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/record"
)

// down is an inner output that refuses every write as unavailable (a
// sink that is down), keeping nothing.
type down struct{ writes int }

func (d *down) Write(context.Context, *record.Batch) error {
	d.writes++
	return fmt.Errorf("down: %w", record.ErrUnavailable)
}
func (d *down) Close() error { return nil }

// journalSamples returns n samples per series of two devices and two
// metrics, 10 per second from base, with values that exercise every field
// (negative, fractional, one NaN-free spike).
func journalSamples(base int64, from, n int) []record.Sample {
	var out []record.Sample
	for i := from; i < from+n; i++ {
		for dev := range uint16(2) {
			for _, m := range []catalog.MetricID{1, 6} {
				v := float64((i*37+int(dev)*11+int(m))%101) - 20.25
				if i%17 == 3 {
					v = 1e9 + 0.5
				}
				out = append(out, record.Sample{TimeNS: base + int64(i)*int64(100*time.Millisecond), Value: v, Device: dev, Metric: m})
			}
		}
	}
	return out
}

func sortSummaries(s []record.Summary) []record.Summary {
	s = slices.Clone(s)
	slices.SortFunc(s, func(a, b record.Summary) int {
		if a.StartNS != b.StartNS {
			return int(a.StartNS/1e6 - b.StartNS/1e6)
		}
		if a.Device != b.Device {
			return int(a.Device) - int(b.Device)
		}
		return int(a.Metric) - int(b.Metric)
	})
	return s
}

func sameSummaries(t *testing.T, got, want []record.Summary) {
	t.Helper()
	got, want = sortSummaries(got), sortSummaries(want)
	if !slices.Equal(got, want) {
		t.Fatalf("summaries:\n got %v\nwant %v", got, want)
	}
}

// reference returns the summaries an uninterrupted wrapper emits for
// samples written in batches of per.
func reference(t *testing.T, samples []record.Sample, per int) []record.Summary {
	c := &collect{}
	ag, err := aggregate.New(c, aggregate.Options{Interval: time.Second, Now: farPast})
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, ag, samples, per, 1)
	if err := ag.Close(); err != nil {
		t.Fatal(err)
	}
	return c.sums
}

// farPast is a wall clock before every sample, so no window closes by time.
func farPast() time.Time { return time.Unix(0, 0) }

func writeAll(t *testing.T, ag *aggregate.Output, samples []record.Sample, per int, seq uint64) uint64 {
	t.Helper()
	for len(samples) > 0 {
		n := min(per, len(samples))
		if err := ag.Write(context.Background(), &record.Batch{Seq: seq, Samples: samples[:n]}); err != nil {
			t.Fatal(err)
		}
		samples = samples[n:]
		seq++
	}
	return seq
}

// TestJournalTakesUpOpenWindowsAfterCrash: a wrapper abandoned without
// Close (a process crash) leaves its open windows in the journal; a new
// wrapper on it goes on with them, and the summaries of both together are
// exactly those of an uninterrupted run, whole.
func TestJournalTakesUpOpenWindowsAfterCrash(t *testing.T) {
	base := time.Unix(1_800_000_000, 0).UnixNano()
	all := journalSamples(base, 0, 45) // 4.5 s: the crash falls inside a window
	want := reference(t, all, 7)
	for _, cut := range []int{7 * 3, 7 * 11, 7 * 13, len(all) - 4} { // mid-window, at a boundary and near the end
		t.Run(fmt.Sprint("cut", cut), func(t *testing.T) {
			journal := filepath.Join(t.TempDir(), "aggregate.journal")
			c := &collect{}
			ag, err := aggregate.New(c, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal})
			if err != nil {
				t.Fatal(err)
			}
			seq := writeAll(t, ag, all[:cut], 7, 1)
			emitted := len(c.sums)
			// Crash: ag is abandoned. Its inner output kept what it took.
			ag2, err := aggregate.New(c, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal,
				LastAppended: func() (uint64, bool) { return uint64(c.writes), true }})
			if err != nil {
				t.Fatal(err)
			}
			writeAll(t, ag2, all[cut:], 7, seq)
			if err := ag2.Close(); err != nil {
				t.Fatal(err)
			}
			sameSummaries(t, c.sums, want)
			if st := ag2.Stats(); st.Recovered == 0 && emitted < len(want) {
				t.Errorf("nothing recovered from the journal (stats %+v)", st)
			}
			if _, err := os.Stat(journal); !os.IsNotExist(err) {
				t.Errorf("journal left after a clean Close: %v", err)
			}
		})
	}
}

// TestJournalPendingSummaries: summaries the crash caught on their way to
// the inner output are handed on again after it unless LastAppended says
// the inner output took their batch.
func TestJournalPendingSummaries(t *testing.T) {
	base := time.Unix(1_800_000_000, 0).UnixNano()
	all := journalSamples(base, 0, 25) // windows 0 and 1 close, 2 stays open
	want := reference(t, all, 100)
	for _, tc := range []struct {
		name     string
		appended bool
	}{{"not taken", false}, {"taken", true}} {
		t.Run(tc.name, func(t *testing.T) {
			journal := filepath.Join(t.TempDir(), "aggregate.journal")
			d := &down{}
			ag, err := aggregate.New(d, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal})
			if err != nil {
				t.Fatal(err)
			}
			// The inner output is down: the closed windows are kept, in the
			// journal as pending with the Seq of the last attempt.
			if err := ag.Write(context.Background(), &record.Batch{Seq: 1, Samples: all}); err == nil {
				t.Fatal("a down inner output did not fail the write")
			}
			c := &collect{}
			var took []record.Summary
			last := func() (uint64, bool) { return uint64(d.writes) - 1, true }
			if tc.appended {
				// As if the last attempt had reached the output: it holds
				// the closed windows.
				last = func() (uint64, bool) { return uint64(d.writes), true }
				for _, s := range want {
					if s.StartNS < base+2*int64(time.Second) {
						took = append(took, s)
					}
				}
			}
			c.sums = append(c.sums, took...)
			ag2, err := aggregate.New(c, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal, LastAppended: last})
			if err != nil {
				t.Fatal(err)
			}
			if err := ag2.Close(); err != nil {
				t.Fatal(err)
			}
			sameSummaries(t, c.sums, want)
		})
	}
}

// TestJournalOtherIntervalAndCatalog: windows journaled with another
// interval are handed on closed, as they were; windows of a metric the
// catalog does not have are counted dropped; a corrupt journal is set
// aside without failing the wrapper.
func TestJournalOtherIntervalAndCatalog(t *testing.T) {
	base := time.Unix(1_800_000_000, 0).UnixNano()
	all := journalSamples(base, 0, 5) // one open window per series
	journal := filepath.Join(t.TempDir(), "aggregate.journal")
	ag, err := aggregate.New(&collect{}, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal})
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, ag, all, 100, 1)
	data, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	want := reference(t, all, 100)

	c := &collect{}
	ag2, err := aggregate.New(c, aggregate.Options{Interval: 10 * time.Second, Now: farPast, Journal: journal})
	if err != nil {
		t.Fatal(err)
	}
	if err := ag2.Close(); err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, c.sums, want)

	// A metric the catalog does not have (renamed in the journal): its two
	// windows are dropped, counted.
	name := catalog.Default().Name(6)
	renamed := bytes.Replace(data[:len(data)-4], []byte(name), []byte("X"+name[1:]), 1)
	renamed = binary.LittleEndian.AppendUint32(renamed, crc32.Checksum(renamed, crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(journal, renamed, 0o600); err != nil {
		t.Fatal(err)
	}
	c = &collect{}
	ag3, err := aggregate.New(c, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal})
	if err != nil {
		t.Fatal(err)
	}
	if st := ag3.Stats(); st.Dropped != 2 || st.Recovered != 2 {
		t.Errorf("stats %+v, want 2 dropped (the renamed metric) and 2 recovered", st)
	}
	if err := ag3.Close(); err != nil {
		t.Fatal(err)
	}
	var kept []record.Summary
	for _, s := range want {
		if s.Metric != 6 {
			kept = append(kept, s)
		}
	}
	sameSummaries(t, c.sums, kept)

	// Corrupt: a flipped byte.
	bad := slices.Clone(data)
	bad[len(bad)/2] ^= 0xff
	if err := os.WriteFile(journal, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := aggregate.New(&collect{}, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal}); err != nil {
		t.Fatalf("a corrupt journal failed the wrapper: %v", err)
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Errorf("corrupt journal kept: %v", err)
	}
}

// TestJournalFormat1IsTakenUp: a journal written by the format-1 encoder
// (testdata/journal-v1.bin: four series, each with the window from
// base+1s open, and one pending summary of batch 41) is taken up whole; the next write is
// format 2, which a later wrapper takes up in turn.
func TestJournalFormat1IsTakenUp(t *testing.T) {
	// The samples the fixture's writer took; their first windows had
	// closed (and gone out) before it wrote the journal.
	base := time.Unix(1_800_000_000, 0).UnixNano()
	var samples []record.Sample
	for i := range 15 {
		for dev := range uint16(2) {
			ts := base + int64(i)*int64(100*time.Millisecond)
			samples = append(samples, record.Sample{TimeNS: ts, Value: float64(i*3+int(dev)) - 2.5, Device: dev, Metric: 1},
				record.Sample{TimeNS: ts, Value: float64(i*7%5) + 0.25, Device: dev, Metric: 6})
		}
	}
	pending := record.Summary{StartNS: base - int64(time.Second), IntervalNS: int64(time.Second), Mean: 1.5, Min: -3,
		Max: 7.25, Last: 2, Count: 9, Device: 1, Metric: 22}
	want := []record.Summary{pending}
	for _, s := range reference(t, samples, 100) {
		if s.StartNS >= base+int64(time.Second) {
			want = append(want, s)
		}
	}
	if len(want) != 5 {
		t.Fatalf("want %d summaries, the fixture holds 5", len(want))
	}

	old, err := os.ReadFile(filepath.Join("testdata", "journal-v1.bin"))
	if err != nil {
		t.Fatal(err)
	}
	journal := filepath.Join(t.TempDir(), "aggregate.journal")
	if err := os.WriteFile(journal, old, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &collect{}
	ag, err := aggregate.New(c, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal})
	if err != nil {
		t.Fatal(err)
	}
	if st := ag.Stats(); st.Recovered != 5 || st.Dropped != 0 {
		t.Fatalf("stats %+v, want 5 recovered (4 windows, 1 pending summary), none dropped", st)
	}
	// The pending summary goes out with the next batch, journaled first.
	if err := ag.Write(context.Background(), &record.Batch{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.sums, []record.Summary{pending}) || c.writes != 1 {
		t.Fatalf("after the first write the inner output has %v (%d writes), want the pending summary", c.sums, c.writes)
	}
	data, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 8 || string(data[:4]) != "GSAJ" || binary.LittleEndian.Uint32(data[4:8]) != 2 {
		t.Fatalf("journal not rewritten as format 2: starts % x", data[:min(len(data), 8)])
	}
	// Crash; the inner output took batch 42 (41 + 1).
	ag2, err := aggregate.New(c, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal,
		LastAppended: func() (uint64, bool) { return 42, true }})
	if err != nil {
		t.Fatal(err)
	}
	if st := ag2.Stats(); st.Recovered != 4 {
		t.Errorf("format-2 journal: stats %+v, want the 4 windows recovered", st)
	}
	if err := ag2.Close(); err != nil {
		t.Fatal(err)
	}
	sameSummaries(t, c.sums, want)
}

// TestJournalDamagedBody: a journal whose checksum matches but whose body
// is not an AggregateJournal (or has window columns of different lengths)
// is set aside like any corrupt one, without failing the wrapper.
func TestJournalDamagedBody(t *testing.T) {
	frame := func(body []byte) []byte {
		b := binary.LittleEndian.AppendUint32([]byte("GSAJ"), 2)
		b = append(b, body...)
		return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	}
	for _, tc := range []struct {
		name, why string
		body      []byte
	}{
		{"not protobuf", "cannot parse", []byte{0xff, 0xff, 0xff}},
		// series (field 5) holding start_ns (field 4) with one element
		// and no other column.
		{"ragged windows", "columns differ", []byte{5<<3 | 2, 10, 4<<3 | 2, 8, 1, 0, 0, 0, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			journal := filepath.Join(t.TempDir(), "aggregate.journal")
			if err := os.WriteFile(journal, frame(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			ag, err := aggregate.New(&collect{}, aggregate.Options{Interval: time.Second, Now: farPast, Journal: journal,
				Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatalf("a damaged journal failed the wrapper: %v", err)
			}
			if st := ag.Stats(); st.Recovered != 0 {
				t.Errorf("stats %+v: recovered from a damaged journal", st)
			}
			if !bytes.Contains(logged.Bytes(), []byte("aggregate journal unreadable")) || !bytes.Contains(logged.Bytes(), []byte(tc.why)) {
				t.Errorf("not logged: %q", logged.String())

			}
			if _, err := os.Stat(journal); !os.IsNotExist(err) {
				t.Errorf("damaged journal kept: %v", err)
			}
		})
	}
}
