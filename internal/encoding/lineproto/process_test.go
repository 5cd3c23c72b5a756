package lineproto

import (
	"testing"

	"github.com/gpusampler/gpusampler/record"
)

func processBatch() *record.Batch {
	return &record.Batch{
		Devices: []record.Device{{Index: 1, UUID: "GPU-1", Name: "NVIDIA H200"}},
		Events: []record.Event{{Kind: record.EventProcess, Device: 1, StartNS: 1e18, EndNS: 1e18,
			Fields: []record.Field{{Key: "pid", Value: 4242, Int: true}, {Key: "used_memory_mib", Value: 97000, Int: true}, {Key: "sm_util", Value: 98, Int: true},
				{Key: "mem_util", Value: 45, Int: true}, {Key: "enc_util", Value: 0, Int: true}, {Key: "dec_util", Value: 0, Int: true}},
			Attrs: []record.Attr{{Key: "name", Value: "python3"}, {Key: "type", Value: "C"}, {Key: "cmdline", Value: "python3 train.py"}}}},
	}
}

func TestEncodeProcess(t *testing.T) {
	e := New(Options{Host: "node1", GlobalTags: []Tag{{Key: "dc", Value: "eu"}}})
	e.Encode(processBatch())
	want := `nvidia_smi_process,dc=eu,host=node1,index=1,name=python3,type=C,uuid=GPU-1 pid=4242i,used_memory=97000i,sm_util=98i,mem_util=45i,enc_util=0i,dec_util=0i,cmdline="python3 train.py" 1000000000000000000` + "\n"
	if got := string(e.Bytes()); got != want || e.Err() != nil {
		t.Fatalf("got  %q (err %v)\nwant %q", got, e.Err(), want)
	}
}
