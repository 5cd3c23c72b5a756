package agent_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/attribution"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/internal/pipeline/buffer"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

func TestSelfEvents(t *testing.T) {
	now := time.Unix(100, 0)
	st := sampler.Stats{
		Outputs: []sampler.OutputStats{{Name: "stdout", Published: 10, Read: 8, Dropped: 2, Delivered: 8, Lag: 3}},
		Devices: []sampler.DeviceStats{{Index: 0, UUID: "GPU-a", Calls: 30, NewestNS: now.UnixNano() - 5e8, SamplesPerCall: 4,
			CallsByFunction: map[string]uint64{"GetSamples": 20, "GetSamples(size)": 1, "GetFieldValues": 9}}},
	}
	prev := map[int]uint64{0: 10}
	evs := agent.SelfEvents(st, now, 2*time.Second, prev)
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	field := func(ev record.Event, k string) float64 {
		for _, f := range ev.Fields {
			if f.Key == k {
				return f.Value
			}
		}
		t.Fatalf("no field %s", k)
		return 0
	}
	if evs[0].Kind != record.EventSelf || field(evs[0], "dropped") != 2 || field(evs[0], "buffered") != 3 {
		t.Errorf("output event %+v", evs[0])
	}
	if field(evs[1], "nvml_calls_per_s") != 10 || field(evs[1], "newest_sample_age_ns") != 5e8 || prev[0] != 30 {
		t.Errorf("device event %+v", evs[1])
	}
	// Calls per function, as int counters, after the fixed fields.
	n := len(evs[1].Fields)
	if got, want := evs[1].Fields[n-3:], []record.Field{{Key: "nvml_calls_GetFieldValues", Value: 9, Int: true},
		{Key: "nvml_calls_GetSamples", Value: 20, Int: true}, {Key: "nvml_calls_GetSamples_size", Value: 1, Int: true}}; !reflect.DeepEqual(got, want) {
		t.Errorf("per-function fields %+v, want %+v", got, want)
	}
}

// A simulated device's self-metrics carry simulated=true, as its other
// records do; a real device's carry no such attribute.
func TestSelfEventsMarkSimulatedDevices(t *testing.T) {
	st := sampler.Stats{Devices: []sampler.DeviceStats{{Index: 0, UUID: "GPU-real"}, {Index: 1, UUID: "GPU-sim", Simulated: true}}}
	evs := agent.SelfEvents(st, time.Unix(100, 0), time.Second, map[int]uint64{})
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	marked := func(ev record.Event) bool {
		for _, a := range ev.Attrs {
			if a == (record.Attr{Key: "simulated", Value: "true"}) {
				return true
			}
		}
		return false
	}
	if marked(evs[0]) || !marked(evs[1]) {
		t.Errorf("simulated marks: real %v (want false), simulated %v (want true): %+v", marked(evs[0]), marked(evs[1]), evs)
	}
}

// reportingOut is an output with counters of its own.
type reportingOut struct{ memOut }

func (r *reportingOut) ReportStats(dst []record.Field) []record.Field {
	return append(dst, record.IntField("http_requests", 7), record.IntField("http_retries", 0))
}

// An output's own counters become an output_detail event, seen through the
// aggregate and buffer wrappers; outputs without any send none; --stats
// prints the non-zero ones on a line under the output's.
func TestDetailEvents(t *testing.T) {
	inner := &reportingOut{}
	buf, err := buffer.New(inner, buffer.Config{Kind: buffer.KindMemory, MaxRecords: 1000, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	agg, err := aggregate.New(buf, aggregate.Options{Interval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	evs := agent.DetailEvents(map[string]record.Output{"influx": agg, "plain": &memOut{}}, time.Unix(100, 0))
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1: %+v", len(evs), evs)
	}
	ev := evs[0]
	if ev.Kind != record.EventSelf || len(ev.Attrs) != 2 || ev.Attrs[0] != (record.Attr{Key: "scope", Value: "output_detail"}) ||
		ev.Attrs[1] != (record.Attr{Key: "output", Value: "influx"}) {
		t.Errorf("event %+v", ev)
	}
	var keys []string
	for _, f := range ev.Fields {
		keys = append(keys, f.Key)
	}
	if want := "aggregate_summarized aggregate_late aggregate_emitted aggregate_dropped aggregate_events_dropped http_requests http_retries"; strings.Join(keys, " ") != want {
		t.Errorf("fields %v, want %s", keys, want)
	}
	st := sampler.Stats{Outputs: []sampler.OutputStats{{Name: "influx"}, {Name: "plain"}}}
	got := agent.FormatStats(st, evs)
	if want := "\n                      http_requests=7\n  output plain "; !strings.Contains(got, want) {
		t.Errorf("FormatStats:\n%s\nwant the non-zero detail under the influx line:\n%s", got, want)
	}
}

// TestFormatStatsBufferBacklog: --stats shows what a buffer holds while its
// sink is down apart from what reached the sink, and the output line what
// the pump holds (a refused batch) apart from the ring's lag.
func TestFormatStatsBufferBacklog(t *testing.T) {
	ev := record.Event{Kind: record.EventSelf, Device: -1,
		Attrs: []record.Attr{{Key: "scope", Value: "buffer"}, {Key: "output", Value: "influx"}, {Key: "buffer", Value: "disk"}},
		Fields: []record.Field{{Key: "buffered_records", Value: 13536, Int: true}, {Key: "buffered_bytes", Value: 201300, Int: true},
			{Key: "oldest_age_seconds", Value: 20.04}, {Key: "delivered_batches", Value: 3, Int: true},
			{Key: "delivered_records", Value: 300, Int: true},
			{Key: "retries", Value: 9, Int: true}, {Key: "dropped_malformed", Value: 4, Int: true}}}
	st := sampler.Stats{Outputs: []sampler.OutputStats{{Name: "influx", Published: 14000, Delivered: 13840, Pending: 100, Lag: 60},
		{Name: "plain"}}}
	got := agent.FormatStats(st, []record.Event{ev})
	want := "  output influx       published 14000 delivered 13840 dropped 0 filtered 0 failed 0 held 100 unread 60 write 0s (max 0s)\n" +
		"                      buffer disk backlog 13536 records 201.3 KB oldest 20s delivered_batches=3 delivered_records=300 retries=9 dropped_malformed=4\n  output plain "
	if !strings.Contains(got, want) {
		t.Errorf("FormatStats:\n%s\nwant the backlog under the influx line:\n%s", got, want)
	}
}

// The attribution resolver's counters, whole: the last success's age is
// taken at the tick's time.
func TestAttributionEvent(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	st := attribution.Stats{Refreshes: 9, Changes: 3, KubeErrors: 2, UnknownDevices: 1, SharedDevices: 4, MappingErrors: 5,
		ContainerLogErrors: 6, Successes: 7, LastSuccess: t0.Add(10 * time.Second), Since: t0}
	now := t0.Add(12 * time.Second)
	got := agent.AttributionEvent(st, now)
	want := record.Event{Kind: record.EventSelf, Device: -1, StartNS: now.UnixNano(), EndNS: now.UnixNano(),
		Attrs: []record.Attr{{Key: "scope", Value: "attribution"}},
		Fields: []record.Field{{Key: "refreshes", Value: 9, Int: true}, {Key: "changes", Value: 3, Int: true},
			{Key: "successes", Value: 7, Int: true}, {Key: "kube_errors", Value: 2, Int: true},
			{Key: "mapping_errors", Value: 5, Int: true}, {Key: "container_log_errors", Value: 6, Int: true},
			{Key: "unknown_devices", Value: 1, Int: true},
			{Key: "shared_devices", Value: 4, Int: true}, {Key: "last_success_age_ns", Value: 2e9, Int: true}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("event\n%+v\nwant\n%+v", got, want)
	}
	// Before the first success the age is the resolver's.
	st.Successes, st.LastSuccess = 0, time.Time{}
	if got := agent.AttributionEvent(st, now).Fields[8]; got != (record.Field{Key: "last_success_age_ns", Value: 12e9, Int: true}) {
		t.Fatalf("age before any success: %+v", got)
	}
}
