package aggregate_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/record"
)

// offer is one Write the inner output saw: its Seq and a copy of its
// records.
type offer struct {
	seq    uint64
	sums   []record.Summary
	devs   []record.Device
	events []record.Event
}

// offers records every Write, and answers it with errs (one per Write, in
// order; nil once they run out).
type offers struct {
	got  []offer
	errs []error
}

func (o *offers) Write(_ context.Context, b *record.Batch) error {
	of := offer{seq: b.Seq, sums: slices.Clone(b.Summaries), devs: slices.Clone(b.Devices)}
	for _, e := range b.Events {
		of.events = append(of.events, e.Clone())
	}
	o.got = append(o.got, of)
	if len(o.errs) > 0 {
		err := o.errs[0]
		o.errs = o.errs[1:]
		return err
	}
	return nil
}

func (o *offers) Close() error { return nil }

func powerSample(ts int64) record.Sample {
	return record.Sample{TimeNS: ts, Value: float64(ts), Metric: catalog.MetricPowerDraw}
}

func window(start int64) record.Summary {
	return record.Summary{StartNS: start, IntervalNS: 1e9, Mean: float64(start + 1e8), Min: float64(start + 1e8),
		Max: float64(start + 1e8), Last: float64(start + 1e8), Count: 1, Metric: catalog.MetricPowerDraw}
}

// reofferScene writes a batch with a device, an event, two windows that
// close at once and one that closes only later, then moves the clock on
// (closing the third window) and offers the batch again, as a pump does
// after a refusal.
func reofferScene(t *testing.T, inner *offers, journal string) (*aggregate.Output, []error) {
	t.Helper()
	now := time.Unix(100, 0)
	o, err := aggregate.New(inner, aggregate.Options{Interval: time.Second, MaxDelay: time.Second, Journal: journal,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first := &record.Batch{Seq: 1, Samples: []record.Sample{powerSample(1e8), powerSample(11e8), powerSample(99e9 + 1e8)},
		Devices: []record.Device{{Index: 0, UUID: "GPU-a"}}, Events: []record.Event{{Kind: record.EventXID, Message: "xid 79"}}}
	var errs []error
	errs = append(errs, o.Write(ctx, first))
	now = time.Unix(102, 0) // window [99 s, 100 s) closes by the clock
	errs = append(errs, o.Write(ctx, first))
	return o, errs
}

// A batch the inner output refused (unavailable) is offered again exactly
// as it was: the same Seq and the same records, so that an output that
// took part of it (JetStream's Nats-Msg-Id, the OpenTelemetry parts
// resumed by Seq) does not hand that part on twice. The window that closed
// meanwhile follows in the next batch, with the pump's next batch's
// records; every summary is counted once.
func TestRefusedBatchOfferedAgainUnchanged(t *testing.T) {
	inner := &offers{errs: []error{record.Unavailable(errors.New("nats: timeout"))}}
	o, errs := reofferScene(t, inner, "")
	next := &record.Batch{Seq: 2, Events: []record.Event{{Kind: record.EventXID, Message: "xid 48"}}}
	errs = append(errs, o.Write(context.Background(), next))
	if !errors.Is(errs[0], record.ErrUnavailable) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("write errors %v, want unavailable, nil, nil", errs)
	}
	want := []offer{
		{seq: 1, sums: []record.Summary{window(0), window(1e9)}, devs: []record.Device{{Index: 0, UUID: "GPU-a"}},
			events: []record.Event{{Kind: record.EventXID, Message: "xid 79"}}},
		{seq: 1, sums: []record.Summary{window(0), window(1e9)}, devs: []record.Device{{Index: 0, UUID: "GPU-a"}},
			events: []record.Event{{Kind: record.EventXID, Message: "xid 79"}}},
		{seq: 2, sums: []record.Summary{window(99e9)}, events: []record.Event{{Kind: record.EventXID, Message: "xid 48"}}},
	}
	checkOffers(t, inner.got, want)
	if st := o.Stats(); st.Emitted != 3 || st.Dropped != 0 || st.EventsDropped != 0 {
		t.Fatalf("stats %+v, want 3 emitted, none dropped", st)
	}
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	if len(inner.got) != 3 {
		t.Fatalf("close offered %d more batches, want none", len(inner.got)-3)
	}
}

// A kept batch refused for good when offered again is dropped and counted
// as before (summaries and events, once); the window closed meanwhile goes
// on in the next batch. Retryable refusals count in all, across
// unavailable ones, as the pump counts them.
func TestRefusedBatchDroppedWhenRefusedForGood(t *testing.T) {
	refused := errors.New("400: field type conflict")
	for _, tc := range []struct {
		name string
		errs []error
	}{
		{"permanent", []error{record.Unavailable(refused), record.Permanent(refused)}},
		{"retryable in all", []error{refused, record.Unavailable(refused), refused, refused}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &offers{errs: slices.Clone(tc.errs)}
			now := time.Unix(100, 0)
			o, err := aggregate.New(inner, aggregate.Options{Interval: time.Second, MaxDelay: time.Second,
				Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			first := &record.Batch{Seq: 1, Samples: []record.Sample{powerSample(1e8), powerSample(11e8), powerSample(99e9 + 1e8)},
				Events: []record.Event{{Kind: record.EventXID, Message: "xid 79"}}}
			for i := range tc.errs {
				if i == 1 {
					now = time.Unix(102, 0)
				}
				err := o.Write(ctx, first)
				if i == len(tc.errs)-1 {
					if err != nil {
						t.Fatalf("offer %d: %v, want nil (dropped and counted here)", i+1, err)
					}
				} else if err == nil {
					t.Fatalf("offer %d: nil, want the refusal", i+1)
				}
			}
			for i, of := range inner.got {
				if of.seq != 1 || !slices.Equal(of.sums, []record.Summary{window(0), window(1e9)}) || len(of.events) != 1 {
					t.Fatalf("offer %d: seq %d summaries %+v events %d, want the first batch unchanged", i+1, of.seq, of.sums, len(of.events))
				}
			}
			if err := o.Write(ctx, &record.Batch{Seq: 2}); err != nil {
				t.Fatal(err)
			}
			last := inner.got[len(inner.got)-1]
			if last.seq != 2 || !slices.Equal(last.sums, []record.Summary{window(99e9)}) {
				t.Fatalf("next batch seq %d %+v, want seq 2 with the window closed meanwhile", last.seq, last.sums)
			}
			if st := o.Stats(); st.Emitted != 1 || st.Dropped != 2 || st.EventsDropped != 1 {
				t.Fatalf("stats %+v, want 1 emitted, 2 dropped, 1 event dropped", st)
			}
		})
	}
}

// A kept batch and the windows closed while it waited survive a crash:
// the journal keeps both, a wrapper built after the crash hands on the
// kept batch unless the output took it (LastAppended), and the closed
// windows in any case, each once.
func TestKeptBatchAndClosedSurviveCrash(t *testing.T) {
	for _, tc := range []struct {
		name     string
		appended bool
		want     []record.Summary
	}{
		{"kept batch not taken", false, []record.Summary{window(0), window(1e9), window(99e9)}},
		{"kept batch taken", true, []record.Summary{window(99e9)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			journal := filepath.Join(t.TempDir(), "agg.journal")
			down := record.Unavailable(errors.New("disk full"))
			inner := &offers{errs: []error{down, down}}
			reofferScene(t, inner, journal) // then the process is killed: no Close
			after := &offers{}
			o, err := aggregate.New(after, aggregate.Options{Interval: time.Second, MaxDelay: time.Second, Journal: journal,
				Now:          func() time.Time { return time.Unix(102, 0) },
				LastAppended: func() (uint64, bool) { return 1, tc.appended }})
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Close(); err != nil {
				t.Fatal(err)
			}
			var got []record.Summary
			for _, of := range after.got {
				if of.seq <= 1 {
					t.Fatalf("batch after the crash has seq %d, want past the journal's 1", of.seq)
				}
				got = append(got, of.sums...)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("handed on after the crash %+v\nwant %+v", got, tc.want)
			}
			if st := o.Stats(); st.Recovered != uint64(len(tc.want)) || st.Emitted != uint64(len(tc.want)) {
				t.Fatalf("stats %+v, want %d recovered and emitted", st, len(tc.want))
			}
		})
	}
}

// A stopping pump counts the events of the batch it held as dropped: a
// kept batch that carries them is not offered again at Finish, its
// summaries go on in a new batch without them.
func TestKeptEventsLeftToStoppingPump(t *testing.T) {
	inner := &offers{errs: []error{record.Unavailable(errors.New("down"))}}
	now := time.Unix(100, 0)
	o, err := aggregate.New(inner, aggregate.Options{Interval: time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := &record.Batch{Seq: 1, Samples: []record.Sample{powerSample(1e8)}, Events: []record.Event{{Kind: record.EventXID}}}
	if err := o.Write(ctx, b); err == nil {
		t.Fatal("want the refusal")
	}
	if err := o.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	last := inner.got[len(inner.got)-1]
	if last.seq != 2 || !slices.Equal(last.sums, []record.Summary{window(0)}) || len(last.events) != 0 {
		t.Fatalf("finish offered seq %d %+v events %d, want seq 2 with the summary and no event", last.seq, last.sums, len(last.events))
	}
	if st := o.Stats(); st.Emitted != 1 || st.Dropped != 0 || st.EventsDropped != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func checkOffers(t *testing.T, got, want []offer) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d offers %+v\nwant %d %+v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.seq != w.seq || !slices.Equal(g.sums, w.sums) || !slices.Equal(g.devs, w.devs) ||
			!slices.EqualFunc(g.events, w.events, func(a, b record.Event) bool { return a.Kind == b.Kind && a.Message == b.Message }) {
			t.Fatalf("offer %d: %+v\nwant     %+v", i+1, g, w)
		}
	}
}
