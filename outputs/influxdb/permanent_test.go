package influxdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// clashSink answers its refuse-th POST with InfluxDB's 400 for a field type
// clash and accepts every other, keeping the bodies apart.
type clashSink struct {
	mu       sync.Mutex
	refuse   int
	posts    int
	accepted []byte
	refused  []byte
	after    int // POSTs accepted after the refused one
}

func (s *clashSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts++
	if s.posts == s.refuse {
		s.refused = append(s.refused, b...)
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":"partial write: field type conflict: input field \"power_draw\" on measurement \"nvidia_smi\" is type float, already exists as type string dropped=1"}`)
		return
	}
	s.accepted = append(s.accepted, b...)
	if s.refused != nil {
		s.after++
	}
	w.WriteHeader(http.StatusNoContent)
}

// A 400 from InfluxDB on one batch: the pump counts that batch as failed
// at its first offer (permanent: never offered again), and every later
// batch arrives. What the engine published equals what the server accepted
// plus what was counted as failed, sample for sample.
func TestBadRequestFailsOneBatch(t *testing.T) {
	sink := &clashSink{refuse: 3}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	src, err := sim.New(sim.Options{GPUs: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := sampler.New(src, sampler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	out := newOutput(t, srv.URL, "gpu")
	// pstate goes out as a tag, which DecodeSamples does not read back
	noPState := func(m *catalog.Metric) bool { return m.ID != catalog.MetricPState }
	if err := eng.AddOutput("influxdb", out, sampler.PumpOptions{FlushInterval: 20 * time.Millisecond, Select: noPState}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		sink.mu.Lock()
		after := sink.after
		sink.mu.Unlock()
		if after >= 5 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("only %d batches arrived after the refused one", after)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := eng.Stats().Outputs[0]
	sink.mu.Lock()
	defer sink.mu.Unlock()
	accepted, err := influxtest.DecodeSamples(sink.accepted)
	if err != nil {
		t.Fatal(err)
	}
	refused, err := influxtest.DecodeSamples(sink.refused)
	if err != nil {
		t.Fatal(err)
	}
	if len(refused) == 0 {
		t.Fatal("the refused request held no samples")
	}
	if st.WriteErrors != 1 || st.Retries != 0 || st.Failed != uint64(len(refused)) || st.Delivered != uint64(len(accepted)) ||
		st.Dropped != 0 || st.Published != st.Delivered+st.Failed+st.Filtered {
		t.Fatalf("stats %+v; server accepted %d samples, refused %d", st, len(accepted), len(refused))
	}
	// no sample of the refused batch came again
	key := func(s record.Sample) string { return fmt.Sprint(s.TimeNS, s.Device, s.Metric) }
	seen := map[string]bool{}
	for _, s := range accepted {
		seen[key(s)] = true
	}
	for _, s := range refused {
		if seen[key(s)] {
			t.Fatalf("refused sample %+v was sent again", s)
		}
	}
}

// Against the real InfluxDB 1.x: a batch whose field clashes with the type
// already stored (types are per shard; the clash is set up in a shard of
// its own, far in the past) is a 400, permanent; the batch after it is
// stored in full.
func TestFieldTypeClashIntegration(t *testing.T) {
	srv := influxtest.Start(t, influxtest.Options{})
	srv.CreateDatabase("gpu")
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	if code, body, err := srv.WriteLP("gpu", []byte(fmt.Sprintf("nvidia_smi,index=0 power_draw=\"text\" %d\n", old))); err != nil || code != 204 {
		t.Fatalf("set up the clash: %d %s %v", code, body, err)
	}
	out := newOutput(t, srv.URL, "gpu")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clash := mixedSamples(40, old+1e9)
	err := out.Write(ctx, &record.Batch{Seq: 1, Devices: []record.Device{testDevice}, Samples: clash})
	if record.Classify(err) != record.KindPermanent || !strings.Contains(err.Error(), "field type conflict") {
		t.Fatalf("clashing batch: %v (%v), want a permanent field type conflict", err, record.Classify(err))
	}
	if st := out.Stats(); st.PartialWrites != 1 || st.RejectedPoints != 10 {
		t.Fatalf("stats %+v, want 1 partial write, 10 rejected points", st)
	}
	now := time.Now().UnixNano()
	if err := out.Write(ctx, &record.Batch{Seq: 2, Samples: mixedSamples(40, now)}); err != nil {
		t.Fatalf("batch after the clash: %v", err)
	}
	for _, field := range []string{"power_draw", "utilization_gpu", "temperature_gpu", "clocks_current_sm"} {
		res := srv.MustQuery("gpu", fmt.Sprintf(`SELECT count(%q) FROM nvidia_smi WHERE time >= %d`, field, now))
		if n := countOf(t, res); n != 10 {
			t.Errorf("%s: %d points stored after the clash, want 10", field, n)
		}
	}
}

// countOf returns the count a SELECT count(...) answered (0 for no series).
func countOf(t *testing.T, r influxtest.Result) int64 {
	t.Helper()
	if len(r.Series) == 0 || len(r.Series[0].Values) == 0 {
		return 0
	}
	n, err := r.Series[0].Values[0][1].(json.Number).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
