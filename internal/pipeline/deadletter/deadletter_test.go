package deadletter_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/pipeline/deadletter"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordtest"
)

// sink answers each Write with the next error of its script (nil: taken).
type sink struct {
	errs   []error
	closed bool
}

func (s *sink) Write(context.Context, *record.Batch) error {
	err := s.errs[0]
	s.errs = s.errs[1:]
	return err
}

func (s *sink) Close() error { s.closed = true; return nil }

// batch is a batch with every field set, told apart by n.
func batch(n int) *record.Batch {
	b := recordtest.FullBatch()
	b.Seq = uint64(n)
	b.Samples[0].Value = float64(n)
	return b
}

var t0 = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)

func readAll(t *testing.T, file string) ([]deadletter.Header, []*record.Batch) {
	t.Helper()
	var hs []deadletter.Header
	var bs []*record.Batch
	err := deadletter.ReadFile(file, func(e *deadletter.Entry) error {
		hs = append(hs, e.Header)
		// The entry is reused: compare each batch as it comes.
		bs = append(bs, batch(int(e.Batch.Seq)))
		if want := bs[len(bs)-1]; !reflect.DeepEqual(&e.Batch, want) {
			return fmt.Errorf("entry %d: batch\n got %+v\nwant %+v", len(hs), e.Batch, *want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hs, bs
}

// Only batches refused as permanent are kept, whole, with the error; the
// sink's error reaches the caller unchanged.
func TestKeepsPermanentRefusals(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sub", "influxdb.deadletter")
	perm := record.Permanent(errors.New("HTTP 400: field type conflict"))
	unavail := fmt.Errorf("down: %w", record.ErrUnavailable)
	retry := errors.New("HTTP 503")
	s := &sink{errs: []error{nil, perm, unavail, retry, perm}}
	o, err := deadletter.New(s, deadletter.Options{File: file, Output: "influxdb", Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	var _ record.StatsReporter = o
	for i, want := range []error{nil, perm, unavail, retry, perm} {
		if got := o.Write(context.Background(), batch(i+1)); got != want {
			t.Fatalf("write %d: error %v, want %v unchanged", i+1, got, want)
		}
	}
	if err := o.Close(); err != nil || !s.closed {
		t.Fatalf("Close: %v, inner closed %v", err, s.closed)
	}
	hs, _ := readAll(t, file)
	n := batch(0).Len()
	want := []deadletter.Header{{Time: t0, Output: "influxdb", Error: perm.Error(), Records: n},
		{Time: t0, Output: "influxdb", Error: perm.Error(), Records: n}}
	for i := range hs {
		if hs[i].Bytes <= 0 {
			t.Errorf("entry %d: bytes %d", i, hs[i].Bytes)
		}
		hs[i].Bytes = 0
	}
	if !reflect.DeepEqual(hs, want) {
		t.Fatalf("headers\n got %+v\nwant %+v", hs, want)
	}
	if st := o.Stats(); st != (deadletter.Stats{Batches: 2, Records: uint64(2 * n)}) {
		t.Fatalf("stats %+v", st)
	}
	seqs := []uint64{}
	deadletter.ReadFile(file, func(e *deadletter.Entry) error { seqs = append(seqs, e.Batch.Seq); return nil })
	if !reflect.DeepEqual(seqs, []uint64{2, 5}) {
		t.Fatalf("kept batches %v, want 2 and 5", seqs)
	}
}

// The file stops growing at MaxBytes: what does not fit is counted as
// skipped. A second wrapper (a reload's replacement) appends to the same
// file and counts its size from what is there.
func TestCapAndAppend(t *testing.T) {
	file := filepath.Join(t.TempDir(), "x.deadletter")
	perm := record.Permanent(errors.New("bad"))
	one := func() int64 {
		o, err := deadletter.New(&sink{errs: []error{perm}}, deadletter.Options{File: file})
		if err != nil {
			t.Fatal(err)
		}
		o.Write(context.Background(), batch(1))
		o.Close()
		st, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	size := one()
	os.Remove(file)
	// Room for two entries and a half.
	o, err := deadletter.New(&sink{errs: []error{perm, perm, perm}}, deadletter.Options{File: file, MaxBytes: size * 5 / 2})
	if err != nil {
		t.Fatal(err)
	}
	o.Write(context.Background(), batch(1))
	o.Close()
	o2, err := deadletter.New(&sink{errs: []error{perm, perm}}, deadletter.Options{File: file, MaxBytes: size * 5 / 2})
	if err != nil {
		t.Fatal(err)
	}
	o2.Write(context.Background(), batch(2))
	o2.Write(context.Background(), batch(3))
	o2.Close()
	n := uint64(batch(0).Len())
	if st := o2.Stats(); st != (deadletter.Stats{Batches: 1, Records: n, Skipped: n}) {
		t.Fatalf("stats %+v", st)
	}
	if _, bs := readAll(t, file); len(bs) != 2 || bs[0].Seq != 1 || bs[1].Seq != 2 {
		t.Fatalf("kept %d batches", len(bs))
	}
	var fields []record.Field
	fields = o2.ReportStats(fields)
	want := []record.Field{record.IntField("dead_letter_batches", 1), record.IntField("dead_letter_records", n),
		record.IntField("dead_letter_skipped", n), record.IntField("dead_letter_errors", 0)}
	if !reflect.DeepEqual(fields, want) {
		t.Fatalf("ReportStats %+v", fields)
	}
}

// A file cut short or corrupted is an error naming the file, the entry and
// its byte offset.
func TestReadErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "x.deadletter")
	o, err := deadletter.New(&sink{errs: []error{record.Permanent(errors.New("bad")), record.Permanent(errors.New("bad"))}},
		deadletter.Options{File: file})
	if err != nil {
		t.Fatal(err)
	}
	o.Write(context.Background(), batch(1))
	o.Write(context.Background(), batch(2))
	o.Close()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	second := bytes.Index(data[1:], []byte(`{"time"`)) + 1
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"truncated payload", data[:len(data)-3], fmt.Sprintf("x: entry 2 at byte %d: payload of", second)},
		{"bad header", append(append([]byte{}, data[:second]...), []byte("garbage\n")...), fmt.Sprintf("x: entry 2 at byte %d: header", second)},
		{"bad payload", append(append(append([]byte{}, data[:second]...), `{"bytes":3}`+"\n"...), 0xff, 0xff, 0xff),
			fmt.Sprintf("x: entry 2 at byte %d: protobuf", second)},
	} {
		n := 0
		err := deadletter.Read(bufio.NewReader(bytes.NewReader(tc.data)), "x", func(*deadletter.Entry) error { n++; return nil })
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || n != 1 {
			t.Errorf("%s: err %v after %d entries, want %q… after 1", tc.name, err, n, tc.want)
		}
	}
}

// A directory that cannot be made fails at New, naming the path.
func TestNewBadDir(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o600)
	if _, err := deadletter.New(&sink{}, deadletter.Options{File: filepath.Join(f, "x.deadletter")}); err == nil || !strings.Contains(err.Error(), f) {
		t.Fatalf("err %v, want one naming %s", err, f)
	}
}

// TestNewRefusesSymlink: a symlink planted under the dead-letter file's name
// (another user, in a directory they may write to) is refused; its target
// is never appended to.
func TestNewRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(target, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "influxdb.deadletter")
	if err := os.Symlink(target, file); err != nil {
		t.Fatal(err)
	}
	if _, err := deadletter.New(&sink{}, deadletter.Options{File: file}); err == nil {
		t.Fatal("a symlink as the dead-letter file was opened")
	}
	if got, _ := os.ReadFile(target); string(got) != "keep\n" {
		t.Fatalf("the symlink's target was changed: %q", got)
	}
}
