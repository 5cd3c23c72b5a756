package fleet

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	ServeIfChild() // the cluster's servers are this test binary, re-executed
	os.Exit(m.Run())
}

// TestFleetSmall runs the fleet simulation's code with three nodes through
// every fault — the stream leader killed and restarted, the consumer killed
// and restarted on its durable, one node partitioned — and compares every
// sample read back from the stream with every sample the engines produced.
// The run's length sets how much happens, never whether the test passes:
// nothing here waits on a clock for a result.
func TestFleetSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three NATS servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Nodes: 3, GPUs: 2, Duration: 6 * time.Second, Workers: 2, Faults: true,
		Dir: t.TempDir(), Keep: true, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Table())
	t.Log(res.Summary())
	if len(res.In) == 0 {
		t.Fatal("the engines produced no samples")
	}
	if !slices.Equal(res.In, res.Out) {
		t.Errorf("samples out differ from samples in: %d in, %d out; first difference: %s", len(res.In), len(res.Out), firstDiff(res.In, res.Out))
	}
	if res.Lost != 0 || res.DupSamples != 0 || res.Reread != 0 || !res.FingerprintsMatch {
		t.Errorf("lost %d, duplicated %d, re-read below the durable position %d, fingerprints match %v; want 0, 0, 0, true",
			res.Lost, res.DupSamples, res.Reread, res.FingerprintsMatch)
	}
	if res.PartitionedIn == 0 || res.PartitionedIn != res.PartitionedOut {
		t.Errorf("partitioned node: %d samples in, %d out; want equal and not 0", res.PartitionedIn, res.PartitionedOut)
	}
}

func firstDiff(a, b []Record) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("#%d in %+v, out %+v", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("one is a prefix of the other (%d, %d)", len(a), len(b))
}

// testLog writes progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}

func TestFingerprintDiffers(t *testing.T) {
	base := Record{Host: "node0001"}
	base.TimeNS, base.Value, base.Device, base.Metric = 1e18, 250.5, 1, 3
	f := func(r Record) uint64 { return fingerprint(hash(r.Host), r.Sample) }
	variants := []func(*Record){
		func(r *Record) { r.Host = "node0002" },
		func(r *Record) { r.TimeNS++ },
		func(r *Record) { r.Value = 250.50000000000003 },
		func(r *Record) { r.Device = 2 },
		func(r *Record) { r.Metric = 4 },
		func(r *Record) { r.Flags = 1 },
	}
	for i, v := range variants {
		r := base
		v(&r)
		if f(r) == f(base) {
			t.Errorf("variant %d (%+v) has the fingerprint of %+v", i, r, base)
		}
	}
}
