package lineproto

import (
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Attribution travels as pod, namespace, container and hpc_job tags on the
// device's samples, events and process lines, and only on its own.
func TestEncodeAttribution(t *testing.T) {
	e := New(Options{Host: "node1"})
	b := &record.Batch{
		Devices: []record.Device{{Index: 0, UUID: "GPU-0"},
			{Index: 1, UUID: "GPU-1", Attribution: record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer", HPCJob: "4711"}}},
		Samples: []record.Sample{{TimeNS: 1e18, Value: 97, Device: 0, Metric: catalog.MetricUtilGPU},
			{TimeNS: 1e18, Value: 98, Device: 1, Metric: catalog.MetricUtilGPU}},
		Events: []record.Event{{Kind: record.EventXID, Device: 1, StartNS: 1e18, EndNS: 1e18, Message: "xid 79"}},
	}
	e.Encode(b)
	want := `nvidia_smi,host=node1,index=0,uuid=GPU-0 utilization_gpu=97i 1000000000000000000` + "\n" +
		`nvidia_smi,container=trainer,host=node1,hpc_job=4711,index=1,namespace=ml,pod=train-7,uuid=GPU-1 utilization_gpu=98i 1000000000000000000` + "\n"
	got := string(e.Bytes())
	if len(got) < len(want) || got[:len(want)] != want || e.Err() != nil {
		t.Fatalf("got  %q (err %v)\nwant prefix %q", got, e.Err(), want)
	}
	e.Reset()
	p := processBatch()
	p.Devices[0].Attribution = record.Attribution{Pod: "train-7", Namespace: "ml"}
	e.Encode(p)
	wantP := `nvidia_smi_process,host=node1,index=1,name=python3,namespace=ml,pod=train-7,type=C,uuid=GPU-1 pid=4242i,used_memory=97000i,sm_util=98i,mem_util=45i,enc_util=0i,dec_util=0i,cmdline="python3 train.py" 1000000000000000000` + "\n"
	if got := string(e.Bytes()); got != wantP || e.Err() != nil {
		t.Fatalf("got  %q (err %v)\nwant %q", got, e.Err(), wantP)
	}
}
