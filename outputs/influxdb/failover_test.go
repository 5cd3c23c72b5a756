package influxdb_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/influxdb"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

// urls = [...] as Telegraf's outputs.influxdb takes it; url still works;
// both at once, none listed, or a bad entry are errors naming the key.
func TestURLsConfig(t *testing.T) {
	reg := outputs.NewRegistry(influxdb.Kind())
	parse := func(block string) (influxdb.Config, error) {
		c, err := appconfig.Parse("t.toml", []byte("[[outputs.influxdb]]\ndatabase = \"d\"\n"+block+"\n"), appconfig.Options{Registry: reg})
		if err != nil {
			return influxdb.Config{}, err
		}
		return c.Outputs[0].Options.(influxdb.Config), nil
	}
	c, err := parse(`urls = ["http://a:8086", "http://b:8086"]`)
	if err != nil || strings.Join(c.URLs, ",") != "http://a:8086,http://b:8086" {
		t.Fatalf("urls: %+v %v", c.URLs, err)
	}
	if c, err := parse(`url = "http://a:8086"`); err != nil || len(c.URLs) != 1 || c.URLs[0] != "http://a:8086" {
		t.Fatalf("url: %+v %v", c.URLs, err)
	}
	for block, want := range map[string]string{
		`url = "http://a:8086"` + "\n" + `urls = ["http://b:8086"]`: "outputs.influxdb[0].urls: set url or urls, not both",
		`urls = []`:                           "outputs.influxdb[0].urls: empty",
		`urls = ["http://a:8086", "ftp://b"]`: "outputs.influxdb[0].urls[1]: \"ftp://b\": want http://HOST:PORT",
		`urls = ["http://u:secret@a:8086"]`:   "outputs.influxdb[0].urls[0]: credentials in the URL",
	} {
		if _, err := parse(block); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", block, err, want)
		}
	}
}

// A server that fails retryably hands the batch to the next one, within
// the same write; the output stays there; a 400 is not retried elsewhere.
func TestFailover(t *testing.T) {
	var aDown atomic.Bool
	var aGot, bGot, bStatus atomic.Int64
	bStatus.Store(http.StatusNoContent)
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if aDown.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		aGot.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bGot.Add(1)
		w.WriteHeader(int(bStatus.Load()))
	}))
	defer b.Close()
	out, err := influxdb.New(influxdb.Options{URLs: []string{a.URL, b.URL},
		WriterOptions: influxdb.WriterOptions{Name: "fo", Database: "d", Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	write := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		defer cancel()
		return out.Write(ctx, &record.Batch{Samples: outputtest.Samples(5)})
	}
	if err := write(); err != nil || aGot.Load() != 1 || bGot.Load() != 0 {
		t.Fatalf("first write: %v, a %d b %d", err, aGot.Load(), bGot.Load())
	}
	aDown.Store(true)
	if err := write(); err != nil || bGot.Load() != 1 {
		t.Fatalf("failover write: %v, b %d", err, bGot.Load())
	}
	aDown.Store(false)
	if err := write(); err != nil || bGot.Load() != 2 || aGot.Load() != 1 {
		t.Fatalf("after failover the output stays on b: %v, a %d b %d", err, aGot.Load(), bGot.Load())
	}
	if s := out.Stats(); s.Failovers != 1 {
		t.Fatalf("failovers %d", s.Failovers)
	}
	bStatus.Store(http.StatusBadRequest)
	err = write()
	if !record.IsPermanent(err) || aGot.Load() != 1 {
		t.Fatalf("a 400 must be permanent and not sent elsewhere: %v, a %d", err, aGot.Load())
	}
}

// Two real influxd: one stops mid-run; every batch is in one of them.
func TestFailoverTwoInfluxdIntegration(t *testing.T) {
	s1 := influxtest.Start(t, influxtest.Options{})
	s2 := influxtest.Start(t, influxtest.Options{})
	s1.CreateDatabase("gpu")
	s2.CreateDatabase("gpu")
	out, err := influxdb.New(influxdb.Options{URLs: []string{s1.URL, s2.URL}, Host: "node1",
		WriterOptions: influxdb.WriterOptions{Name: "fo", Database: "gpu", Timeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	const n = 4000
	samples := mixedSamples(n, time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	for i, seq := 0, uint64(1); i < n; i, seq = i+200, seq+1 {
		if i == n/2 {
			s1.Stop() // mid-run
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := out.Write(ctx, &record.Batch{Seq: seq, Samples: samples[i : i+200]})
		cancel()
		if err != nil {
			t.Fatalf("batch %d: %v", seq, err)
		}
	}
	// Every written value, whole (timestamp, field, value), is on exactly
	// one of the servers.
	type point struct {
		ts    int64
		field string
		value float64
	}
	rows := func(s *influxtest.Server) map[point]int {
		r := s.MustQuery("gpu", `SELECT "power_draw", "utilization_gpu", "temperature_gpu", "clocks_current_sm" FROM "nvidia_smi"`)
		out := map[point]int{}
		if len(r.Series) == 0 {
			return out
		}
		cols := r.Series[0].Columns
		for _, row := range r.Series[0].Values {
			ts, err := row[0].(json.Number).Int64()
			if err != nil {
				t.Fatal(err)
			}
			for j := 1; j < len(row); j++ {
				if row[j] != nil {
					v, _ := row[j].(json.Number).Float64()
					out[point{ts, cols[j], v}]++
				}
			}
		}
		return out
	}
	got2 := rows(s2)
	s1.Restart()
	got1 := rows(s1)
	names := map[catalog.MetricID]string{catalog.MetricPowerDraw: "power_draw", catalog.MetricUtilGPU: "utilization_gpu",
		catalog.MetricTempGPU: "temperature_gpu", catalog.MetricClockSM: "clocks_current_sm"}
	for _, smp := range samples {
		p := point{smp.TimeNS, names[smp.Metric], smp.Value}
		if got1[p]+got2[p] != 1 {
			t.Fatalf("%+v: %d on the first server, %d on the second; want exactly one", p, got1[p], got2[p])
		}
	}
	if len(got1)+len(got2) != n || len(got1) == 0 || len(got2) == 0 {
		t.Fatalf("values: %d on the first server + %d on the second, want %d in all, on both", len(got1), len(got2), n)
	}
	if s := out.Stats(); s.Failovers != 1 {
		t.Fatalf("failovers %d", s.Failovers)
	}
	t.Logf("%d values before the stop on the first server, %d after it on the second, none lost or doubled", len(got1), len(got2))
}
