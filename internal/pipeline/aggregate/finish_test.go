package aggregate_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/record"
)

// finishing is a collect that is a record.Finisher: it notes the
// summaries it held at each Finish.
type finishing struct {
	collect
	finishes []int
}

func (f *finishing) Finish(context.Context) error {
	f.finishes = append(f.finishes, len(f.sums))
	return nil
}

// Finish (at shutdown, after the pump's final flush) emits every open
// window, counted in Emitted, then finishes the inner output: the final
// statistics count the summaries. Close emits nothing more; a sample
// after Finish for a window it emitted is late.
func TestFinishEmitsOpenWindows(t *testing.T) {
	inner := &finishing{}
	agg, _ := aggregate.New(inner, aggregate.Options{Interval: time.Second, Now: func() time.Time { return time.Unix(0, 0) }})
	ctx := context.Background()
	_ = agg.Write(ctx, &record.Batch{Seq: 1, Samples: []record.Sample{{TimeNS: 5e8, Value: 1}, {TimeNS: 15e8, Value: 2},
		{TimeNS: 5e8, Value: 3, Metric: 2}}})
	if len(inner.sums) != 1 { // the window [0,1s) of metric 0 closed by its next sample
		t.Fatalf("before Finish: summaries %+v, want 1", inner.sums)
	}
	if err := agg.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if len(inner.sums) != 3 || agg.Stats().Emitted != 3 {
		t.Fatalf("after Finish: summaries %+v, emitted %d; want 3 (every open window)", inner.sums, agg.Stats().Emitted)
	}
	if len(inner.finishes) != 1 || inner.finishes[0] != 3 {
		t.Errorf("inner finished %v (summaries it held each time), want once, after all 3", inner.finishes)
	}
	_ = agg.Write(ctx, &record.Batch{Seq: 2, Samples: []record.Sample{{TimeNS: 16e8, Value: 9}},
		Events: []record.Event{{Kind: record.EventSelf, Message: "final"}}})
	if err := agg.Close(); err != nil {
		t.Fatal(err)
	}
	if st := agg.Stats(); st.Late != 1 || st.Emitted != 3 || len(inner.sums) != 3 || len(inner.events) != 1 {
		t.Errorf("after Close: %+v, %d summaries, %d events; want the late sample counted, nothing more emitted, the event passed",
			st, len(inner.sums), len(inner.events))
	}
}
