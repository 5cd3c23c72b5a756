package stdout

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

func jobEv(kind record.EventKind, gpu int, owner string, energy, busy, idle, alloc, lost, peak float64) record.Event {
	return record.Event{Kind: kind, Device: gpu, Attrs: []record.Attr{{Key: record.AttrOwner, Value: owner}},
		Fields: []record.Field{{Key: record.JobFieldEnergy, Value: energy}, {Key: record.JobFieldBusy, Value: busy},
			{Key: record.JobFieldIdleAllocated, Value: idle}, {Key: record.JobFieldAllocated, Value: alloc},
			{Key: record.JobFieldLost, Value: lost}, {Key: record.JobFieldMemoryPeak, Value: peak, Int: true}}}
}

// One row per owner over its GPUs: energy summed, busy % of the summed
// allocated time, the largest peak; a job whose every GPU ended is ended;
// other records print nothing.
func TestJobsTable(t *testing.T) {
	var buf bytes.Buffer
	o, err := New(&buf, Options{Format: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := o.Write(ctx, &record.Batch{Events: []record.Event{{Kind: record.EventXID, Device: 0}}}); err != nil || buf.Len() != 0 {
		t.Fatalf("a batch without accounts printed %q (%v)", buf.String(), err)
	}
	b := &record.Batch{Events: []record.Event{
		jobEv(record.EventJob, 0, "ml/train-7/main", 1000, 8, 2, 10, 0, 20000),
		jobEv(record.EventJob, 1, "ml/train-7/main", 1200, 10, 0, 10, 1, 30000),
		jobEv(record.EventJobEnd, 2, "slurm:4711", 500, 5, 5, 10, 0, 100),
		jobEv(record.EventJob, 3, record.OwnerUnattributed, 74, 0, 0, 1, 0, 4),
	}}
	if err := o.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"OWNER                                GPUS         ENERGY_J  BUSY% IDLE_ALLOC  PEAK_MiB  EXACT STATE",
		"ml/train-7/main                      0,1            2200.0   90.0         2s     30000  0.950 running",
		"slurm:4711                           2               500.0   50.0         5s       100  1.000 ended",
		"unattributed                         3                74.0    0.0          -         4  1.000 running",
		"", ""}, "\n")
	if buf.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// An owner whose every account ended leaves the table 5 minutes after its
// last end, on the records' clock; one with a GPU still running stays.
func TestJobsTableForgetsEndedOwners(t *testing.T) {
	var buf bytes.Buffer
	o, err := New(&buf, Options{Format: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	t0 := int64(1_700_000_000e9)
	at := func(e record.Event, ns int64) record.Event { e.EndNS = ns; return e }
	write := func(evs ...record.Event) string {
		buf.Reset()
		if err := o.Write(context.Background(), &record.Batch{Events: evs}); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	write(at(jobEv(record.EventJobEnd, 0, "slurm:1", 1, 1, 0, 1, 0, 1), t0),
		at(jobEv(record.EventJobEnd, 1, "slurm:2", 1, 1, 0, 1, 0, 1), t0),
		at(jobEv(record.EventJob, 2, "slurm:2", 1, 1, 0, 1, 0, 1), t0))
	// Exactly 5 minutes later: still shown.
	if out := write(at(jobEv(record.EventJob, 3, "slurm:3", 1, 1, 0, 1, 0, 1), t0+int64(5*time.Minute))); !strings.Contains(out, "slurm:1 ") {
		t.Fatalf("ended job gone within 5 minutes:\n%s", out)
	}
	out := write(at(jobEv(record.EventJob, 3, "slurm:3", 1, 1, 0, 1, 0, 1), t0+int64(5*time.Minute)+1))
	if strings.Contains(out, "slurm:1 ") {
		t.Errorf("job ended over 5 minutes ago still shown:\n%s", out)
	}
	if !strings.Contains(out, "slurm:2 ") || !strings.Contains(out, "slurm:3 ") {
		t.Errorf("running jobs missing:\n%s", out)
	}
	if n := len(o.enc.(*jobsEncoder).accounts); n != 3 {
		t.Errorf("%d accounts kept, want 3 (slurm:1's dropped)", n)
	}
}
