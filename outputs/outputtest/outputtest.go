// Package outputtest is a conformance suite that every gpusampler output —
// built in, network or the plugin client — passes: empty batch, large batch,
// write after close, close twice, and no retention of the batch after Write
// returns.
//
// Usage, in an output's tests:
//
//	outputtest.Run(t, outputtest.Harness{
//		New:     func(t *testing.T) sampler.Output { ... },
//		Received: func() []sampler.Sample { ... what the sink got ... },
//	})
package outputtest

import (
	"context"
	"errors"
	"testing"

	"github.com/gpusampler/gpusampler/sampler"
)

// Harness adapts an output to the suite.
type Harness struct {
	// New returns a fresh output for one sub-test.
	New func(t *testing.T) sampler.Output
	// Received returns the samples the sink behind the most recent output
	// has received, decoded back into samples (device, metric, time and
	// value in base units; integer-typed metrics may be rounded). Nil when
	// the sink cannot be observed (then delivery checks are skipped).
	Received func(t *testing.T) []sampler.Sample
	// Flush, when set, is called before Received to let asynchronous sinks
	// settle (e.g. close the output first). Most outputs leave it nil.
	Flush func(t *testing.T, out sampler.Output)
}

// Device is the identity the suite's batches carry.
var Device = sampler.Device{Index: 0, UUID: "GPU-00000000-1111-2222-3333-444444444444", Name: "Test GPU",
	PCIBusID: "00000000:17:00.0", Backend: "test", DriverVersion: "1.0", MemoryTotalMiB: 80 << 10}

// Samples returns n deterministic samples on Device (power draw values,
// distinct timestamps).
func Samples(n int) []sampler.Sample {
	out := make([]sampler.Sample, n)
	for i := range out {
		out[i] = sampler.Sample{TimeNS: 1_700_000_000_000_000_000 + int64(i)*1_000_000, Value: 100 + float64(i%500),
			Device: 0, Metric: sampler.MetricPowerDraw}
	}
	return out
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	ctx := context.Background()
	received := func(t *testing.T, out sampler.Output) []sampler.Sample {
		if h.Received == nil {
			return nil
		}
		if h.Flush != nil {
			h.Flush(t, out)
		}
		return h.Received(t)
	}
	check := func(t *testing.T, got, want []sampler.Sample) {
		t.Helper()
		if h.Received == nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("sink received %d samples, want %d", len(got), len(want))
		}
		for i := range want {
			g, w := got[i], want[i]
			if g.TimeNS != w.TimeNS || g.Metric != w.Metric || g.Device != w.Device || g.Value != w.Value {
				t.Fatalf("sample %d: got %+v, want %+v", i, g, w)
			}
		}
	}

	t.Run("EmptyBatch", func(t *testing.T) {
		out := h.New(t)
		defer out.Close()
		if err := out.Write(ctx, &sampler.Batch{Seq: 1}); err != nil {
			t.Fatalf("Write(empty batch) = %v", err)
		}
	})
	t.Run("LargeBatch", func(t *testing.T) {
		out := h.New(t)
		want := Samples(20000)
		b := &sampler.Batch{Seq: 1, Devices: []sampler.Device{Device}, Samples: want}
		if err := out.Write(ctx, b); err != nil {
			t.Fatalf("Write(20000 samples) = %v", err)
		}
		check(t, received(t, out), want)
		out.Close()
	})
	t.Run("NoRetention", func(t *testing.T) {
		out := h.New(t)
		want := Samples(100)
		b := &sampler.Batch{Seq: 1, Devices: []sampler.Device{Device}, Samples: append([]sampler.Sample(nil), want...),
			Events: []sampler.Event{{Kind: sampler.EventXID, Device: 0, StartNS: want[0].TimeNS, Message: "xid 79",
				Attrs: []sampler.Attr{{Key: "xid", Value: "79"}}}}}
		if err := out.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		// the pump reuses its batch: scribble over everything
		for i := range b.Samples {
			b.Samples[i] = sampler.Sample{TimeNS: -1, Value: -1, Metric: sampler.MetricTempGPU, Device: 9}
		}
		b.Devices[0].UUID = "GPU-scribbled"
		b.Events[0].Attrs[0].Value = "scribbled"
		b.Samples = b.Samples[:0]
		check(t, received(t, out), want)
		out.Close()
	})
	t.Run("WriteAfterClose", func(t *testing.T) {
		out := h.New(t)
		if err := out.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		err := out.Write(ctx, &sampler.Batch{Seq: 1, Samples: Samples(1)})
		if !errors.Is(err, sampler.ErrClosed) {
			t.Fatalf("Write after Close = %v, want sampler.ErrClosed", err)
		}
	})
	t.Run("CloseTwice", func(t *testing.T) {
		out := h.New(t)
		if err := out.Close(); err != nil {
			t.Fatalf("first Close = %v", err)
		}
		if err := out.Close(); err != nil {
			t.Fatalf("second Close = %v, want nil", err)
		}
	})
}
