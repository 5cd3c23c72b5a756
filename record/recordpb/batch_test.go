package recordpb

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/record/recordtest"
)

func TestFullBatchSetsEveryField(t *testing.T) {
	if unset := recordtest.UnsetFields(recordtest.FullBatch()); len(unset) > 0 {
		t.Fatalf("fixture leaves fields zero in every record (extend recordtest.FullBatch): %v", unset)
	}
	// The device, alone, sets every field: it covers MIG and the modes.
	if z := recordtest.ZeroFields(recordtest.FullBatch().Devices[0]); len(z) > 0 {
		t.Fatalf("fixture device leaves fields zero: %v", z)
	}
}

func TestBatchRoundTripEveryKind(t *testing.T) {
	want := recordtest.FullBatch()
	var m Batch
	p, err := AppendBatch(nil, &m, want)
	if err != nil {
		t.Fatal(err)
	}
	var got record.Batch
	if err := DecodeBatch(p, &Batch{}, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got, *want)
	}
	// Decoding into a batch that held something else resets it, and the
	// scratch message is reusable.
	other := &record.Batch{Seq: 9, Samples: []record.Sample{{TimeNS: 1}}, Events: []record.Event{{Kind: "x"}}}
	p2, err := AppendBatch(nil, &m, other)
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeBatch(p2, &m, &got); err != nil {
		t.Fatal(err)
	}
	if got.Seq != 9 || len(got.Devices) != 0 || len(got.Summaries) != 0 ||
		!reflect.DeepEqual(got.Samples, other.Samples) || !reflect.DeepEqual(got.Events, other.Events) {
		t.Fatalf("second decode: %+v, want %+v", got, *other)
	}
	// Special values survive bit for bit.
	odd := &record.Batch{Seq: math.MaxUint64, Samples: []record.Sample{
		{TimeNS: math.MinInt64 / 2, Value: math.Inf(-1)}, {TimeNS: math.MaxInt64 / 2, Value: math.Copysign(0, -1)}}}
	p3, _ := AppendBatch(nil, &m, odd)
	if err := DecodeBatch(p3, &m, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Samples, odd.Samples) || math.Signbit(got.Samples[1].Value) != true {
		t.Fatalf("special values: %+v, want %+v", got.Samples, odd.Samples)
	}
}

func TestDecodeBatchRejectsCorruption(t *testing.T) {
	p, _ := AppendBatch(nil, &Batch{}, recordtest.FullBatch())
	var b record.Batch
	// Every truncation either fails or decodes a consistent prefix; none
	// panics. Truncations that cut a packed column must fail.
	for n := range len(p) {
		if err := DecodeBatch(p[:n], &Batch{}, &b); err != nil && !errors.Is(err, ErrFormat) {
			t.Fatalf("truncated to %d: error %v does not wrap ErrFormat", n, err)
		}
	}
	if err := DecodeBatch([]byte{0xff, 0xff, 0xff}, &Batch{}, &b); !errors.Is(err, ErrFormat) {
		t.Fatalf("garbage: %v, want ErrFormat", err)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	p, _ := AppendBatch(nil, &Batch{}, recordtest.FullBatch())
	f.Add(p)
	f.Fuzz(func(t *testing.T, data []byte) {
		var b record.Batch
		if DecodeBatch(data, &Batch{}, &b) != nil {
			return
		}
		// What decodes re-encodes and decodes to the same batch.
		q, err := AppendBatch(nil, &Batch{}, &b)
		if err != nil {
			t.Fatal(err)
		}
		var b2 record.Batch
		if err := DecodeBatch(q, &Batch{}, &b2); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

var update = flag.Bool("update", false, "rewrite testdata/metric_ids.golden from the catalog")

// TestMetricIDsGolden pins every metric name to its wire ID. IDs travel on
// the wire (disk buffers, the plugin protocol, NATS protobuf): a metric is
// only ever appended to the catalog, never inserted, removed or moved.
func TestMetricIDsGolden(t *testing.T) {
	var b strings.Builder
	b.WriteString("# wire ID, metric name: one line per metric of sampler.DefaultCatalog\n")
	for i, n := range MetricNames(catalog.Default()) {
		fmt.Fprintf(&b, "%d %s\n", i+1, n)
	}
	path := filepath.Join("testdata", "metric_ids.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Fatalf("metric wire IDs differ from %s.\n"+
			"IDs travel on the wire and in disk buffers: append new metrics at the end of the catalog, never\n"+
			"insert, remove or reorder. If this change is deliberate (a new metric appended), update the file with\n"+
			"  go test ./record/recordpb -run TestMetricIDsGolden -update\n"+
			"and commit it.\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestMetricMap(t *testing.T) {
	c := catalog.Default()
	names := MetricNames(c)
	m, identity := MetricMap(names, c)
	if !identity {
		t.Fatal("own catalog: not the identity")
	}
	for i := 1; i < c.Len(); i++ {
		if m[i] != catalog.MetricID(i) {
			t.Fatalf("own catalog: %d maps to %d", i, m[i])
		}
	}
	// A writer whose catalog had power_draw and temp_gpu swapped, and a
	// metric this catalog lacks.
	pd, tg := c.Name(catalog.MetricPowerDraw), c.Name(catalog.MetricTempGPU)
	old := []string{tg, "retired_metric", pd}
	m, identity = MetricMap(old, c)
	want := []catalog.MetricID{0, catalog.MetricTempGPU, 0, catalog.MetricPowerDraw}
	if identity || !reflect.DeepEqual(m, want) {
		t.Fatalf("MetricMap = %v (identity %v), want %v (false)", m, identity, want)
	}
}
