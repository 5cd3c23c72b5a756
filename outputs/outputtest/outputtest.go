// Package outputtest is a conformance suite that every gpusampler output —
// built in, network or the plugin client — passes: empty batch, large batch,
// every record kind in one batch (devices with every identity field, samples,
// summaries, events with fields, process and self records), write after
// close, close twice, and no retention of the batch after Write returns.
//
// Usage, in an output's tests:
//
//	outputtest.Run(t, outputtest.Harness{
//		New:     func(t *testing.T) record.Output { ... },
//		Received: func() []record.Sample { ... what the sink got ... },
//	})
package outputtest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Harness adapts an output to the suite.
type Harness struct {
	// New returns a fresh output for one sub-test.
	New func(t *testing.T) record.Output
	// Received returns the samples the sink behind the most recent output
	// has received, decoded back into samples (device, metric, time and
	// value in base units; integer-typed metrics may be rounded). Nil when
	// the sink cannot be observed (then delivery checks are skipped).
	Received func(t *testing.T) []record.Sample
	// Flush, when set, is called before Received to let asynchronous sinks
	// settle (e.g. close the output first). Most outputs leave it nil.
	Flush func(t *testing.T, out record.Output)
	// Records, when set, returns every record the sink behind the most
	// recent output has received, of every kind, decoded whole: the suite
	// then compares devices, samples, summaries and events field by field
	// with what it wrote (AllKinds). Outputs whose sink keeps every field
	// (the plugin protocol, a recording sink) set it; outputs that encode
	// a lossy wire format leave it nil.
	Records func(t *testing.T) *record.Batch
}

// MIGDevice is a MIG instance on Device, every identity field filled.
var MIGDevice = record.Device{Index: 1, UUID: "MIG-00000000-1111-2222-3333-555555555555", Name: "Test GPU MIG 1g.10gb",
	PCIBusID: "00000000:17:00.0", Serial: "1650000000001", Backend: "test", DriverVersion: "1.0", MemoryTotalMiB: 10 << 10,
	Simulated: true, SlowdownTempC: 87, ShutdownTempC: 92, MaxOperatingTempC: 85, MemoryMaxTempC: 95,
	MIG: true, Parent: 0, GPUInstanceID: 3, ComputeInstanceID: 1, MIGProfile: "1g.10gb",
	PersistenceMode: record.ModeEnabled, ECCMode: record.ModeDisabled, MIGMode: record.ModeUnsupported, Generation: 2}

// AllKinds returns a batch holding every record kind: Device and
// MIGDevice, samples on both, summaries, an XID event with attributes, a
// process record and a self-metrics record with fields.
func AllKinds() *record.Batch {
	t0 := int64(1_700_000_000_000_000_000)
	dev := Device
	dev.Serial, dev.Simulated = "1650000000000", true
	dev.SlowdownTempC, dev.ShutdownTempC, dev.MaxOperatingTempC, dev.MemoryMaxTempC = 87, 92, 85, 95
	dev.PersistenceMode, dev.ECCMode, dev.MIGMode = record.ModeEnabled, record.ModeEnabled, record.ModeEnabled
	dev.Generation = 1
	b := &record.Batch{Seq: 7, Devices: []record.Device{dev, MIGDevice}}
	for i := range 4 {
		ts := t0 + int64(i)*100_000_000
		b.Samples = append(b.Samples,
			record.Sample{TimeNS: ts, Value: 250.5 + float64(i), Device: 0, Metric: catalog.MetricPowerDraw},
			record.Sample{TimeNS: ts, Value: float64(40 + i), Device: 1, Metric: catalog.MetricUtilGPU})
	}
	b.Summaries = []record.Summary{
		{StartNS: t0, IntervalNS: 1e9, Mean: 251.25, Min: 250.5, Max: 252.5, Last: 252.5, Count: 3, Device: 0, Metric: catalog.MetricPowerDraw},
		{StartNS: t0, IntervalNS: 1e9, Mean: 41, Min: 40, Max: 42, Last: 42, Count: 3, Device: 1, Metric: catalog.MetricUtilGPU},
	}
	b.Events = []record.Event{
		{Kind: record.EventXID, Device: 0, StartNS: t0, EndNS: t0, Message: "xid 79: GPU has fallen off the bus",
			Attrs: []record.Attr{{Key: "xid", Value: "79"}}},
		{Kind: record.EventProcess, Device: 0, StartNS: t0 + 1, EndNS: t0 + 1,
			Attrs: []record.Attr{{Key: record.ProcessAttrName, Value: "python3"}, {Key: record.ProcessAttrType, Value: "C"},
				{Key: record.ProcessAttrCmdline, Value: "python3 train.py"}},
			Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 1234, Int: true},
				{Key: record.ProcessFieldUsedMemory, Value: 70000, Int: true}, {Key: record.ProcessFieldSMUtil, Value: 87, Int: true},
				{Key: record.ProcessFieldMemUtil, Value: 41, Int: true}, {Key: record.ProcessFieldEncUtil, Value: 0, Int: true},
				{Key: record.ProcessFieldDecUtil, Value: 2, Int: true}}},
		{Kind: record.EventSelf, Device: -1, StartNS: t0 + 2, EndNS: t0 + 2,
			Attrs:  []record.Attr{{Key: "scope", Value: "output"}, {Key: "output", Value: "test"}},
			Fields: []record.Field{{Key: "published", Value: 8, Int: true}, {Key: "write_latency_ratio", Value: 0.25}}},
	}
	return b
}

// cloneBatch deep-copies b.
func cloneBatch(b *record.Batch) *record.Batch {
	c := *b
	c.Devices = slices.Clone(b.Devices)
	c.Samples = slices.Clone(b.Samples)
	c.Summaries = slices.Clone(b.Summaries)
	c.Events = make([]record.Event, len(b.Events))
	for i, e := range b.Events {
		c.Events[i] = e.Clone()
	}
	return &c
}

// checkRecords compares got with want, kind by kind, record by record.
func checkRecords(t *testing.T, got, want *record.Batch) {
	t.Helper()
	if !slices.Equal(got.Devices, want.Devices) {
		t.Errorf("devices:\n got %+v\nwant %+v", got.Devices, want.Devices)
	}
	if !slices.Equal(got.Samples, want.Samples) {
		t.Errorf("samples:\n got %+v\nwant %+v", got.Samples, want.Samples)
	}
	if !slices.Equal(got.Summaries, want.Summaries) {
		t.Errorf("summaries:\n got %+v\nwant %+v", got.Summaries, want.Summaries)
	}
	if len(got.Events) != len(want.Events) {
		t.Errorf("events: got %d, want %d:\n got %+v\nwant %+v", len(got.Events), len(want.Events), got.Events, want.Events)
		return
	}
	for i, w := range want.Events {
		g := got.Events[i]
		if g.Kind != w.Kind || g.Device != w.Device || g.StartNS != w.StartNS || g.EndNS != w.EndNS || g.Message != w.Message ||
			!slices.Equal(g.Attrs, w.Attrs) || !slices.Equal(g.Fields, w.Fields) {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// Device is the identity the suite's batches carry.
var Device = record.Device{Index: 0, UUID: "GPU-00000000-1111-2222-3333-444444444444", Name: "Test GPU",
	PCIBusID: "00000000:17:00.0", Backend: "test", DriverVersion: "1.0", MemoryTotalMiB: 80 << 10}

// Samples returns n deterministic samples on Device (power draw values,
// distinct timestamps).
func Samples(n int) []record.Sample {
	out := make([]record.Sample, n)
	for i := range out {
		out[i] = record.Sample{TimeNS: 1_700_000_000_000_000_000 + int64(i)*1_000_000, Value: 100 + float64(i%500),
			Device: 0, Metric: catalog.MetricPowerDraw}
	}
	return out
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	ctx := context.Background()
	received := func(t *testing.T, out record.Output) []record.Sample {
		if h.Received == nil {
			return nil
		}
		if h.Flush != nil {
			h.Flush(t, out)
		}
		return h.Received(t)
	}
	check := func(t *testing.T, got, want []record.Sample) {
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
		if err := out.Write(ctx, &record.Batch{Seq: 1}); err != nil {
			t.Fatalf("Write(empty batch) = %v", err)
		}
	})
	t.Run("LargeBatch", func(t *testing.T) {
		out := h.New(t)
		want := Samples(20000)
		b := &record.Batch{Seq: 1, Devices: []record.Device{Device}, Samples: want}
		if err := out.Write(ctx, b); err != nil {
			t.Fatalf("Write(20000 samples) = %v", err)
		}
		check(t, received(t, out), want)
		out.Close()
	})
	t.Run("NoRetention", func(t *testing.T) {
		out := h.New(t)
		want := Samples(100)
		b := &record.Batch{Seq: 1, Devices: []record.Device{Device}, Samples: append([]record.Sample(nil), want...),
			Events: []record.Event{{Kind: record.EventXID, Device: 0, StartNS: want[0].TimeNS, Message: "xid 79",
				Attrs: []record.Attr{{Key: "xid", Value: "79"}}}}}
		if err := out.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		// the pump reuses its batch: scribble over everything
		for i := range b.Samples {
			b.Samples[i] = record.Sample{TimeNS: -1, Value: -1, Metric: catalog.MetricTempGPU, Device: 9}
		}
		b.Devices[0].UUID = "GPU-scribbled"
		b.Events[0].Attrs[0].Value = "scribbled"
		b.Samples = b.Samples[:0]
		check(t, received(t, out), want)
		out.Close()
	})
	t.Run("EveryRecordKind", func(t *testing.T) {
		out := h.New(t)
		want := AllKinds()
		b := cloneBatch(want)
		if err := out.Write(ctx, b); err != nil {
			t.Fatalf("Write(a batch of every record kind) = %v", err)
		}
		// the pump reuses its batch: scribble over every kind
		for i := range b.Samples {
			b.Samples[i].Value = -1
		}
		b.Devices[1].MIGProfile = "scribbled"
		b.Summaries[0].Mean = -1
		b.Events[1].Fields[0].Value = -1
		b.Events[2].Attrs[0].Value = "scribbled"
		var onDevice0 []record.Sample
		for _, s := range want.Samples {
			if s.Device == 0 {
				onDevice0 = append(onDevice0, s)
			}
		}
		if h.Records != nil {
			if h.Flush != nil {
				h.Flush(t, out)
			}
			checkRecords(t, h.Records(t), want)
		} else if got := received(t, out); h.Received != nil {
			// Samples must arrive intact beside the other kinds; a
			// harness may observe only some devices' samples.
			var mine []record.Sample
			for _, s := range got {
				if s.Device == 0 {
					mine = append(mine, s)
				}
			}
			check(t, mine, onDevice0)
		}
		out.Close()
	})
	t.Run("WriteAfterClose", func(t *testing.T) {
		out := h.New(t)
		if err := out.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		err := out.Write(ctx, &record.Batch{Seq: 1, Samples: Samples(1)})
		if !errors.Is(err, record.ErrClosed) {
			t.Fatalf("Write after Close = %v, want record.ErrClosed", err)
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
