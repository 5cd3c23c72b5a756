package lineproto

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// refEncode is Encode with the sample lines written tag by tag and field by
// field through the lineprotocol encoder: what encodeLine's fast path
// must match byte for byte.
func (e *Encoder) refEncode(b *record.Batch) {
	for _, d := range b.Devices {
		e.SetDevice(d)
	}
	s := b.Samples
	for i := 0; i < len(s); {
		j := i + 1
		for j < len(s) && s[j].Device == s[i].Device && s[j].TimeNS == s[i].TimeNS && s[j].Flags == s[i].Flags {
			j++
		}
		e.refLine(s[i:j])
		i = j
	}
	for i := range b.Summaries {
		e.encodeSummaryLine(b.Summaries[i : i+1])
	}
	for _, ev := range b.Events {
		e.encodeEvent(ev)
	}
}

func (e *Encoder) refLine(run []record.Sample) {
	dt := e.device(int(run[0].Device))
	for _, s := range run {
		if s.Metric == catalog.MetricPState && int(s.Value) != dt.pstate {
			dt.pstate = int(s.Value)
			e.rebuildTags(dt)
		}
	}
	fields := 0
	for _, s := range run {
		if s.Metric != catalog.MetricPState {
			fields++
		}
	}
	if fields == 0 {
		return
	}
	e.enc.StartLine(Measurement)
	for _, t := range dt.tags {
		e.enc.AddTag(t.Key, t.Value)
	}
	for _, s := range run {
		m, ok := e.opts.Catalog.Get(s.Metric)
		if !ok || s.Metric == catalog.MetricPState {
			continue
		}
		if v, ok := FieldValue(m.Influx(), s.Value); ok {
			e.enc.AddField(m.Influx().Name, v)
		}
	}
	if run[0].Flags&record.FlagPointRead != 0 {
		e.enc.AddField("point_read", lineprotocol.BoolValue(true))
	}
	e.enc.EndLine(time.Unix(0, run[0].TimeNS))
}

func TestFastPathMatchesEncoder(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	devs := []record.Device{
		{Index: 0, UUID: "GPU-a", Name: "NVIDIA H200", PCIBusID: "00000000:07:00.0"},
		{Index: 1, UUID: "GPU-b", Name: "Tesla V100, PCIe=16 GB", Simulated: true}, // escapes
	}
	var samples []record.Sample
	for i := range 50 {
		ts := t0 + int64(i)*1e8 + int64(i%7)
		for d := range uint16(3) { // device 2 is not in Devices
			var fl record.Flags
			if i%5 == 0 {
				fl = record.FlagPointRead
			}
			samples = append(samples,
				record.Sample{TimeNS: ts, Value: 100.25 + float64(i), Metric: catalog.MetricPowerDraw, Device: d, Flags: fl},
				record.Sample{TimeNS: ts, Value: float64(i % 101), Metric: catalog.MetricUtilGPU, Device: d, Flags: fl},
				record.Sample{TimeNS: ts, Value: -float64(i) * 1e-9, Metric: catalog.MetricTempGPU, Device: d, Flags: fl},
				record.Sample{TimeNS: ts, Value: float64(i/10) * 1e9, Metric: catalog.MetricClockSM, Device: d, Flags: fl},
				record.Sample{TimeNS: ts, Value: float64(i / 20), Metric: catalog.MetricPState, Device: d, Flags: fl})
		}
		switch i % 10 {
		case 3: // NaN and Inf fields are dropped, the line stays
			samples = append(samples,
				record.Sample{TimeNS: ts + 1, Value: math.NaN(), Metric: catalog.MetricPowerDraw},
				record.Sample{TimeNS: ts + 1, Value: 7, Metric: catalog.MetricUtilGPU},
				record.Sample{TimeNS: ts + 1, Value: math.Inf(1), Metric: catalog.MetricPowerDraw})
		case 4: // only pstate: no line; unknown metric only: no field
			samples = append(samples,
				record.Sample{TimeNS: ts + 2, Value: 3, Metric: catalog.MetricPState},
				record.Sample{TimeNS: ts + 3, Value: 1, Metric: 60000},
				record.Sample{TimeNS: ts + 3, Value: 2, Metric: catalog.MetricUtilGPU})
		case 5: // a point read with only a NaN field
			samples = append(samples, record.Sample{TimeNS: ts + 4, Value: math.NaN(), Metric: catalog.MetricPowerDraw, Flags: record.FlagPointRead})
		}
	}
	batch := &record.Batch{Devices: devs, Samples: samples,
		Summaries: []record.Summary{{StartNS: t0, IntervalNS: 1e9, Mean: 2, Min: 1, Max: 3, Last: 2, Count: 10, Metric: catalog.MetricUtilGPU}},
		Events:    []record.Event{{Kind: record.EventXID, Device: 1, StartNS: t0, Message: "xid 79"}}}
	noField := &record.Batch{Samples: []record.Sample{ // every field NaN: the line is dropped with an error
		{TimeNS: t0, Value: math.NaN(), Metric: catalog.MetricPowerDraw},
		{TimeNS: t0 + 1, Value: 1, Metric: catalog.MetricPowerDraw}}}
	badTag := &record.Batch{Devices: []record.Device{{Index: 3, Name: "bad\nname"}}, Samples: []record.Sample{
		{TimeNS: t0, Value: 1, Metric: catalog.MetricUtilGPU, Device: 3},
		{TimeNS: t0, Value: 1, Metric: catalog.MetricUtilGPU, Device: 0}}}

	opts := Options{Host: "node 1", GlobalTags: []Tag{{Key: "cluster", Value: "c=1"}, {Key: "zone", Value: "a"}}}
	for _, tc := range []struct {
		name    string
		batches []*record.Batch
		wantErr string
	}{
		{"mixed", []*record.Batch{batch, batch}, ""},
		{"no field", []*record.Batch{batch, noField, batch}, "at least one field"},
		{"bad tag", []*record.Batch{batch, badTag, batch}, "invalid tag value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fast, ref := New(opts), New(opts)
			for _, b := range tc.batches {
				fast.Encode(b)
				ref.refEncode(b)
			}
			// the lineprotocol encoder leaves an empty line after a line it
			// dropped for want of a field; the fast path does not
			want := bytes.ReplaceAll(ref.Bytes(), []byte("\n\n"), []byte("\n"))
			if got := fast.Bytes(); !bytes.Equal(got, want) {
				gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
				for i := range min(len(gl), len(wl)) {
					if gl[i] != wl[i] {
						t.Fatalf("line %d:\n got %s\nwant %s", i, gl[i], wl[i])
					}
				}
				t.Fatalf("%d lines, want %d", len(gl), len(wl))
			}
			ferr, rerr := fast.Err(), ref.Err()
			if (ferr == nil) != (tc.wantErr == "") || (rerr == nil) != (tc.wantErr == "") ||
				ferr != nil && (!strings.Contains(ferr.Error(), tc.wantErr) || !strings.Contains(rerr.Error(), tc.wantErr)) {
				t.Fatalf("errors: fast %v, reference %v; want %q", ferr, rerr, tc.wantErr)
			}
			fast.Reset()
			if fast.Err() != nil || len(fast.Bytes()) != 0 {
				t.Fatal("Reset kept an error or bytes")
			}
		})
	}
}

// TestLibraryErrorKept: an error of a line the lineprotocol encoder wrote
// survives the fast path's resync of its buffer.
func TestLibraryErrorKept(t *testing.T) {
	e := New(Options{})
	e.Encode(&record.Batch{Events: []record.Event{{Kind: record.EventSelf, StartNS: 1,
		Fields: []record.Field{{Key: "bad\nkey", Value: 1}}}}})
	e.Encode(&record.Batch{Samples: []record.Sample{{TimeNS: 2, Value: 1, Metric: catalog.MetricUtilGPU}}})
	if e.Err() == nil || !strings.Contains(e.Err().Error(), "bad\\nkey") {
		t.Fatalf("err %v, want the self line's", e.Err())
	}
	if got, want := string(e.Bytes()), "nvidia_smi,index=0 utilization_gpu=1i 2\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
