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

var update = flag.Bool("update", false, "append the catalog's new metrics to testdata/metric_ids.golden")

// TestMetricIDsGolden pins every metric ID to its name and unit. IDs travel
// on the wire (disk buffers, the plugin protocol, NATS protobuf) and are
// published as records.proto's MetricId enum for consumers in any language:
// a metric is only ever appended to the catalog, never inserted, removed,
// moved, renamed or given another unit. -update only appends: it refuses
// to change a line that is there.
func TestMetricIDsGolden(t *testing.T) {
	var b strings.Builder
	b.WriteString("# metric ID, name, unit: one line per metric of catalog.Default(); lines are only ever appended\n")
	for _, m := range catalog.Default().All() {
		fmt.Fprintf(&b, "%d %s %s\n", m.ID, m.Name, m.Unit)
	}
	got := b.String()
	path := filepath.Join("testdata", "metric_ids.golden")
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, string(want)) {
		t.Fatalf("metric IDs changed meaning against %s: an ID is published (records.proto's MetricId) and travels on\n"+
			"the wire and in disk buffers. Append new metrics at the end of the catalog; never insert, remove,\n"+
			"reorder, rename or change a unit.\n got:\n%s\nwant (a prefix of got):\n%s", path, got, want)
	}
	if got == string(want) {
		return
	}
	if !*update {
		t.Fatalf("the catalog has metrics %s lacks: append them with\n"+
			"  go test ./record/recordpb -run TestMetricIDsGolden -update\n"+
			"(then go generate ./record/recordpb for the MetricId enum) and commit both.\nnew lines:\n%s", path, got[len(want):])
	}
	if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The MetricId enum compiled from records.proto names every catalog metric
// by its ID, and nothing else: a consumer generating code from the .proto
// reads the same table as `gpusampler metrics`.
func TestMetricIdEnumMatchesCatalog(t *testing.T) {
	cat := catalog.Default()
	if len(MetricId_name) != cat.Len() {
		t.Errorf("MetricId has %d values, the catalog %d metrics and METRIC_UNSPECIFIED: run go generate ./record/recordpb", len(MetricId_name), cat.Len())
	}
	if MetricId_name[0] != "METRIC_UNSPECIFIED" {
		t.Errorf("MetricId 0 = %q", MetricId_name[0])
	}
	for _, m := range cat.All() {
		if want := "METRIC_" + strings.ToUpper(m.Name); MetricId_name[int32(m.ID)] != want {
			t.Errorf("MetricId %d = %q, want %q (catalog metric %s): run go generate ./record/recordpb", m.ID, MetricId_name[int32(m.ID)], want, m.Name)
		}
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

func TestSummaryHistogramColumns(t *testing.T) {
	h := &record.ExpHistogram{Scale: -2, ZeroCount: 1, PositiveOffset: -3, Positive: []uint64{1, 2}, NegativeOffset: 7,
		Negative: []uint64{4}}
	// Summaries with and without a histogram, a zeros-only one and one of
	// negative values only, in one batch.
	want := &record.Batch{Seq: 3, Summaries: []record.Summary{
		{StartNS: 10, IntervalNS: 5, Count: 8, Metric: catalog.MetricTempGPU, Hist: h},
		{StartNS: 10, IntervalNS: 5, Count: 3, Metric: catalog.MetricPowerDraw},
		{StartNS: 15, IntervalNS: 5, Count: 2, Metric: catalog.MetricTempGPU, Hist: &record.ExpHistogram{Scale: 20, ZeroCount: 2}},
		{StartNS: 20, IntervalNS: 5, Count: 1, Metric: catalog.MetricTempGPU,
			Hist: &record.ExpHistogram{Scale: 5, NegativeOffset: -9, Negative: []uint64{1}}},
	}}
	if FromSummaries(want.Summaries).HistNonFinite != nil {
		t.Fatal("hist_non_finite written with every NonFinite 0")
	}
	// A window of NaN samples only carries a histogram without buckets;
	// one with NaN and finite samples both.
	want.Summaries = append(want.Summaries,
		record.Summary{StartNS: 25, IntervalNS: 5, Count: 2, Metric: catalog.MetricTempGPU, Hist: &record.ExpHistogram{NonFinite: 2}},
		record.Summary{StartNS: 30, IntervalNS: 5, Count: 4, Metric: catalog.MetricTempGPU,
			Hist: &record.ExpHistogram{Scale: 1, PositiveOffset: 2, Positive: []uint64{3}, NonFinite: 1}})
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
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got.Summaries, want.Summaries)
	}
	// Without histograms no hist column is written (older readers see
	// the same message as before).
	noHist := FromSummaries(want.Summaries[1:2])
	if len(noHist.HistScale) != 0 || len(noHist.HistCounts) != 0 {
		t.Fatalf("hist columns for summaries without one: %+v", noHist)
	}
	// Malformed columns are refused, naming the column.
	for name, mut := range map[string]func(c *SummaryColumns){
		"hist_counts short":     func(c *SummaryColumns) { c.HistCounts = c.HistCounts[:2] },
		"hist_counts long":      func(c *SummaryColumns) { c.HistCounts = append(c.HistCounts, 1) },
		"hist_scale short":      func(c *SummaryColumns) { c.HistScale = c.HistScale[:1] },
		"hist without scale":    func(c *SummaryColumns) { c.HistScale = nil },
		"hist_non_finite short": func(c *SummaryColumns) { c.HistNonFinite = c.HistNonFinite[:1] },
	} {
		c := FromSummaries(want.Summaries)
		mut(c)
		if _, err := c.AppendTo(nil); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "hist") {
			t.Errorf("%s: err %v, want ErrFormat naming hist", name, err)
		}
	}
}

// An aggregate journal's series keeps its windows' histograms in its own
// hist_* columns, as SummaryColumns does; none when no window has one.
func TestAggregateSeriesHists(t *testing.T) {
	hs := []*record.ExpHistogram{{Scale: 4, ZeroCount: 1, PositiveOffset: 9, Positive: []uint64{2, 0, 1}}, nil,
		{NonFinite: 3}, {Scale: -1, NegativeOffset: 2, Negative: []uint64{5}, NonFinite: 1}}
	a := &AggregateSeries{StartNs: make([]int64, len(hs))}
	a.SetHists(hs)
	got, err := a.Hists()
	if err != nil || !reflect.DeepEqual(got, hs) {
		t.Fatalf("round trip: %v %v, want %v", got, err, hs)
	}
	a.SetHists(make([]*record.ExpHistogram, len(hs)))
	if got, err := a.Hists(); err != nil || got != nil || a.HistScale != nil {
		t.Fatalf("no histogram: %v %v, columns %+v", got, err, a)
	}
	a.SetHists(hs)
	a.StartNs = a.StartNs[:2]
	if _, err := a.Hists(); !errors.Is(err, ErrFormat) {
		t.Fatalf("columns longer than the windows: %v", err)
	}
}

// Histogram columns that no writer makes are refused, not handed to code
// that bins further values into them (an aggregate window taken up from
// its journal): a scale outside OpenTelemetry's [-10, 20] (bucket indexes
// then overflow int32) and buckets whose indexes run past int32.
func TestHistColumnsRejectOutOfRange(t *testing.T) {
	for name, h := range map[string]*record.ExpHistogram{
		"scale 21":          {Scale: 21, PositiveOffset: 1, Positive: []uint64{1}},
		"scale -11":         {Scale: -11, ZeroCount: 1},
		"positive past max": {Scale: 0, PositiveOffset: math.MaxInt32 - 1, Positive: []uint64{1, 1, 1}},
		"negative past max": {Scale: 0, NegativeOffset: math.MaxInt32, Negative: []uint64{1, 1}},
	} {
		a := &AggregateSeries{StartNs: make([]int64, 1)}
		a.SetHists([]*record.ExpHistogram{h})
		if _, err := a.Hists(); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want a format error", name, err)
		}
		c := FromSummaries([]record.Summary{{Count: 1, Metric: 1, Hist: h}})
		if _, err := c.AppendTo(nil); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: summaries: %v, want a format error", name, err)
		}
	}
	edge := &record.ExpHistogram{Scale: 20, PositiveOffset: math.MaxInt32, Positive: []uint64{1},
		NegativeOffset: math.MinInt32, Negative: []uint64{2}}
	a := &AggregateSeries{StartNs: make([]int64, 1)}
	a.SetHists([]*record.ExpHistogram{edge})
	if got, err := a.Hists(); err != nil || !reflect.DeepEqual(got[0], edge) {
		t.Errorf("the last bucket index int32 has: %v %v", got, err)
	}
}
