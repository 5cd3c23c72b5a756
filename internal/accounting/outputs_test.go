package accounting_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accounting"
	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/internal/encoding/protobuf"
	"github.com/gpusampler/gpusampler/outputs/prometheus"
	"github.com/gpusampler/gpusampler/record"
)

// jobRecords runs a small account to its end: pod train-7 on GPU 3 for 2 s
// at 300 W, and returns what the accountant emitted.
func jobRecords(t *testing.T) []record.Event {
	t.Helper()
	var evs []record.Event
	a := accounting.New(accounting.Options{Emit: func(ev record.Event) { evs = append(evs, ev.Clone()) }})
	owner := record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer"}
	dev := record.Device{Index: 3, UUID: "GPU-3333", Attribution: owner}
	a.SetOwner(3, owner, 0)
	var ss []record.Sample
	mj := 0.0
	for ms := int64(0); ms <= 4000; ms += 50 {
		ss = append(ss, record.Sample{TimeNS: ms * 1e6, Value: 300, Device: 3, Metric: catalog.MetricPowerDraw})
		if ms%500 == 0 {
			ss = append(ss, record.Sample{TimeNS: ms * 1e6, Value: 60, Device: 3, Metric: catalog.MetricUtilGPU},
				record.Sample{TimeNS: ms * 1e6, Value: mj, Device: 3, Metric: catalog.MetricEnergy})
		}
		mj += 300 * 50
		if ms == 2000 {
			a.Observe(&dev, ss)
			ss = nil
			a.SetOwner(3, record.Attribution{}, 2000*1e6)
			dev.Attribution = record.Attribution{}
		}
	}
	a.Observe(&dev, ss)
	if len(evs) < 2 || evs[len(evs)-1].Kind != record.EventJobEnd {
		t.Fatalf("records %+v, want a job end", evs)
	}
	return evs
}

// The job and job-end records reach every encoding with the owner's labels
// and the figures: line protocol, JSON, protobuf (NATS, disk buffers,
// plugins) and Prometheus counters.
func TestJobRecordsOnEveryOutput(t *testing.T) {
	evs := jobRecords(t)
	end := evs[len(evs)-1]
	tot := accounting.TotalsOf(end.Fields)
	if tot.EnergyJ != 600 || tot.BusyS != 2 || math.Abs(tot.AllocatedS-2) > 1e-9 {
		t.Fatalf("job end %+v, want 600 J, 2 s busy of 2 s", tot)
	}
	b := &record.Batch{Devices: []record.Device{{Index: 3, UUID: "GPU-3333", Name: "NVIDIA H200"}}, Events: evs}

	lp := lineproto.New(lineproto.Options{Host: "node7"})
	lp.Encode(b)
	var lastLine string
	for _, l := range strings.Split(strings.TrimSpace(string(lp.Bytes())), "\n") {
		if strings.HasPrefix(l, lineproto.JobMeasurement+",") && strings.Contains(l, "ended=true") {
			lastLine = l
		}
	}
	for _, want := range []string{"container=trainer", "host=node7", "index=3", "namespace=ml", "owner=ml/train-7/trainer", "pod=train-7", "uuid=GPU-3333",
		" energy_j=600,", ",busy_s=2,", ",idle_allocated_s=0,", `,started="1970-01-01T00:00:00Z"`} {
		if !strings.Contains(lastLine, want) {
			t.Errorf("line protocol job end %q lacks %q", lastLine, want)
		}
	}

	js := jsonl.New(jsonl.Options{Host: "node7"})
	js.Encode(b)
	var found bool
	for _, l := range strings.Split(strings.TrimSpace(string(js.Bytes())), "\n") {
		var r struct {
			Type, Pod, Owner, UUID string
			GPU                    int
			Fields                 map[string]float64
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		if r.Type == "job_end" {
			found = true
			if r.Pod != "train-7" || r.Owner != "ml/train-7/trainer" || r.GPU != 3 || r.UUID != "GPU-3333" || r.Fields["energy_j"] != 600 || r.Fields["busy_s"] != 2 {
				t.Errorf("JSON job end %s", l)
			}
		}
	}
	if !found {
		t.Errorf("no JSON job_end record in\n%s", js.Bytes())
	}

	var back record.Batch
	if _, err := protobuf.Decode(protobuf.Append(nil, b, nil), &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Events[len(back.Events)-1]; got.Kind != record.EventJobEnd || accounting.TotalsOf(got.Fields) != tot || len(got.Attrs) != len(end.Attrs) {
		t.Errorf("protobuf round trip: %+v, want %+v", got, end)
	}

	now := time.Unix(1_800_000_000, 0)
	o, err := prometheus.New(prometheus.Options{Listen: "127.0.0.1:0", Host: "node7", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if err := o.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	mfs, err := o.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "gpusampler_job_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, p := range m.GetLabel() {
				labels[p.GetName()] = p.GetValue()
			}
			if labels["pod"] != "train-7" || labels["namespace"] != "ml" || labels["owner"] != "ml/train-7/trainer" || labels["UUID"] != "GPU-3333" || labels["gpu"] != "3" {
				t.Errorf("%s labels %v", mf.GetName(), labels)
			}
			got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	// An ended job's series stay 5 minutes after its job end, then go.
	now = now.Add(5*time.Minute + time.Second)
	if err := o.Write(context.Background(), &record.Batch{}); err != nil {
		t.Fatal(err)
	}
	if mfs, _ := o.Gatherer().Gather(); slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool { return strings.HasPrefix(mf.GetName(), "gpusampler_job_") }) {
		t.Error("an ended job's series are still there 5 minutes after its end")
	}
	if got["gpusampler_job_energy_joules_total"] != 600 || got["gpusampler_job_busy_seconds_total"] != 2 ||
		math.Abs(got["gpusampler_job_allocated_seconds_total"]-2) > 1e-9 || got["gpusampler_job_exactness_ratio"] != 1 {
		t.Errorf("/metrics job series %v", got)
	}
}
