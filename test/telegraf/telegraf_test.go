package telegraf_test

import (
	"context"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/plugins/inputs"
	"github.com/influxdata/telegraf/plugins/inputs/execd"
	"github.com/influxdata/telegraf/plugins/inputs/influxdb_listener"
	"github.com/influxdata/telegraf/plugins/inputs/influxdb_v2_listener"
	"github.com/influxdata/telegraf/plugins/parsers/influx"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	gstelegraf "github.com/gpusampler/gpusampler/outputs/telegraf"
	"github.com/gpusampler/gpusampler/record"
)

// buildBinary builds gpusampler from this checkout.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpusampler")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "build", "-o", bin, "./cmd/gpusampler")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

var wantTags = []string{"host", "index", "name", "pci_bus_id", "simulated", "uuid"}

func checkTags(t *testing.T, m telegraf.Metric) {
	t.Helper()
	for _, k := range wantTags {
		if _, ok := m.GetTag(k); !ok {
			t.Fatalf("metric %s lacks tag %s: %v", m.Name(), k, m.Tags())
		}
	}
}

// fieldType asserts a field's Go type as Telegraf's parser produced it.
func fieldType(t *testing.T, m telegraf.Metric, field string, want any) {
	t.Helper()
	v, ok := m.GetField(field)
	if !ok {
		t.Fatalf("metric lacks field %s: %v", field, m.Fields())
	}
	switch want.(type) {
	case int64:
		if _, ok := v.(int64); !ok {
			t.Fatalf("field %s = %v (%T), want int64", field, v, v)
		}
	case float64:
		if _, ok := v.(float64); !ok {
			t.Fatalf("field %s = %v (%T), want float64", field, v, v)
		}
	}
}

// startExecd starts Telegraf's inputs.execd on `gpusampler run --execd
// mode` over 2 simulated GPUs. gpusampler runs under a shell that takes
// Telegraf's SIGTERM and SIGKILL (5 and 10 s after it closes stdin) in its
// place, so the only way gpusampler ends is by itself: stopOnStdinClose
// checks that it does.
func startExecd(t *testing.T, bin, mode, signal string) (*execd.Execd, *accumulator) {
	t.Helper()
	parser := &influx.Parser{}
	if err := parser.Init(); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "gpusampler-under-sh")
	script := "#!/bin/sh\n" + strconv.Quote(bin) + ` "$@"` + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &execd.Execd{Command: []string{wrapper, "run", "--execd", mode, "--backend", "sim", "--gpus", "2", "--host", "node1"},
		Signal: signal, RestartDelay: config.Duration(time.Hour), Log: testLogger{t}}
	e.SetParser(parser)
	if err := e.Init(); err != nil {
		t.Fatal(err)
	}
	acc := &accumulator{}
	if err := e.Start(acc); err != nil {
		t.Fatal(err)
	}
	return e, acc
}

// liveness bounds a wait on state that only a hung or broken program
// misses: far above any load's delay.
const liveness = 2 * time.Minute

// gatherUntil asks for a gather (a newline on gpusampler's stdin), then
// again, until done holds for what Telegraf received. The pause between
// gathers only spares the CPU; nothing depends on its length. It returns
// what Telegraf had received when done held, and when that was: all of it
// was written, and stamped, before then. (On a loaded machine gpusampler
// may answer a gather well after it was asked for, so the time a gather
// was asked for bounds nothing.)
func gatherUntil(t *testing.T, e *execd.Execd, acc *accumulator, what string, done func([]telegraf.Metric) bool) (time.Time, []telegraf.Metric) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for {
		if err := e.Gather(acc); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if ms, _ := acc.Snapshot(); done(ms) {
			return time.Now(), ms
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after gathering for %v", what, liveness)
		}
	}
}

// stopOnStdinClose stops the plugin (Telegraf closes gpusampler's stdin)
// and checks that gpusampler exits on that alone: Telegraf's later signals
// reach only the wrapping shell (startExecd), so a gpusampler that ignored
// stdin's close would keep the pipes open and Stop would never return.
func stopOnStdinClose(t *testing.T, e *execd.Execd) {
	t.Helper()
	done := make(chan struct{})
	go func() { e.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(liveness):
		t.Fatalf("gpusampler still running %v after Telegraf closed its stdin", liveness)
	}
}

// Telegraf's inputs.execd with signal = "STDIN" runs `gpusampler run
// --execd gather`: each gather (a newline) yields one summary line per GPU
// for the window since the last one.
func TestExecdGather(t *testing.T) {
	bin := buildBinary(t)
	t0 := time.Now()
	e, acc := startExecd(t, bin, "gather", "STDIN")
	// Until a gather wrote both GPUs' power: the first gathers may come
	// before the engine's first samples.
	bothGPUs := func(ms []telegraf.Metric) bool {
		n := map[time.Time]int{}
		for _, m := range ms {
			if m.Name() == "nvidia_smi" && m.HasField("power_draw_mean") {
				n[m.Time()]++
			}
		}
		return slices.Contains(slices.Collect(maps.Values(n)), 2)
	}
	seenAt, seen := gatherUntil(t, e, acc, "gather with both GPUs' summaries", bothGPUs)
	stopOnStdinClose(t, e)
	// Stamped with the window's start (outputs/execd's tests pin which
	// instant on a fake clock): after the process started, and before
	// Telegraf had the window's lines.
	for _, m := range seen {
		if ts := m.Time(); m.Name() == "nvidia_smi" && (ts.Before(t0.Add(-time.Second)) || ts.After(seenAt)) {
			t.Fatalf("window stamped %v, want its start, between %v and %v, when its lines had arrived", ts, t0, seenAt)
		}
	}
	ms, errs := acc.Snapshot()
	if errs = withoutShutdownRace(errs); len(errs) > 0 {
		t.Fatalf("accumulator errors: %v", errs)
	}
	// Besides one summary line per GPU per window, a window carries the
	// per-process lines (nvidia_smi_process) polled in it.
	byWindow := map[time.Time][]string{}
	for _, m := range ms {
		switch m.Name() {
		case "nvidia_smi":
			idx, _ := m.GetTag("index")
			byWindow[m.Time()] = append(byWindow[m.Time()], idx)
			checkTags(t, m)
			if !m.HasField("power_draw_mean") {
				continue // a window that saw no power sample
			}
			for _, f := range []string{"power_draw_mean", "power_draw_min", "power_draw_max", "power_draw_last"} {
				fieldType(t, m, f, 0.0)
			}
			fieldType(t, m, "power_draw_count", int64(0))
		case "nvidia_smi_process":
			fieldType(t, m, "pid", int64(0))
			fieldType(t, m, "used_memory", int64(0))
			if _, ok := m.GetTag("name"); !ok {
				t.Fatalf("process line without a name tag: %v", m.Tags())
			}
		case "gpusampler_self":
			// gpusampler's own counters: the final round is sent at exit
		default:
			t.Fatalf("measurement %s", m.Name())
		}
	}
	for ts, idx := range byWindow {
		slices.Sort(idx)
		if len(idx) != len(slices.Compact(slices.Clone(idx))) {
			t.Fatalf("GPUs %v in the window at %v, want one summary line per GPU", idx, ts)
		}
		if ts.Before(t0.Add(-time.Second)) {
			t.Fatalf("window stamped %v, before the process started (%v)", ts, t0)
		}
	}
}

// signal = "none" runs `gpusampler run --execd stream`: every sample, with
// its own ns timestamp, Telegraf's field types.
func TestExecdStream(t *testing.T) {
	bin := buildBinary(t)
	e, acc := startExecd(t, bin, "stream", "none")
	seen := func(f string) bool {
		ms, _ := acc.Snapshot()
		for _, m := range ms {
			if _, ok := m.GetField(f); ok {
				return true
			}
		}
		return false
	}
	waitFor(t, liveness, "power, utilization, temperature, clocks", func() bool {
		return seen("power_draw") && seen("utilization_gpu") && seen("temperature_gpu") && seen("clocks_current_sm")
	})
	stopOnStdinClose(t, e)
	ms, errs := acc.Snapshot()
	if errs = withoutShutdownRace(errs); len(errs) > 0 {
		t.Fatalf("accumulator errors: %v", errs)
	}
	subSecond := 0
	types := map[string]any{"power_draw": 0.0, "utilization_gpu": int64(0), "temperature_gpu": int64(0),
		"clocks_current_sm": int64(0), "memory_used": int64(0), "utilization_memory": int64(0)}
	for _, m := range ms {
		if m.Name() != "nvidia_smi" {
			continue
		}
		checkTags(t, m)
		for f, typ := range types {
			if _, ok := m.GetField(f); ok {
				fieldType(t, m, f, typ)
			}
		}
		if m.Time().Nanosecond()%1_000_000 != 0 {
			subSecond++
		}
	}
	if subSecond == 0 {
		t.Fatalf("no timestamp below ms resolution among %d metrics: driver timestamps were rounded", len(ms))
	}
}

// outputs/telegraf pushes to Telegraf's influxdb_listener (v1 /write, basic
// auth) and influxdb_v2_listener (v2 /api/v2/write, token): every sample
// arrives with its name, tags, type and exact ns timestamp; a wrong
// credential is a clear, permanent error.
func TestListeners(t *testing.T) {
	for _, tc := range []struct {
		listener  string
		start     func(t *testing.T, addr string, acc telegraf.Accumulator) func()
		good, bad string // credential keys of the block
	}{
		{"influxdb_listener", func(t *testing.T, addr string, acc telegraf.Accumulator) func() {
			// from Telegraf's registry: the creator sets its defaults
			l := inputs.Inputs["influxdb_listener"]().(*influxdb_listener.InfluxDBListener)
			l.ServiceAddress, l.BasicUsername, l.BasicPassword, l.Log = addr, "gs", "pw", testLogger{t}
			if err := l.Init(); err != nil {
				t.Fatal(err)
			}
			if err := l.Start(acc); err != nil {
				t.Fatal(err)
			}
			return l.Stop
		}, "username = \"gs\"\npassword = \"pw\"", "username = \"gs\"\npassword = \"nope\""},
		{"influxdb_v2_listener", func(t *testing.T, addr string, acc telegraf.Accumulator) func() {
			l := inputs.Inputs["influxdb_v2_listener"]().(*influxdb_v2_listener.InfluxDBV2Listener)
			l.ServiceAddress, l.Token, l.Log = addr, config.NewSecret([]byte("tok")), testLogger{t}
			if err := l.Init(); err != nil {
				t.Fatal(err)
			}
			if err := l.Start(acc); err != nil {
				t.Fatal(err)
			}
			return l.Stop
		}, "token = \"tok\"\nbucket = \"gpu\"", "token = \"wrong\""},
	} {
		t.Run(tc.listener, func(t *testing.T) {
			addr := freeAddr(t)
			acc := &accumulator{}
			stop := tc.start(t, addr, acc)
			defer stop()
			build := func(creds string) record.Output {
				doc := "[[outputs.telegraf]]\nurl = \"http://" + addr + "\"\nlistener = \"" + tc.listener + "\"\ncontent_encoding = \"gzip\"\n" + creds + "\n"
				cfg, err := appconfig.Parse("test.toml", []byte(doc), appconfig.Options{Registry: outputs.NewRegistry(gstelegraf.Kind())})
				if err != nil {
					t.Fatal(err)
				}
				out, err := gstelegraf.Kind().Build(&cfg.Outputs[0].Block, outputs.BuildEnv{Host: "node1"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { out.Close() })
				return out
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			dev := record.Device{Index: 1, UUID: "GPU-1", Name: "Sim GPU", PCIBusID: "00000000:18:00.0", Simulated: true}
			t0 := time.Now().Truncate(time.Second).UnixNano()
			var samples []record.Sample
			const n = 500
			for i := range n {
				ts := t0 + int64(i)*100_000_000 + 7
				samples = append(samples,
					record.Sample{TimeNS: ts, Value: 100.5 + float64(i), Device: 1, Metric: catalog.MetricPowerDraw},
					record.Sample{TimeNS: ts, Value: float64(i % 100), Device: 1, Metric: catalog.MetricUtilGPU})
			}
			err := build(tc.bad).Write(ctx, &record.Batch{Seq: 1, Devices: []record.Device{dev}, Samples: samples[:2]})
			// Credentials not (yet) valid are "not ready": the batch is held
			// for a later try as in an outage, never thrown away.
			if record.Classify(err) != record.KindUnavailable || !strings.Contains(err.Error(), `telegraf "telegraf"`) || !strings.Contains(err.Error(), "401") {
				t.Fatalf("wrong credentials: %v", err)
			}
			if err := build(tc.good).Write(ctx, &record.Batch{Seq: 1, Devices: []record.Device{dev}, Samples: samples}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, liveness, strconv.Itoa(n)+" metrics", func() bool { m, _ := acc.Snapshot(); return len(m) >= n })
			ms, errs := acc.Snapshot()
			if len(ms) != n || len(errs) > 0 {
				t.Fatalf("%d metrics (want %d), errors %v", len(ms), n, errs)
			}
			for i, m := range ms {
				if m.Name() != "nvidia_smi" || m.Time().UnixNano() != t0+int64(i)*100_000_000+7 {
					t.Fatalf("metric %d: %s at %d", i, m.Name(), m.Time().UnixNano())
				}
				checkTags(t, m)
				if v, _ := m.GetField("power_draw"); v != 100.5+float64(i) {
					t.Fatalf("metric %d power_draw %v", i, v)
				}
				if v, _ := m.GetField("utilization_gpu"); v != int64(i%100) {
					t.Fatalf("metric %d utilization_gpu %v (%T), want int64", i, v, v)
				}
			}
		})
	}
}

func TestMain(m *testing.M) {
	if _, err := os.Stat("../../cmd/gpusampler"); err != nil {
		panic("run from test/telegraf inside the gpusampler checkout")
	}
	os.Exit(m.Run())
}

// withoutShutdownRace drops the one error Telegraf's execd reports about
// itself when it stops a process: its stderr reader can lose the race with
// its own close of the pipe ("read |0: file already closed"). It says
// nothing about the program's output; every other error stays.
func withoutShutdownRace(errs []error) []error {
	var out []error
	for _, err := range errs {
		if !strings.Contains(err.Error(), "error reading stderr") || !strings.Contains(err.Error(), "file already closed") {
			out = append(out, err)
		}
	}
	return out
}
