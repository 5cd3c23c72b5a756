package influxdb_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/internal/pipeline/buffer"
	"github.com/gpusampler/gpusampler/outputs/influxdb"
	"github.com/gpusampler/gpusampler/record"
)

var testDevice = record.Device{Index: 0, UUID: "GPU-513536b6-7d19-9063-b049-1e69664bb298", Name: "NVIDIA A100-SXM4-80GB",
	PCIBusID: "00000000:07:00.0", Backend: "sim", MemoryTotalMiB: 81920}

// mixedSamples returns n samples (n a multiple of 4): per instant a float
// (power_draw, W) and three integer fields (utilization_gpu %,
// temperature_gpu °C, clocks_current_sm MHz), instants 100 ms apart from
// t0, each value distinct.
func mixedSamples(n int, t0 int64) []record.Sample {
	out := make([]record.Sample, 0, n)
	for i := range n / 4 {
		ts := t0 + int64(i)*100_000_000 + int64(i%7) // odd ns: precision survives
		out = append(out,
			record.Sample{TimeNS: ts, Value: 100.25 + float64(i), Metric: catalog.MetricPowerDraw},
			record.Sample{TimeNS: ts, Value: float64(i % 101), Metric: catalog.MetricUtilGPU},
			record.Sample{TimeNS: ts, Value: float64(30 + i%50), Metric: catalog.MetricTempGPU},
			record.Sample{TimeNS: ts, Value: float64(1000 + i), Metric: catalog.MetricClockSM})
	}
	return out
}

func newOutput(t testing.TB, url, db string) *influxdb.Output {
	t.Helper()
	out, err := influxdb.New(influxdb.Options{WriterOptions: influxdb.WriterOptions{Name: "test", URL: url, Database: db},
		Host: "node1", GlobalTags: map[string]string{"cluster": "c1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	return out
}

// writeBatches writes samples in batches of size, devices in the first.
func writeBatches(t testing.TB, out record.Output, samples []record.Sample, size int) {
	t.Helper()
	for i, seq := 0, uint64(1); i < len(samples); i, seq = i+size, seq+1 {
		b := &record.Batch{Seq: seq, Samples: samples[i:min(i+size, len(samples))]}
		if i == 0 {
			b.Devices = []record.Device{testDevice}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := out.Write(ctx, b)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("value %v (%T) is not a number", v, v)
	}
	f, err := n.Float64()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// N samples in, exactly N values out, with their values, timestamps, tags
// and Telegraf's field types.
func TestWriteQueryIntegration(t *testing.T) {
	srv := influxtest.Start(t, influxtest.Options{})
	srv.CreateDatabase("gpu")
	const n = 4000
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	want := mixedSamples(n, t0)
	writeBatches(t, newOutput(t, srv.URL, "gpu"), want, 1000)

	r := srv.MustQuery("gpu", `SELECT "power_draw", "utilization_gpu", "temperature_gpu", "clocks_current_sm" FROM "nvidia_smi"`)
	if len(r.Series) != 1 {
		t.Fatalf("series: %+v", r.Series)
	}
	rows := r.Series[0].Values
	got := 0
	for i, row := range rows {
		ts, err := row[0].(json.Number).Int64()
		if err != nil {
			t.Fatal(err)
		}
		for j := 1; j < 5; j++ {
			if row[j] == nil {
				continue
			}
			got++
			w := want[i*4+j-1]
			if ts != w.TimeNS || num(t, row[j]) != w.Value {
				t.Fatalf("row %d field %d: %d = %v, want %d = %v", i, j, ts, row[j], w.TimeNS, w.Value)
			}
		}
	}
	if got != n {
		t.Fatalf("queried %d values, wrote %d", got, n)
	}
	types := fieldTypes(t, srv, "gpu")
	for f, typ := range map[string]string{"power_draw": "float", "utilization_gpu": "integer", "temperature_gpu": "integer",
		"clocks_current_sm": "integer"} {
		if types[f] != typ {
			t.Errorf("field %s is %s, want %s (Telegraf's type)", f, types[f], typ)
		}
	}
	tags := srv.MustQuery("gpu", `SHOW TAG KEYS FROM "nvidia_smi"`)
	var keys []string
	for _, v := range tags.Series[0].Values {
		keys = append(keys, v[0].(string))
	}
	if got := strings.Join(keys, ","); got != "cluster,host,index,name,pci_bus_id,uuid" {
		t.Errorf("tag keys %s", got)
	}
}

func fieldTypes(t *testing.T, srv *influxtest.Server, db string) map[string]string {
	t.Helper()
	r := srv.MustQuery(db, `SHOW FIELD KEYS FROM "nvidia_smi"`)
	types := map[string]string{}
	for _, v := range r.Series[0].Values {
		types[v[0].(string)] = v[1].(string)
	}
	return types
}

// telegrafA100 is Telegraf's nvidia_smi input's point for its
// a100-sxm4-v12.xml test fixture (plugins/inputs/nvidia_smi, v1.37.2), as
// its influx serializer writes it: integers with the i suffix, power_draw a
// float, strings for the text fields.
const telegrafA100 = `nvidia_smi,arch=Ampere,compute_mode=Default,host=node1,index=0,name=NVIDIA\ A100-SXM4-80GB,pstate=P0,uuid=GPU-513536b6-7d19-9063-b049-1e69664bb298 clocks_current_graphics=1275i,clocks_current_memory=1593i,clocks_current_sm=1275i,clocks_current_video=1275i,cuda_version="12.2",current_ecc="Enabled",display_active="Disabled",display_mode="Enabled",driver_version="535.54.03",encoder_stats_average_fps=0i,encoder_stats_average_latency=0i,encoder_stats_session_count=0i,fbc_stats_average_fps=0i,fbc_stats_average_latency=0i,fbc_stats_session_count=0i,power_draw=67.03,memory_free=80999i,memory_total=81920i,memory_used=50i,memory_reserved=869i,pcie_link_gen_current=4i,pcie_link_width_current=16i,serial="1650522003820",temperature_gpu=27i,vbios_version="92.00.36.00.02",utilization_gpu=0i,utilization_memory=0i,fan_speed=0i,power_limit=400,utilization_encoder=0i,utilization_decoder=0i 1689872450000000000
`

// Every metric of the catalog written into a database that already holds a
// Telegraf nvidia_smi point: no field type conflict (a conflict is a 400).
func TestTelegrafSchemaNoConflictIntegration(t *testing.T) {
	srv := influxtest.Start(t, influxtest.Options{})
	srv.CreateDatabase("telegraf")
	// InfluxDB 1.x checks field types per shard (a week by default): put
	// Telegraf's point beside ours.
	ts := time.Now().UnixNano()
	point := strings.Replace(telegrafA100, " 1689872450000000000", fmt.Sprintf(" %d", ts-1e9), 1)
	if code, body, err := srv.WriteLP("telegraf", []byte(point)); err != nil || code != 204 {
		t.Fatalf("Telegraf point: %d %s %v", code, body, err)
	}
	before := fieldTypes(t, srv, "telegraf")
	var samples []record.Sample
	for _, m := range catalog.Default().All() {
		samples = append(samples, record.Sample{TimeNS: ts, Value: 1, Metric: m.ID})
	}
	out := newOutput(t, srv.URL, "telegraf")
	ctx := context.Background()
	b := &record.Batch{Seq: 1, Devices: []record.Device{testDevice}, Samples: samples,
		Summaries: []record.Summary{{StartNS: ts, IntervalNS: 1e9, Mean: 2, Min: 1, Max: 3, Last: 2, Count: 10, Metric: catalog.MetricUtilGPU}},
		Events:    []record.Event{{Kind: record.EventXID, StartNS: ts, EndNS: ts, Message: "xid 79", Attrs: []record.Attr{{Key: "xid", Value: "79"}}}}}
	if err := out.Write(ctx, b); err != nil {
		t.Fatalf("write beside Telegraf data: %v", err)
	}
	after := fieldTypes(t, srv, "telegraf")
	for f, typ := range before {
		if after[f] != typ {
			t.Errorf("field %s: %s, was %s", f, after[f], typ)
		}
	}
	if after["utilization_gpu_mean"] != "float" || after["utilization_gpu_count"] != "integer" {
		t.Errorf("summary fields: %v", after)
	}
	if n := srv.Count("telegraf", "gpusampler_events", "message"); n != 1 {
		t.Errorf("events measurement holds %d points, want 1", n)
	}
	// And the clash the check guards against is real: a float where
	// Telegraf wrote an integer is a partial write, not retried (types are
	// per shard: write into the one just used).
	werr := out.Writer().Write(ctx, []byte(fmt.Sprintf("nvidia_smi,index=0 utilization_gpu=1.5 %d\n", ts+1)))
	if !record.IsPermanent(werr) || !strings.Contains(werr.Error(), "field type conflict") {
		t.Fatalf("type clash: %v", werr)
	}
	if st := out.Stats(); st.PartialWrites != 1 || st.RejectedPoints != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Unreachable server, missing database (404), wrong password (401): each a
// clear error naming the output; not ready (404, 401) is unavailable, held
// by a buffer like an outage.
func TestErrorsIntegration(t *testing.T) {
	ctx := context.Background()
	b := &record.Batch{Seq: 1, Samples: mixedSamples(4, time.Now().UnixNano())}
	t.Run("unreachable", func(t *testing.T) {
		url := fmt.Sprintf("http://127.0.0.1:%d", influxtest.FreePort(t))
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err := newOutput(t, url, "gpu").Write(wctx, b)
		if err == nil || record.IsPermanent(err) || !strings.Contains(err.Error(), `influxdb "test": POST `+url) ||
			!strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("err %v", err)
		}
	})
	srv := influxtest.Start(t, influxtest.Options{})
	// One attempt (the writer's own; retrying is the pump's or buffer's).
	oneTry := func(name, url, db, user, password string) *influxdb.Output {
		out, err := influxdb.New(influxdb.Options{WriterOptions: influxdb.WriterOptions{Name: name, URL: url,
			Database: db, Username: user, Password: password}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { out.Close() })
		return out
	}
	t.Run("missing database", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err := oneTry("test", srv.URL, "nodb", "", "").Write(wctx, b)
		if record.Classify(err) != record.KindUnavailable || !strings.Contains(err.Error(), `404 Not Found: database not found: "nodb" (database "nodb" does not exist`) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		auth := influxtest.Start(t, influxtest.Options{AuthEnabled: true})
		if _, err := auth.Query("", `CREATE USER admin WITH PASSWORD 'right' WITH ALL PRIVILEGES`); err != nil {
			t.Fatal(err)
		}
		auth.CreateDatabase("gpu", "admin", "right")
		for _, tc := range []struct {
			password string
			ok       bool
		}{{"wrong", false}, {"right", true}} {
			out := oneTry("auth", auth.URL, "gpu", "admin", tc.password)
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := out.Write(wctx, b)
			cancel()
			if tc.ok != (err == nil) {
				t.Fatalf("password %s: %v", tc.password, err)
			}
			if !tc.ok && (record.Classify(err) != record.KindUnavailable || !strings.Contains(err.Error(), `influxdb "auth"`) ||
				!strings.Contains(err.Error(), "401 Unauthorized") || !strings.Contains(err.Error(), "check username and password") ||
				strings.Contains(err.Error(), "wrong")) {
				t.Fatalf("err %v", err)
			}
		}
	})
	t.Run("v2 against 1.x", func(t *testing.T) {
		out, err := influxdb.New(influxdb.Options{WriterOptions: influxdb.WriterOptions{Name: "v2", URL: srv.URL,
			API: influxdb.APIv2, Organization: "o", Bucket: "b"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := out.Write(ctx, b); !record.IsPermanent(err) || !strings.Contains(err.Error(), "no v2 write endpoint") {
			t.Fatalf("err %v", err)
		}
	})
}

// With a disk buffer, InfluxDB killed for ≥ 10 s mid-run and restarted on
// the same port and data dir: every sample arrives.
func TestDiskBufferOutageIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("takes > 10 s")
	}
	srv := influxtest.Start(t, influxtest.Options{})
	srv.CreateDatabase("gpu")
	buf, err := buffer.New(newOutput(t, srv.URL, "gpu"), buffer.Config{Kind: buffer.KindDisk, Dir: t.TempDir(),
		MaxBytes: 64 << 20, RetryInitial: 50 * time.Millisecond, RetryMax: time.Second, CloseTimeout: 30 * time.Second},
		buffer.WithWriteTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	total := runOutage(t, srv, buf)
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	st := buf.Stats()
	if st.DroppedRecords.Total() != 0 || st.Retries == 0 {
		t.Fatalf("buffer stats %+v: want retries and no drops", st)
	}
	if got := srv.Count("gpu", "nvidia_smi", "power_draw"); got != int64(total) {
		t.Fatalf("InfluxDB holds %d samples, wrote %d", got, total)
	}
}

// With a small memory buffer the same outage overflows it: what is missing
// from InfluxDB is exactly the buffer's drop count.
func TestMemoryBufferDropsIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("takes > 10 s")
	}
	srv := influxtest.Start(t, influxtest.Options{})
	srv.CreateDatabase("gpu")
	buf, err := buffer.New(newOutput(t, srv.URL, "gpu"), buffer.Config{Kind: buffer.KindMemory, MaxBytes: 1 << 20,
		MaxRecords: 500, RetryInitial: 50 * time.Millisecond, RetryMax: time.Second, CloseTimeout: 30 * time.Second},
		buffer.WithWriteTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	total := runOutage(t, srv, buf)
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	st := buf.Stats()
	got := srv.Count("gpu", "nvidia_smi", "power_draw")
	if st.DroppedRecords.Cap == 0 || st.DroppedRecords.Total() != st.DroppedRecords.Cap {
		t.Fatalf("drops %+v: want only cap drops", st.DroppedRecords)
	}
	if missing := int64(total) - got; missing != int64(st.DroppedRecords.Cap) {
		t.Fatalf("missing %d of %d, buffer dropped %d", missing, total, st.DroppedRecords.Cap)
	}
	t.Logf("wrote %d, stored %d, dropped %d (counted)", total, got, st.DroppedRecords.Cap)
}

// runOutage writes batches of 50 power samples every 20 ms for about 14 s
// while InfluxDB is killed after 1 s and restarted 11 s later. It returns
// the number of samples written.
func runOutage(t *testing.T, srv *influxtest.Server, out record.Output) int {
	t0 := time.Now().UnixNano()
	start := time.Now()
	stopped, restarted := false, false
	total := 0
	for seq := uint64(1); time.Since(start) < 14*time.Second; seq++ {
		if !stopped && time.Since(start) > time.Second {
			srv.Stop()
			stopped = true
		}
		if stopped && !restarted && time.Since(start) > 12*time.Second {
			srv.Restart()
			restarted = true
		}
		b := &record.Batch{Seq: seq, Samples: make([]record.Sample, 50)}
		for i := range b.Samples {
			b.Samples[i] = record.Sample{TimeNS: t0 + int64(total+i)*1000, Value: float64(total + i), Metric: catalog.MetricPowerDraw}
		}
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		total += len(b.Samples)
		time.Sleep(20 * time.Millisecond)
	}
	return total
}

// A database that does not exist yet is "not ready", not malformed lines:
// a disk buffer holds the backlog while writes get 404 (skip database
// creation), and delivers all of it once the database is created. With
// database creation (Telegraf's default) the first 404 creates it.
func TestMissingDatabaseHeldIntegration(t *testing.T) {
	for _, create := range []bool{false, true} {
		srv := influxtest.Start(t, influxtest.Options{})
		out, err := influxdb.New(influxdb.Options{WriterOptions: influxdb.WriterOptions{Name: "test", URL: srv.URL,
			Database: "gpu", CreateDatabase: create}, Host: "node1"})
		if err != nil {
			t.Fatal(err)
		}
		buf, err := buffer.New(out, buffer.Config{Kind: buffer.KindDisk, Dir: t.TempDir(), MaxBytes: 64 << 20,
			RetryInitial: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, CloseTimeout: 30 * time.Second},
			buffer.WithWriteTimeout(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now().UnixNano()
		total := 0
		for seq := uint64(1); seq <= 200; seq++ {
			b := &record.Batch{Seq: seq, Samples: make([]record.Sample, 50)}
			for i := range b.Samples {
				b.Samples[i] = record.Sample{TimeNS: t0 + int64(total+i)*1000, Value: float64(total + i), Metric: catalog.MetricPowerDraw}
			}
			if err := buf.Write(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			total += len(b.Samples)
		}
		deadline := time.Now().Add(2 * time.Minute) // liveness bound
		if !create {
			// Held through several refusals, then created.
			for buf.Stats().Retries < 10 {
				if time.Now().After(deadline) {
					t.Fatalf("no retries: %+v", buf.Stats())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if st := buf.Stats(); st.DroppedRecords.Total() != 0 || st.Delivered != 0 {
				t.Fatalf("database missing: %+v, want everything held", st)
			}
			srv.CreateDatabase("gpu")
		}
		for buf.Stats().BufferedBatches > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("backlog not delivered: %+v", buf.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := buf.Close(); err != nil {
			t.Fatal(err)
		}
		if st := buf.Stats(); st.DroppedRecords.Total() != 0 {
			t.Fatalf("create=%v: drops %+v", create, st.DroppedRecords)
		}
		if got := srv.Count("gpu", "nvidia_smi", "power_draw"); got != int64(total) {
			t.Fatalf("create=%v: InfluxDB holds %d samples, wrote %d", create, got, total)
		}
	}
}
