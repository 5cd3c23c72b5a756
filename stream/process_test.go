package stream_test

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// Process records come back from JSON Lines and line protocol as the
// events they were encoded from, field by field.
func TestDecodeProcessRecords(t *testing.T) {
	dev := record.Device{Index: 1, UUID: "GPU-0001", Name: "Simulated H100", Simulated: true}
	procs := []record.Event{
		{Kind: record.EventProcess, Device: 1, StartNS: 1_700_000_000_000_000_000, EndNS: 1_700_000_000_000_000_000,
			Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 4242, Int: true},
				{Key: record.ProcessFieldUsedMemory, Value: 20480, Int: true},
				{Key: record.ProcessFieldSMUtil, Value: 87, Int: true}, {Key: record.ProcessFieldMemUtil, Value: 41, Int: true},
				{Key: record.ProcessFieldEncUtil, Value: 0, Int: true}, {Key: record.ProcessFieldDecUtil, Value: 3, Int: true}},
			Attrs: []record.Attr{{Key: record.ProcessAttrName, Value: "python3"}, {Key: record.ProcessAttrType, Value: "C"},
				{Key: record.ProcessAttrCmdline, Value: `python3 train.py --name "a b"`}}},
		{Kind: record.EventProcess, Device: 1, StartNS: 1_700_000_001_000_000_000, EndNS: 1_700_000_001_000_000_000,
			Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 7, Int: true}},
			Attrs:  []record.Attr{{Key: record.ProcessAttrName, Value: "pid7"}, {Key: record.ProcessAttrType, Value: "unknown"}}},
	}
	sample := record.Sample{TimeNS: 1_700_000_000_500_000_000, Value: 250.5, Device: 1, Metric: catalog.MetricPowerDraw}
	batch := &record.Batch{Seq: 9, Devices: []record.Device{dev}, Samples: []record.Sample{sample}, Events: procs}

	js := jsonl.New(jsonl.Options{Host: "node1"})
	js.Encode(batch)
	lp := lineproto.New(lineproto.Options{Host: "node1"})
	lp.Encode(batch)
	if err := lp.Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ct   string
		data []byte
	}{{stream.ContentTypeJSON, js.Bytes()}, {stream.ContentTypeLineProtocol, lp.Bytes()}} {
		t.Run(tc.ct, func(t *testing.T) {
			m := nats.NewMsg("gpusampler.node1.1.process")
			m.Header.Set(stream.HeaderContentType, tc.ct)
			m.Header.Set(stream.HeaderSchema, strconv.Itoa(stream.SchemaVersion))
			m.Data = tc.data
			recs, err := stream.DecodeMsg(m)
			if err != nil {
				t.Fatalf("decode %s: %v", tc.data, err)
			}
			if !reflect.DeepEqual(recs.Batch.Events, procs) {
				t.Errorf("process records\n got %+v\nwant %+v\nfrom %s", recs.Batch.Events, procs, tc.data)
			}
			if !reflect.DeepEqual(recs.Batch.Samples, []record.Sample{sample}) {
				t.Errorf("samples %+v, want %+v", recs.Batch.Samples, []record.Sample{sample})
			}
			if recs.Host != "node1" || recs.UUID(1) != "GPU-0001" || len(recs.Tags) != 0 {
				t.Errorf("host %q, uuid %q, tags %v; want node1, GPU-0001 and no tags", recs.Host, recs.UUID(1), recs.Tags)
			}
		})
	}
}

// A device's attribution comes back as its attribution, not as the sender's
// global tags: from line-protocol tags and from JSON's device record.
func TestDecodeAttribution(t *testing.T) {
	att := record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer", HPCJob: "4711"}
	dev := record.Device{Index: 1, UUID: "GPU-0001", Name: "Simulated H100", Attribution: att}
	sample := record.Sample{TimeNS: 1_700_000_000_500_000_000, Value: 250.5, Device: 1, Metric: catalog.MetricPowerDraw}
	batch := &record.Batch{Seq: 3, Devices: []record.Device{dev}, Samples: []record.Sample{sample}}
	lp := lineproto.New(lineproto.Options{Host: "node1", GlobalTags: []lineproto.Tag{{Key: "cluster", Value: "c1"}}})
	lp.Encode(batch)
	js := jsonl.New(jsonl.Options{Host: "node1", GlobalTags: map[string]string{"cluster": "c1"}})
	js.Encode(batch)
	for _, tc := range []struct {
		ct   string
		data []byte
	}{{stream.ContentTypeLineProtocol, lp.Bytes()}, {stream.ContentTypeJSON, js.Bytes()}} {
		t.Run(tc.ct, func(t *testing.T) {
			m := nats.NewMsg("gpusampler.node1.1.power")
			m.Header.Set(stream.HeaderContentType, tc.ct)
			m.Header.Set(stream.HeaderSchema, strconv.Itoa(stream.SchemaVersion))
			m.Data = tc.data
			recs, err := stream.DecodeMsg(m)
			if err != nil {
				t.Fatalf("decode %s: %v", tc.data, err)
			}
			if !reflect.DeepEqual(recs.Tags, map[string]string{"cluster": "c1"}) {
				t.Errorf("global tags %v, want only cluster (from %s)", recs.Tags, tc.data)
			}
			got := recs.Attribution[1]
			for _, d := range recs.Batch.Devices {
				if d.Index == 1 && !d.Attribution.IsZero() {
					got = d.Attribution
				}
			}
			if got != att {
				t.Errorf("attribution %+v, want %+v (from %s)", got, att, tc.data)
			}
		})
	}
}

// A process's own attribution (a shared GPU: its device has none) comes
// back on the process record, after name and type, and not as its device's.
func TestDecodeProcessAttribution(t *testing.T) {
	dev := record.Device{Index: 1, UUID: "GPU-0001", Name: "Simulated H100"}
	proc := record.Event{Kind: record.EventProcess, Device: 1, StartNS: 1_700_000_000_000_000_000, EndNS: 1_700_000_000_000_000_000,
		Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 4242, Int: true}},
		Attrs: []record.Attr{{Key: record.ProcessAttrName, Value: "python3"}, {Key: record.ProcessAttrType, Value: "C"},
			{Key: record.AttrPod, Value: "train-7"}, {Key: record.AttrNamespace, Value: "ml"},
			{Key: record.AttrContainer, Value: "trainer"}, {Key: record.AttrHPCJob, Value: "4711"}}}
	batch := &record.Batch{Seq: 9, Devices: []record.Device{dev}, Events: []record.Event{proc}}
	js := jsonl.New(jsonl.Options{Host: "node1"})
	js.Encode(batch)
	lp := lineproto.New(lineproto.Options{Host: "node1"})
	lp.Encode(batch)
	for _, tc := range []struct {
		ct   string
		data []byte
	}{{stream.ContentTypeJSON, js.Bytes()}, {stream.ContentTypeLineProtocol, lp.Bytes()}} {
		t.Run(tc.ct, func(t *testing.T) {
			m := nats.NewMsg("gpusampler.node1.1.process")
			m.Header.Set(stream.HeaderContentType, tc.ct)
			m.Header.Set(stream.HeaderSchema, strconv.Itoa(stream.SchemaVersion))
			m.Data = tc.data
			recs, err := stream.DecodeMsg(m)
			if err != nil {
				t.Fatalf("decode %s: %v", tc.data, err)
			}
			if !reflect.DeepEqual(recs.Batch.Events, []record.Event{proc}) {
				t.Errorf("process records\n got %+v\nwant %+v\nfrom %s", recs.Batch.Events, []record.Event{proc}, tc.data)
			}
			for _, d := range recs.Batch.Devices {
				if !d.Attribution.IsZero() {
					t.Errorf("device %d attribution %+v, want none", d.Index, d.Attribution)
				}
			}
			if a, ok := recs.Attribution[1]; ok {
				t.Errorf("device 1 attribution %+v, want none", a)
			}
		})
	}
}
