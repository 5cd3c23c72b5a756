package conservation_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/record"
)

// TestTail checks that a tail sees every complete line once, whatever the
// split of the writes, and skips a line that does not parse.
func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.jsonl")
	e := &env{t: t}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line := func(state, marker string, self bool) []byte {
		b := conservation.Batch{State: state, Seq: 1}
		if marker != "" {
			b.Events = append(b.Events, record.Event{Kind: "matrix_marker", Message: marker})
		}
		if self {
			b.Events = append(b.Events, record.Event{Kind: record.EventSelf})
		}
		data, _ := json.Marshal(b)
		return append(data, '\n')
	}
	write := func(p []byte) {
		if _, err := f.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	type seen struct {
		ok, down int
		m1, m2   bool
		self     bool
	}
	check := func(want seen) {
		t.Helper()
		tl := e.follow(path)
		got := seen{tl.states[conservation.StateOK], tl.states[conservation.StateDown], tl.markers["m1"], tl.markers["m2"], tl.self}
		if got != want {
			t.Fatalf("tail saw %+v, want %+v", got, want)
		}
	}
	check(seen{})
	write(line(conservation.StateDown, "m1", true)) // not ok: its marker does not count
	check(seen{down: 1})
	l := line(conservation.StateOK, "m1", false)
	write(l[:10]) // a partial line waits for its end
	check(seen{down: 1})
	write(l[10:])
	check(seen{ok: 1, down: 1, m1: true})
	write([]byte("{torn\n"))
	write(line(conservation.StateOK, "m2", true))
	check(seen{ok: 2, down: 1, m1: true, m2: true, self: true})
	check(seen{ok: 2, down: 1, m1: true, m2: true, self: true}) // nothing new: nothing counted again
}

// BenchmarkSettlePoll is one settle poll of a record file of 5,000
// batches that one more batch was appended to: reading the whole file
// (ReadFile, as before) against the tail reading what was appended.
func BenchmarkSettlePoll(b *testing.B) {
	ev := record.Event{Kind: record.EventSelf, Device: -1, Attrs: []record.Attr{{Key: "scope", Value: "buffer"}},
		Fields: []record.Field{{Key: "buffered_records", Value: 45, Int: true}, {Key: "delivered_batches", Value: 124, Int: true}}}
	data, _ := json.Marshal(conservation.Batch{State: conservation.StateOK, Seq: 7, Events: []record.Event{ev, ev, ev, ev}})
	data = append(data, '\n')
	setup := func(b *testing.B) (string, *os.File) {
		path := filepath.Join(b.TempDir(), "x.jsonl")
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		for range 5000 {
			f.Write(data)
		}
		return path, f
	}
	b.Run("readfile", func(b *testing.B) {
		path, f := setup(b)
		defer f.Close()
		for b.Loop() {
			f.Write(data)
			bs, _, err := conservation.ReadFile(path)
			if err != nil || len(bs) == 0 {
				b.Fatal(err)
			}
		}
	})
	b.Run("tail", func(b *testing.B) {
		path, f := setup(b)
		defer f.Close()
		e := &env{}
		e.follow(path)
		for b.Loop() {
			f.Write(data)
			if e.follow(path).states[conservation.StateOK] == 0 {
				b.Fatal("nothing read")
			}
		}
	})
}
