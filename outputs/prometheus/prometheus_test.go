package prometheus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

// clock is an injected clock; tests move it explicitly.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var t0 = time.Unix(1_700_000_000, 0)

// newTest starts an output on a loopback port with an injected clock.
func newTest(t testing.TB, opts Options) (*Output, *clock) {
	t.Helper()
	clk := &clock{t: t0}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	if opts.Host == "" {
		opts.Host = "node7"
	}
	o, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return o, clk
}

// devices returns n test identities.
func devices(n int) []record.Device {
	out := make([]record.Device, n)
	for i := range out {
		out[i] = record.Device{Index: i, UUID: fmt.Sprintf("GPU-%08d-1111-2222-3333-444444444444", i), Name: "NVIDIA H200",
			PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x17+i), Backend: "test", DriverVersion: "570.1",
			MemoryTotalMiB: 143771, SlowdownTempC: 87, ShutdownTempC: 92, MaxOperatingTempC: 85, MemoryMaxTempC: 95}
	}
	return out
}

// value is a deterministic base-unit value for metric id on device dev.
func value(dev int, id catalog.MetricID) float64 {
	m, _ := catalog.Default().Get(id)
	switch m.Unit {
	case "%":
		return float64(10*dev+int(id)) + 0.25
	case "mJ":
		return 123456789 + float64(dev)
	case "ns":
		return 5e9 + float64(id)*1e6 + 500 // µs rounding in DCGM names
	case "MiB":
		return 40960 + float64(dev)
	}
	return float64(100*dev) + float64(id) + 0.5
}

// fullBatch holds one sample of every catalog metric on every device at t.
func fullBatch(devs []record.Device, t int64) *record.Batch {
	b := &record.Batch{Seq: 1, Devices: devs}
	for _, d := range devs {
		for _, m := range catalog.Default().All() {
			b.Samples = append(b.Samples, record.Sample{TimeNS: t, Value: value(d.Index, m.ID), Device: uint16(d.Index), Metric: m.ID})
		}
	}
	return b
}

// scrape fetches path over HTTP and parses it with the Prometheus text
// parser.
func scrape(t testing.TB, o *Output) map[string]*dto.MetricFamily {
	t.Helper()
	body := get(t, o, "/metrics", http.StatusOK)
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, body)
	}
	return fams
}

func get(t testing.TB, o *Output, path string, wantCode int) string {
	t.Helper()
	resp, err := http.Get("http://" + o.Addr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if wantCode != 0 && resp.StatusCode != wantCode {
		t.Fatalf("GET %s: %d, want %d:\n%s", path, resp.StatusCode, wantCode, body)
	}
	return string(body)
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return math.NaN()
}

// find returns the metric of family name whose labels include want.
func find(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		ls := labelsOf(m)
		for k, v := range want {
			if ls[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

func gpu(i int) map[string]string { return map[string]string{"gpu": fmt.Sprint(i)} }

func TestConformance(t *testing.T) {
	outputtest.Run(t, outputtest.Harness{
		New: func(t *testing.T) record.Output {
			o, _ := newTest(t, Options{})
			return o
		},
	})
}

// TestCatalogNamesUnitsScales scrapes one sample of every catalog metric on
// two devices and checks every series' name, type, labels and value
// against the catalog, in both naming schemes.
func TestCatalogNamesUnitsScales(t *testing.T) {
	for _, naming := range Namings {
		t.Run(naming, func(t *testing.T) {
			o, _ := newTest(t, Options{Naming: naming, GlobalTags: map[string]string{"cluster": "train-a", "rack-id": "r12"}})
			devs := devices(2)
			ts := t0.UnixNano()
			if err := o.Write(context.Background(), fullBatch(devs, ts)); err != nil {
				t.Fatal(err)
			}
			fams := scrape(t, o)
			for _, d := range devs {
				wantLabels := map[string]string{"gpu": fmt.Sprint(d.Index), "UUID": d.UUID, "pci_bus_id": d.PCIBusID,
					"device": fmt.Sprintf("nvidia%d", d.Index), "modelName": d.Name, "Hostname": "node7",
					"cluster": "train-a", "rack_id": "r12"}
				if naming == NamingPrometheus {
					wantLabels = map[string]string{"gpu": fmt.Sprint(d.Index), "uuid": d.UUID, "pci_bus_id": d.PCIBusID,
						"device": fmt.Sprintf("nvidia%d", d.Index), "model_name": d.Name, "hostname": "node7",
						"cluster": "train-a", "rack_id": "r12"}
				}
				for _, m := range catalog.Default().All() {
					if m.ID == catalog.MetricXIDCount {
						continue // exposed from xid events (TestXIDCounter)
					}
					name, scale, label, _ := PromName(&m)
					round, typ := false, dto.MetricType_GAUGE
					if m.Kind == catalog.Counter {
						typ = dto.MetricType_COUNTER
					}
					want := map[string]string{"gpu": fmt.Sprint(d.Index)}
					if label[0] != "" {
						want[label[0]] = label[1]
					}
					if naming == NamingDCGM && m.DCGM.Name != "" {
						name, scale, round, want = m.DCGM.Name, m.DCGM.Scale, m.DCGM.Type == catalog.Int, gpu(d.Index)
					}
					got := find(fams, name, want)
					if got == nil {
						t.Errorf("%s: no series %s%v", m.Name, name, want)
						continue
					}
					if ft := fams[name].GetType(); ft != typ {
						t.Errorf("%s: type %v, want %v", name, ft, typ)
					}
					if ls := labelsOf(got); !mapsContain(ls, wantLabels) {
						t.Errorf("%s labels %v, want %v", name, ls, wantLabels)
					}
					wantV := value(d.Index, m.ID) * scale
					if round {
						wantV = math.Round(wantV)
					}
					if v := valueOf(got); !near(v, wantV) {
						t.Errorf("%s{gpu=%d} = %v, want %v (%s × %g)", name, d.Index, v, wantV, m.Unit, scale)
					}
					if m.Kind == catalog.Gauge {
						pn, ps, _, _ := PromName(&m)
						for _, suffix := range windowSuffixes {
							w := find(fams, pn+suffix, gpu(d.Index))
							if w == nil || !near(valueOf(w), value(d.Index, m.ID)*ps) {
								t.Errorf("%s%s{gpu=%d}: %v, want %v", pn, suffix, d.Index, w, value(d.Index, m.ID)*ps)
							}
						}
					}
				}
				for name, want := range map[string]float64{nameSlowdownTemp: 87, nameShutdownTemp: 92, nameMaxOpTemp: 85,
					nameMemoryMaxTemp: 95, nameUp: 1, nameXIDTotal: 0, nameLastSample: float64(ts) / 1e9} {
					if m := find(fams, name, gpu(d.Index)); m == nil || valueOf(m) != want {
						t.Errorf("%s{gpu=%d} = %v, want %v", name, d.Index, m, want)
					}
				}
			}
			// units in names: the prometheus scheme's names end in base units
			if naming == NamingPrometheus {
				for _, name := range []string{"gpusampler_power_watts", "gpusampler_energy_joules_total", "gpusampler_throttle_seconds_total",
					"gpusampler_memory_used_bytes", "gpusampler_clock_sm_hertz", "gpusampler_utilization_gpu_ratio", "gpusampler_temperature_gpu_celsius"} {
					if fams[name] == nil {
						t.Errorf("no family %s", name)
					}
				}
				for name := range fams {
					if strings.HasPrefix(name, "DCGM_") {
						t.Errorf("DCGM name %s under the prometheus scheme", name)
					}
				}
			}
		})
	}
}

func mapsContain(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestDCGMSemantics: power usage is the 1 s average of the power samples,
// instant power the newest field value, energy an mJ counter, FB MiB, the
// throttle violation counters µs.
func TestDCGMSemantics(t *testing.T) {
	o, _ := newTest(t, Options{})
	base := t0.UnixNano()
	b := &record.Batch{Devices: devices(1)}
	// power samples every 100 ms for 3 s: 100 W, then 300 W during the last second
	for i := 0; i <= 30; i++ {
		v := 100.0
		if i > 20 {
			v = 300
		}
		b.Samples = append(b.Samples, record.Sample{TimeNS: base + int64(i)*100e6, Value: v, Metric: catalog.MetricPowerDraw})
	}
	b.Samples = append(b.Samples,
		record.Sample{TimeNS: base, Value: 412.5, Metric: catalog.MetricPowerInstant},
		record.Sample{TimeNS: base, Value: 9_876_543, Metric: catalog.MetricEnergy},
		record.Sample{TimeNS: base, Value: 81559, Metric: catalog.MetricMemoryUsed},
		record.Sample{TimeNS: base, Value: 2_500_000, Metric: catalog.MetricViolationThermal}, // ns
	)
	if err := o.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, o)
	check := func(name string, typ dto.MetricType, want float64) {
		t.Helper()
		m := find(fams, name, gpu(0))
		if m == nil {
			t.Fatalf("no %s", name)
		}
		if fams[name].GetType() != typ || !near(valueOf(m), want) {
			t.Errorf("%s = %v (%v), want %v (%v)", name, valueOf(m), fams[name].GetType(), want, typ)
		}
	}
	// samples in (newest-1s, newest]: i = 21..30, all 300 W
	check("DCGM_FI_DEV_POWER_USAGE", dto.MetricType_GAUGE, 300)
	check("DCGM_FI_DEV_POWER_USAGE_INSTANT", dto.MetricType_GAUGE, 412.5)
	check("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", dto.MetricType_COUNTER, 9_876_543)
	check("DCGM_FI_DEV_FB_USED", dto.MetricType_GAUGE, 81559)
	check("DCGM_FI_DEV_THERMAL_VIOLATION", dto.MetricType_COUNTER, 2500)
	check("gpusampler_power_watts_max", dto.MetricType_GAUGE, 300)
	check("gpusampler_power_watts_min", dto.MetricType_GAUGE, 100)
	check("DCGM_FI_DEV_XID_ERRORS", dto.MetricType_GAUGE, 0)
}

// TestWindowAcrossEdges feeds 50 ms samples with spikes just inside and
// just outside the window and checks min/max/mean against the samples in
// (newest-window, newest], after each of several writes.
func TestWindowAcrossEdges(t *testing.T) {
	const window = 15 * time.Second
	o, clk := newTest(t, Options{Window: window})
	var fed []record.Sample
	base := t0.UnixNano()
	step := int64(50 * time.Millisecond)
	for round := 0; round < 4; round++ {
		b := &record.Batch{Devices: devices(1)}
		for i := 0; i < 200; i++ { // 10 s per write
			n := int64(round*200 + i)
			v := 200 + float64(n%7)
			switch n {
			case 100, 350, 500: // spikes that fall out of the window one by one
				v = 700 + float64(n)
			case 301:
				v = 20
			}
			s := record.Sample{TimeNS: base + n*step, Value: v, Metric: catalog.MetricPowerDraw}
			b.Samples = append(b.Samples, s)
			fed = append(fed, s)
		}
		if round == 2 { // the exact edge: one sample at newest-window, excluded
			newest := fed[len(fed)-1].TimeNS
			edge := record.Sample{TimeNS: newest - int64(window), Value: 9999, Metric: catalog.MetricPowerDraw}
			inside := record.Sample{TimeNS: newest - int64(window) + 1, Value: 1, Metric: catalog.MetricPowerDraw}
			b.Samples = append(b.Samples, edge, inside) // out of order, as a late drain may be
			fed = append(fed, edge, inside)
		}
		if err := o.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		clk.Add(10 * time.Second)
		newest := int64(math.MinInt64)
		for _, s := range fed {
			newest = max(newest, s.TimeNS)
		}
		lo, hi, sum, n := math.Inf(1), math.Inf(-1), 0.0, 0
		for _, s := range fed {
			if s.TimeNS > newest-int64(window) && s.TimeNS <= newest {
				lo, hi, sum, n = min(lo, s.Value), max(hi, s.Value), sum+s.Value, n+1
			}
		}
		fams := scrape(t, o)
		for suffix, want := range map[string]float64{windowMin: lo, windowMax: hi, windowMean: sum / float64(n)} {
			m := find(fams, "gpusampler_power_watts"+suffix, gpu(0))
			if m == nil || !near(valueOf(m), want) {
				t.Errorf("round %d: gpusampler_power_watts%s = %v, want %v (%d samples in window)", round, suffix, m, want, n)
			}
		}
	}
}

// TestWindowSummaries: an aggregating wrapper's summaries feed the window
// with their min, max and count-weighted mean.
func TestWindowSummaries(t *testing.T) {
	o, _ := newTest(t, Options{Naming: NamingPrometheus})
	iv := int64(time.Second)
	start := t0.UnixNano() / iv * iv
	b := &record.Batch{Devices: devices(1), Summaries: []record.Summary{
		{StartNS: start, IntervalNS: iv, Mean: 50, Min: 40, Max: 90, Last: 45, Count: 10, Metric: catalog.MetricTempGPU},
		{StartNS: start + iv, IntervalNS: iv, Mean: 60, Min: 55, Max: 70, Last: 58, Count: 30, Metric: catalog.MetricTempGPU},
	}}
	if err := o.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, o)
	for name, want := range map[string]float64{"gpusampler_temperature_gpu_celsius": 58, "gpusampler_temperature_gpu_celsius_min": 40,
		"gpusampler_temperature_gpu_celsius_max": 90, "gpusampler_temperature_gpu_celsius_mean": (50*10 + 60*30) / 40.0} {
		if m := find(fams, name, gpu(0)); m == nil || !near(valueOf(m), want) {
			t.Errorf("%s = %v, want %v", name, m, want)
		}
	}
}

// TestStaleAndLostDevices: a device without a recent sample, or lost, loses
// its series (device_up stays, 0) and /healthz turns 503; a new sample
// brings it back.
func TestStaleAndLostDevices(t *testing.T) {
	o, clk := newTest(t, Options{Stale: 10 * time.Second})
	ctx := context.Background()
	get(t, o, "/healthz", http.StatusServiceUnavailable) // nothing yet
	devs := devices(2)
	o.Write(ctx, fullBatch(devs, t0.UnixNano()))
	get(t, o, "/healthz", http.StatusOK)

	clk.Add(8 * time.Second) // gpu 1 keeps sampling, gpu 0 does not
	o.Write(ctx, &record.Batch{Samples: []record.Sample{{TimeNS: clk.Now().UnixNano(), Value: 50, Device: 1, Metric: catalog.MetricTempGPU}}})
	clk.Add(3 * time.Second)
	fams := scrape(t, o)
	if find(fams, "DCGM_FI_DEV_GPU_TEMP", gpu(0)) != nil || find(fams, "gpusampler_power_watts_max", gpu(0)) != nil {
		t.Error("stale gpu 0 still has series")
	}
	if m := find(fams, nameUp, gpu(0)); m == nil || valueOf(m) != 0 {
		t.Errorf("device_up{gpu=0} = %v, want 0", m)
	}
	if m := find(fams, "DCGM_FI_DEV_GPU_TEMP", gpu(1)); m == nil || valueOf(m) != 50 {
		t.Errorf("gpu 1 temp = %v, want 50", m)
	}
	if find(fams, "DCGM_FI_DEV_POWER_USAGE", gpu(1)) != nil {
		t.Error("gpu 1's stale power metric still exposed")
	}
	if body := get(t, o, "/healthz", http.StatusServiceUnavailable); !strings.Contains(body, "gpu 0") || strings.Contains(body, "gpu 1") {
		t.Errorf("healthz:\n%s", body)
	}

	// gpu 1 is lost: its series go at once
	o.Write(ctx, &record.Batch{Events: []record.Event{{Kind: record.EventDeviceLost, Device: 1, StartNS: clk.Now().UnixNano()}}})
	fams = scrape(t, o)
	if find(fams, "DCGM_FI_DEV_GPU_TEMP", gpu(1)) != nil {
		t.Error("lost gpu 1 still has series")
	}
	if body := get(t, o, "/healthz", http.StatusServiceUnavailable); !strings.Contains(body, "lost") {
		t.Errorf("healthz:\n%s", body)
	}
	// a sample newer than the loss brings it back
	clk.Add(time.Second)
	o.Write(ctx, fullBatch(devs, clk.Now().UnixNano()))
	fams = scrape(t, o)
	for i := range 2 {
		if m := find(fams, "DCGM_FI_DEV_GPU_TEMP", gpu(i)); m == nil {
			t.Errorf("gpu %d not back", i)
		}
	}
	get(t, o, "/healthz", http.StatusOK)
}

func TestXIDCounter(t *testing.T) {
	o, _ := newTest(t, Options{})
	ctx := context.Background()
	o.Write(ctx, fullBatch(devices(1), t0.UnixNano()))
	for _, code := range []string{"79", "48", "79"} {
		o.Write(ctx, &record.Batch{Events: []record.Event{{Kind: record.EventXID, StartNS: t0.UnixNano(), Message: "xid " + code,
			Attrs: []record.Attr{{Key: "xid", Value: code}}}}})
	}
	fams := scrape(t, o)
	if m := find(fams, "DCGM_FI_DEV_XID_ERRORS", gpu(0)); m == nil || valueOf(m) != 79 {
		t.Errorf("DCGM_FI_DEV_XID_ERRORS = %v, want 79", m)
	}
	if m := find(fams, nameXIDTotal, gpu(0)); m == nil || valueOf(m) != 3 || fams[nameXIDTotal].GetType() != dto.MetricType_COUNTER {
		t.Errorf("%s = %v, want counter 3", nameXIDTotal, m)
	}
}

func TestSelfMetrics(t *testing.T) {
	o, clk := newTest(t, Options{})
	ev := record.Event{Kind: record.EventSelf, Device: -1, Attrs: []record.Attr{{Key: "scope", Value: "output"}, {Key: "output", Value: "prometheus"}},
		Fields: []record.Field{{Key: "published", Value: 1234, Int: true}, {Key: "dropped", Value: 5, Int: true}}}
	dev := record.Event{Kind: record.EventSelf, Device: 0, Attrs: []record.Attr{{Key: "scope", Value: "device"}, {Key: "gpu", Value: "0"}, {Key: "uuid", Value: "GPU-x"}},
		Fields: []record.Field{{Key: "nvml_calls_per_s", Value: 12.5}}}
	o.Write(context.Background(), &record.Batch{Events: []record.Event{ev, dev}})
	fams := scrape(t, o)
	if m := find(fams, "gpusampler_self_output_published", map[string]string{"output": "prometheus", "Hostname": "node7"}); m == nil || valueOf(m) != 1234 {
		t.Errorf("gpusampler_self_output_published = %v", m)
	}
	if m := find(fams, "gpusampler_self_device_nvml_calls_per_s", map[string]string{"gpu": "0", "UUID": "GPU-x"}); m == nil || valueOf(m) != 12.5 {
		t.Errorf("gpusampler_self_device_nvml_calls_per_s = %v", m)
	}
	clk.Add(time.Hour) // no refresh: gone
	if fams := scrape(t, o); fams["gpusampler_self_output_published"] != nil {
		t.Error("self-metrics of a silent output still exposed")
	}
}

// TestSimulatedMarked: simulated devices' series carry simulated="true".
func TestSimulatedMarked(t *testing.T) {
	o, _ := newTest(t, Options{})
	devs := devices(1)
	devs[0].Simulated = true
	o.Write(context.Background(), fullBatch(devs, t0.UnixNano()))
	if m := find(scrape(t, o), "DCGM_FI_DEV_GPU_TEMP", map[string]string{"simulated": "true"}); m == nil {
		t.Error("simulated device not marked")
	}
}

func TestHostLabelSpelling(t *testing.T) {
	o, _ := newTest(t, Options{HostLabel: HostLabelNew})
	o.Write(context.Background(), fullBatch(devices(1), t0.UnixNano()))
	m := find(scrape(t, o), "DCGM_FI_DEV_GPU_TEMP", map[string]string{"hostname": "node7"})
	if m == nil || labelsOf(m)["Hostname"] != "" {
		t.Errorf("host label: %v", m)
	}
}

// Bad input: each a clear error.

func TestAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = New(Options{Listen: ln.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "listen =") {
		t.Fatalf("New on a taken address = %v", err)
	}
	// on :9400 the message names dcgm-exporter
	msg := listenError(":9400", fmt.Errorf("bind: %w", errAddrInUse())).Error()
	for _, want := range []string{"address :9400 in use", "dcgm-exporter", "stop it or set listen"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
}

func TestUnreadableWebConfig(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yml")
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\nbogus: 1\n"), 0o600)
	for _, path := range []string{missing, bad} {
		_, err := New(Options{Listen: "127.0.0.1:0", WebConfig: path})
		if err == nil || !strings.Contains(err.Error(), "web_config "+path) {
			t.Errorf("web config %s: err = %v", filepath.Base(path), err)
		}
	}
}

func TestUnknownNaming(t *testing.T) {
	_, err := New(Options{Listen: "127.0.0.1:0", Naming: "influx"})
	if err == nil || !strings.Contains(err.Error(), `unknown naming scheme "influx"`) {
		t.Errorf("New(naming influx) = %v", err)
	}
	reg := outputs.NewRegistry(Kind())
	_, err = appconfig.Parse("gpusampler.toml", []byte("[[outputs.prometheus]]\n  naming = \"influx\"\n  bogus = 1\n"), appconfig.Options{Registry: reg})
	if err == nil || !strings.Contains(err.Error(), `gpusampler.toml:2: outputs.prometheus[0].naming: unknown value "influx"`) ||
		!strings.Contains(err.Error(), "gpusampler.toml:3: outputs.prometheus[0].bogus: unknown key") {
		t.Errorf("config error = %v", err)
	}
}

func TestConfigParse(t *testing.T) {
	reg := outputs.NewRegistry(Kind())
	c, err := appconfig.Parse("g.toml", []byte("[[outputs.prometheus]]\n listen = \"127.0.0.1:0\"\n naming = \"prometheus\"\n host_label = \"hostname\"\n window = \"30s\"\n stale = \"5s\"\n"), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Outputs[0].Options.(Options)
	want := Options{Listen: "127.0.0.1:0", Path: DefaultPath, Naming: NamingPrometheus, HostLabel: HostLabelNew, Window: 30 * time.Second, Stale: 5 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("options %+v, want %+v", got, want)
	}
	out, err := Kind().Build(&c.Outputs[0].Block, outputs.BuildEnv{Host: "h", Catalog: catalog.Default()})
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
}

// TestCloseStopsServer: after Close the port is free again.
func TestCloseStopsServer(t *testing.T) {
	o, _ := newTest(t, Options{})
	addr := o.Addr().String()
	if err := o.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("port still held after Close: %v", err)
	}
	ln.Close()
	if err := o.Write(context.Background(), &record.Batch{}); !errors.Is(err, record.ErrClosed) {
		t.Errorf("Write after Close = %v", err)
	}
}

var _ = slices.Contains[[]string]

// TestConcurrentWriteAndScrape exercises the lock under -race: writes with
// identity changes, events and summaries while scrapes run.
func TestConcurrentWriteAndScrape(t *testing.T) {
	o, clk := newTest(t, Options{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			b := fullBatch(devices(3), t0.UnixNano()+int64(i)*1e8)
			b.Devices[1].Generation = uint64(i)
			b.Events = []record.Event{{Kind: record.EventXID, Device: i % 3, Attrs: []record.Attr{{Key: "xid", Value: "31"}}},
				{Kind: record.EventSelf, Attrs: []record.Attr{{Key: "scope", Value: "output"}, {Key: "output", Value: "x"}}, Fields: []record.Field{{Key: "n", Value: float64(i)}}}}
			o.Write(context.Background(), b)
			clk.Add(100 * time.Millisecond)
		}
	}()
	for range 20 {
		scrape(t, o)
		get(t, o, "/healthz", 0) // any code
	}
	<-done
}
