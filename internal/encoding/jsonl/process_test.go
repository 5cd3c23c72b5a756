package jsonl

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gpusampler/gpusampler/record"
)

func TestEncodeProcess(t *testing.T) {
	e := New(Options{Host: "node1"})
	e.Encode(&record.Batch{
		Devices: []record.Device{{Index: 1, UUID: "GPU-1", Simulated: true}},
		Events: []record.Event{{Kind: record.EventProcess, Device: 1, StartNS: 5, EndNS: 5,
			Fields: []record.Field{{Key: "pid", Value: 4242, Int: true}, {Key: "used_memory_mib", Value: 97000, Int: true}, {Key: "sm_util", Value: 98, Int: true}},
			Attrs:  []record.Attr{{Key: "name", Value: "python3"}, {Key: "type", Value: "C"}}}},
	})
	lines := bytes.Split(bytes.TrimSpace(e.Bytes()), []byte("\n"))
	want := `{"type":"process","time":5,"host":"node1","gpu":1,"uuid":"GPU-1","pid":4242,"used_memory_mib":97000,"sm_util":98,"name":"python3","process_type":"C","simulated":true}`
	if got := string(lines[len(lines)-1]); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if !json.Valid(lines[len(lines)-1]) {
		t.Fatal("invalid JSON")
	}
}
