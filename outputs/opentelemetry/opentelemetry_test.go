package opentelemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	colpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

var protocols = []string{opentelemetry.ProtocolGRPC, opentelemetry.ProtocolHTTP}

func serve(t *testing.T, protocol string, c *collector) string {
	if protocol == opentelemetry.ProtocolGRPC {
		return serveGRPC(t, c)
	}
	return serveHTTP(t, c)
}

func TestConformance(t *testing.T) {
	for _, protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			var cur *collector
			outputtest.Run(t, outputtest.Harness{
				New: func(t *testing.T) record.Output {
					cur = &collector{}
					out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{serve(t, protocol, cur)},
						Host: "node1", Gzip: true, Timeout: slowMachine})
					if err != nil {
						t.Fatal(err)
					}
					return out
				},
				Received: func(t *testing.T) []record.Sample { return decodeSamples(t, cur.requests()) },
			})
		})
	}
}

var t0 = int64(1_700_000_000_000_000_000)

// slowMachine is the export timeout of tests that send large batches: a
// liveness bound, far above what a loaded machine needs.
const slowMachine = 2 * time.Minute

// The points the collector decodes are the records written: every sample
// one point at its own timestamp, with the OTel name, unit, instrument,
// attributes and value of its catalog naming, the device's hw.*
// attributes, and resources by attribution.
func TestPointsEqualRecords(t *testing.T) {
	for _, protocol := range protocols {
		t.Run(protocol, func(t *testing.T) {
			c := &collector{}
			out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{serve(t, protocol, c)},
				Host: "node1", GlobalTags: map[string]string{"cluster": "c1"}, Now: func() time.Time { return time.Unix(0, t0-5e9) }})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			dev0 := outputtest.Device
			dev0.Attribution = record.Attribution{Pod: "train-0", Namespace: "ml", Container: "main"}
			dev1 := record.Device{Index: 1, UUID: "GPU-1", Name: "Test GPU", DriverVersion: "570.1", VBIOSVersion: "96.0", Simulated: true,
				Attribution: record.Attribution{HPCJob: "4242"}}
			b := &record.Batch{Seq: 1, Devices: []record.Device{dev0, dev1}, Samples: []record.Sample{
				{TimeNS: t0, Value: 73, Device: 0, Metric: catalog.MetricUtilGPU},
				{TimeNS: t0 + 1e6, Value: 5, Device: 0, Metric: catalog.MetricUtilEncoder, Flags: record.FlagPointRead},
				{TimeNS: t0 + 2e6, Value: 250.5, Device: 1, Metric: catalog.MetricPowerDraw},
				{TimeNS: t0 + 3e6, Value: 1000, Device: 1, Metric: catalog.MetricEnergy},
				{TimeNS: t0 + 4e6, Value: 2048, Device: 1, Metric: catalog.MetricMemoryUsed},
				{TimeNS: t0 + 5e6, Value: 71, Device: 1, Metric: catalog.MetricTempGPU},
				{TimeNS: t0 + 6e6, Value: 1500, Device: 1, Metric: catalog.MetricEnergy},
				{TimeNS: t0 + 7e6, Value: 10, Device: 1, Metric: catalog.MetricEnergy},       // reset
				{TimeNS: t0 + 8e6, Value: 1024, Device: 1, Metric: catalog.MetricMemoryUsed}, // memory freed: no reset
			}}
			if err := out.Write(context.Background(), b); err != nil {
				t.Fatal(err)
			}
			pts := flatten(c.requests())
			if len(pts) != len(b.Samples) {
				t.Fatalf("%d points, want %d: %+v", len(pts), len(b.Samples), pts)
			}
			find := func(name string, time int64) point {
				for _, p := range pts {
					if p.name == name && p.time == uint64(time) {
						return p
					}
				}
				t.Fatalf("no point %s at %d in %+v", name, time, pts)
				return point{}
			}
			res0 := "cluster=c1,host.name=node1,k8s.container.name=main,k8s.namespace.name=ml,k8s.pod.name=train-0,service.name=gpusampler"
			res1 := "cluster=c1,gpusampler.hpc_job=4242,host.name=node1,service.name=gpusampler"
			for _, tc := range []struct {
				name     string
				time     int64
				resource string
				unit     string
				kind     string
				value    float64
				isInt    bool
				start    int64
				attrs    map[string]string
			}{
				{"hw.gpu.utilization", t0, res0, "1", "gauge", 0.73, false, 0,
					map[string]string{"hw.gpu.task": "general", "hw.type": "gpu", "hw.id": dev0.UUID, "hw.vendor": "NVIDIA", "gpusampler.gpu.index": "0"}},
				{"hw.gpu.utilization", t0 + 1e6, res0, "1", "gauge", 0.05, false, 0,
					map[string]string{"hw.gpu.task": "encoder", "gpusampler.point_read": "true"}},
				{"hw.power", t0 + 2e6, res1, "W", "gauge", 250.5, false, 0,
					map[string]string{"hw.type": "gpu", "hw.id": "GPU-1", "hw.name": "Test GPU (simulated)", "hw.model": "Test GPU",
						"hw.driver_version": "570.1", "hw.firmware_version": "96.0", "gpusampler.simulated": "true", "gpusampler.gpu.index": "1"}},
				{"hw.energy", t0 + 3e6, res1, "J", "monotonic sum", 1, false, t0 - 5e9, nil},
				{"hw.energy", t0 + 6e6, res1, "J", "monotonic sum", 1.5, false, t0 - 5e9, nil},
				{"hw.energy", t0 + 7e6, res1, "J", "monotonic sum", 0.01, false, t0 + 6e6, nil},
				{"hw.gpu.memory.usage", t0 + 4e6, res1, "By", "sum", 2048 << 20, true, t0 - 5e9, nil},
				// An UpDownCounter going down continues its stream (start kept).
				{"hw.gpu.memory.usage", t0 + 8e6, res1, "By", "sum", 1024 << 20, true, t0 - 5e9, nil},
				{"gpusampler.temperature_gpu", t0 + 5e6, res1, "Cel", "gauge", 71, true, 0, nil},
			} {
				p := find(tc.name, tc.time)
				if p.resource != tc.resource || p.unit != tc.unit || p.kind != tc.kind || p.isInt != tc.isInt ||
					p.start != uint64(tc.start) || p.value != tc.value {
					t.Errorf("%s at %d: got %+v\nwant %+v", tc.name, tc.time, p, tc)
				}
				for k, v := range tc.attrs {
					if p.attrs[k] != v {
						t.Errorf("%s at %d: attribute %s = %q, want %q (all: %v)", tc.name, tc.time, k, p.attrs[k], v, p.attrs)
					}
				}
			}
			// A second batch continues the counter's stream (start kept).
			if err := out.Write(context.Background(), &record.Batch{Seq: 2, Samples: []record.Sample{
				{TimeNS: t0 + 8e6, Value: 20, Device: 1, Metric: catalog.MetricEnergy}}}); err != nil {
				t.Fatal(err)
			}
			pts = flatten(c.requests())
			if p := pts[len(pts)-1]; p.start != uint64(t0+6e6) || p.value != 0.02 || p.attrs["hw.id"] != "GPU-1" {
				t.Errorf("next batch's counter point %+v", p)
			}
		})
	}
}

// Events, self-metrics and processes become points too; summaries become
// histogram points (gauges) or the window's last cumulative value
// (counters).
func TestEveryRecordKind(t *testing.T) {
	c := &collector{}
	out, err := newOutput(opentelemetry.Options{Endpoints: []string{serveGRPC(t, c)}, Host: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	b := outputtest.AllKinds()
	b.Summaries = append(b.Summaries, record.Summary{StartNS: t0, IntervalNS: 1e9, Mean: 1500, Min: 1000, Max: 2000, Last: 2000,
		Count: 2, Device: 0, Metric: catalog.MetricEnergy})
	if err := out.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	pts := flatten(c.requests())
	byName := map[string][]point{}
	for _, p := range pts {
		byName[p.name] = append(byName[p.name], p)
	}
	// 8 samples, 3 summaries, 1 event, 5 process fields, 2 self fields
	if len(pts) != 8+3+1+5+2 {
		t.Fatalf("%d points: %v", len(pts), byName)
	}
	if x := byName[opentelemetry.EventMetric]; len(x) != 1 || x[0].attrs["gpusampler.event.kind"] != "xid" ||
		x[0].attrs["gpusampler.event.xid"] != "79" || x[0].attrs["hw.id"] != outputtest.Device.UUID || x[0].time != uint64(t0) {
		t.Errorf("event points %+v", x)
	}
	if x := byName["gpusampler.process.memory_used"]; len(x) != 1 || x[0].value != 70000 || x[0].attrs["process.pid"] != "1234" ||
		x[0].attrs["process.executable.name"] != "python3" || x[0].attrs["process.command_line"] != "python3 train.py" {
		t.Errorf("process points %+v", x)
	}
	if x := byName["gpusampler.self.write_latency_ratio"]; len(x) != 1 || x[0].value != 0.25 || x[0].attrs["gpusampler.self.output"] != "test" {
		t.Errorf("self points %+v", x)
	}
	var hist []point
	for _, p := range pts {
		if strings.Contains(p.kind, "histogram") {
			hist = append(hist, p)
		}
	}
	if len(hist) != 2 {
		t.Fatalf("histogram points %+v", hist)
	}
	for _, h := range hist {
		switch h.name {
		case "hw.power":
			if h.count != 3 || h.sum != 753.75 || h.min != 250.5 || h.max != 252.5 || h.start != uint64(t0) || h.time != uint64(t0+1e9) {
				t.Errorf("power window %+v", h)
			}
		case "hw.gpu.utilization":
			if h.count != 3 || h.sum != 1.23 || h.min != 0.4 || h.max != 0.42 {
				t.Errorf("utilization window %+v", h)
			}
		default:
			t.Errorf("histogram of %s", h.name)
		}
	}
	if x := byName["hw.energy"]; len(x) != 1 || x[0].kind != "monotonic sum" || x[0].value != 2 || x[0].time != uint64(t0+1e9) {
		t.Errorf("counter window %+v", x)
	}
}

// Headers go with every export, over both protocols; gzip compresses.
func TestHeadersAndGzip(t *testing.T) {
	for _, protocol := range protocols {
		for _, gz := range []bool{false, true} {
			c := &collector{watch: []string{"authorization", "x-tenant"}}
			out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{serve(t, protocol, c)},
				Headers: map[string]string{"Authorization": "Bearer s3cret", "X-Tenant": "gpu"}, Gzip: gz, Timeout: slowMachine})
			if err != nil {
				t.Fatal(err)
			}
			if err := out.Write(context.Background(), &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device},
				Samples: outputtest.Samples(2000)}); err != nil {
				t.Fatal(err)
			}
			out.Close()
			if got := c.headers[0]; got["authorization"] != "Bearer s3cret" && got["Authorization"] != "Bearer s3cret" {
				t.Errorf("%s: headers %v", protocol, got)
			}
			s := out.Stats()
			if gz != (s.WireBytes < s.Bytes/2) {
				t.Errorf("%s gzip=%v: %d bytes sent as %d on the wire", protocol, gz, s.Bytes, s.WireBytes)
			}
			if protocol == opentelemetry.ProtocolHTTP && (c.encoding[0] == "gzip") != gz {
				t.Errorf("HTTP gzip=%v: Content-Encoding %q", gz, c.encoding[0])
			}
			if got := decodeSamples(t, c.requests()); len(got) != 2000 {
				t.Errorf("%s gzip=%v: %d samples decoded", protocol, gz, len(got))
			}
		}
	}
}

// A header's value appears in no error, log line or String, whatever
// fails.
func TestHeadersNeverLogged(t *testing.T) {
	const secret = "s3cret-token-value"
	for _, protocol := range protocols {
		var logs bytes.Buffer
		c := &collector{grpcErr: func() error { return status.Error(codes.Unauthenticated, "bad token") },
			httpErr: func(w http.ResponseWriter) bool { http.Error(w, "bad token", http.StatusUnauthorized); return true }}
		dead := deadEndpoint(t)
		out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{dead, serve(t, protocol, c)},
			Headers: map[string]string{"authorization": "Bearer " + secret}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		werr := out.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(3)})
		if werr == nil || record.Classify(werr) != record.KindUnavailable {
			t.Fatalf("%s: Write = %v (%v), want unavailable", protocol, werr, record.Classify(werr))
		}
		c.grpcErr, c.httpErr, c.partial = nil, nil, &colpb.ExportMetricsPartialSuccess{RejectedDataPoints: 1, ErrorMessage: "one bad"}
		if err := out.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(3)}); err != nil {
			t.Fatal(err)
		}
		out.Close()
		for what, s := range map[string]string{"error": werr.Error(), "log": logs.String(), "String": out.String()} {
			if strings.Contains(s, secret) {
				t.Errorf("%s: the header's value is in the %s: %s", protocol, what, s)
			}
		}
		if !strings.Contains(logs.String(), "failed over") || !strings.Contains(logs.String(), "rejected_points=1") {
			t.Errorf("%s: logs %s", protocol, logs.String())
		}
	}
}

// deadEndpoint returns an endpoint nobody listens on.
func deadEndpoint(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return "http://" + addr
}

// With endpoints, a batch the first collector cannot take goes to the next,
// which keeps the following batches; a collector that refuses a batch
// permanently ends the Write.
func TestFailover(t *testing.T) {
	for _, protocol := range protocols {
		a, b := &collector{}, &collector{}
		ea := serve(t, protocol, a)
		down := true
		a.grpcErr = func() error {
			if down {
				return status.Error(codes.Unavailable, "draining")
			}
			return nil
		}
		a.httpErr = func(w http.ResponseWriter) bool {
			if down {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return down
		}
		out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{ea, serve(t, protocol, b)}})
		if err != nil {
			t.Fatal(err)
		}
		for seq := range uint64(3) {
			if err := out.Write(context.Background(), &record.Batch{Seq: seq + 1, Samples: outputtest.Samples(5)}); err != nil {
				t.Fatalf("%s: Write %d = %v", protocol, seq+1, err)
			}
		}
		down = false // back, but the output stays with b
		if err := out.Write(context.Background(), &record.Batch{Seq: 4, Samples: outputtest.Samples(5)}); err != nil {
			t.Fatal(err)
		}
		if s := out.Stats(); len(a.requests()) != 0 || len(b.requests()) != 4 || s.Failovers != 1 {
			t.Errorf("%s: a took %d, b %d, failovers %d", protocol, len(a.requests()), len(b.requests()), s.Failovers)
		}
		out.Close()
	}
}

// A partial success is a success: the rejected points are counted (and
// reported in the output's stats) and the batch is not offered again.
func TestPartialSuccess(t *testing.T) {
	for _, protocol := range protocols {
		c := &collector{partial: &colpb.ExportMetricsPartialSuccess{RejectedDataPoints: 3, ErrorMessage: "3 points out of order"}}
		out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{serve(t, protocol, c)}})
		if err != nil {
			t.Fatal(err)
		}
		for seq := range uint64(2) {
			if err := out.Write(context.Background(), &record.Batch{Seq: seq + 1, Samples: outputtest.Samples(10)}); err != nil {
				t.Fatalf("%s: Write = %v", protocol, err)
			}
		}
		s := out.Stats()
		if s.PartialSuccess != 2 || s.RejectedPoints != 6 || s.Points != 20 {
			t.Errorf("%s: stats %+v", protocol, s)
		}
		if record.FieldValue(out.ReportStats(nil), "rejected_points") != 6 {
			t.Errorf("%s: ReportStats %v", protocol, out.ReportStats(nil))
		}
		out.Close()
	}
}

// The collector's refusals are classified as OTLP says, with its retry
// delay handed to whoever retries.
func TestErrorClassification(t *testing.T) {
	retryInfo := func(c codes.Code, d time.Duration) error {
		st, _ := status.New(c, "memory limiter").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		return st.Err()
	}
	for _, tc := range []struct {
		name  string
		err   error
		kind  record.ErrorKind
		delay time.Duration
	}{
		{"unavailable", status.Error(codes.Unavailable, "down"), record.KindUnavailable, 0},
		{"resource exhausted with RetryInfo", retryInfo(codes.ResourceExhausted, 3*time.Second), record.KindUnavailable, 3 * time.Second},
		{"resource exhausted without RetryInfo", status.Error(codes.ResourceExhausted, "too big"), record.KindPermanent, 0},
		{"unavailable with RetryInfo", retryInfo(codes.Unavailable, 1500*time.Millisecond), record.KindUnavailable, 1500 * time.Millisecond},
		{"aborted", status.Error(codes.Aborted, "x"), record.KindRetryable, 0},
		{"data loss", status.Error(codes.DataLoss, "x"), record.KindRetryable, 0},
		{"invalid argument", status.Error(codes.InvalidArgument, "bad point"), record.KindPermanent, 0},
		{"unimplemented", status.Error(codes.Unimplemented, "not a collector"), record.KindPermanent, 0},
		{"unauthenticated", status.Error(codes.Unauthenticated, "token"), record.KindUnavailable, 0},
	} {
		c := &collector{grpcErr: func() error { return tc.err }}
		out, err := newOutput(opentelemetry.Options{Endpoints: []string{serveGRPC(t, c)}})
		if err != nil {
			t.Fatal(err)
		}
		werr := out.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(1)})
		d, hinted := record.RetryAfterOf(werr)
		if record.Classify(werr) != tc.kind || d != tc.delay || hinted != (tc.delay > 0) {
			t.Errorf("gRPC %s: %v is %v with hint %v, want %v with %v", tc.name, werr, record.Classify(werr), d, tc.kind, tc.delay)
		}
		out.Close()
	}
	for _, tc := range []struct {
		status     int
		retryAfter string
		kind       record.ErrorKind
		delay      time.Duration
	}{
		{http.StatusTooManyRequests, "7", record.KindUnavailable, 7 * time.Second},
		{http.StatusServiceUnavailable, "", record.KindUnavailable, 0},
		{http.StatusBadGateway, "1", record.KindUnavailable, time.Second},
		{http.StatusGatewayTimeout, "", record.KindUnavailable, 0},
		{http.StatusInternalServerError, "", record.KindRetryable, 0},
		{http.StatusBadRequest, "", record.KindPermanent, 0},
		{http.StatusRequestEntityTooLarge, "", record.KindPermanent, 0},
		{http.StatusUnauthorized, "", record.KindUnavailable, 0},
	} {
		c := &collector{httpErr: func(w http.ResponseWriter) bool {
			if tc.retryAfter != "" {
				w.Header().Set("Retry-After", tc.retryAfter)
			}
			http.Error(w, "refused", tc.status)
			return true
		}}
		out, err := newOutput(opentelemetry.Options{Protocol: opentelemetry.ProtocolHTTP, Endpoints: []string{serveHTTP(t, c)}})
		if err != nil {
			t.Fatal(err)
		}
		werr := out.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(1)})
		d, _ := record.RetryAfterOf(werr)
		if record.Classify(werr) != tc.kind || d != tc.delay || !strings.Contains(werr.Error(), "refused") {
			t.Errorf("HTTP %d: %v is %v with hint %v, want %v with %v", tc.status, werr, record.Classify(werr), d, tc.kind, tc.delay)
		}
		if s := out.Stats(); (tc.delay > 0) != (s.RetryHints == 1) {
			t.Errorf("HTTP %d: retry hints %d", tc.status, s.RetryHints)
		}
		out.Close()
	}
	// No collector at all: unavailable.
	out, err := newOutput(opentelemetry.Options{Protocol: opentelemetry.ProtocolHTTP, Endpoints: []string{deadEndpoint(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if werr := out.Write(context.Background(), &record.Batch{Seq: 1, Samples: outputtest.Samples(1)}); record.Classify(werr) != record.KindUnavailable {
		t.Errorf("no collector: %v", werr)
	}
}

// A batch offered again after a failure is encoded as the first time: the
// counters' start times do not move (the failed attempt's state is
// dropped).
func TestRetryKeepsCounterStart(t *testing.T) {
	fail := true
	c := &collector{grpcErr: func() error {
		if fail {
			return status.Error(codes.Unavailable, "down")
		}
		return nil
	}}
	out, err := newOutput(opentelemetry.Options{Endpoints: []string{serveGRPC(t, c)}, Now: func() time.Time { return time.Unix(0, t0) }})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	b := &record.Batch{Seq: 1, Samples: []record.Sample{{TimeNS: t0 + 1, Value: 100, Metric: catalog.MetricEnergy},
		{TimeNS: t0 + 2, Value: 200, Metric: catalog.MetricEnergy}}}
	if err := out.Write(context.Background(), b); err == nil {
		t.Fatal("Write to a collector that is down succeeded")
	}
	fail = false
	if err := out.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	for _, p := range flatten(c.requests()) {
		if p.start != uint64(t0) {
			t.Errorf("point %+v: start moved (a retry taken as a counter reset)", p)
		}
	}
}

// A batch over max_request_bytes goes in several requests; offered again
// after one of them failed, it sends only the parts not yet taken: every
// sample arrives once.
func TestSplitRequests(t *testing.T) {
	for _, protocol := range protocols {
		n := 0
		c := &collector{}
		c.grpcErr = func() error {
			if n++; n == 3 {
				return status.Error(codes.Unavailable, "restarting")
			}
			return nil
		}
		c.httpErr = func(w http.ResponseWriter) bool {
			if n++; n == 3 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}
			return false
		}
		out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{serve(t, protocol, c)},
			MaxRequestBytes: 64 << 10, Timeout: slowMachine})
		if err != nil {
			t.Fatal(err)
		}
		want := outputtest.Samples(5000)
		b := &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Samples: want}
		if err := out.Write(context.Background(), b); record.Classify(err) != record.KindUnavailable {
			t.Fatalf("%s: first Write = %v", protocol, err)
		}
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatalf("%s: Write again = %v", protocol, err)
		}
		got := decodeSamples(t, c.requests())
		if len(got) != len(want) {
			t.Fatalf("%s: %d samples arrived, want %d", protocol, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: sample %d = %+v, want %+v", protocol, i, got[i], want[i])
			}
		}
		if reqs := c.requests(); len(reqs) < 4 {
			t.Errorf("%s: %d requests (not split?)", protocol, len(reqs))
		}
		for _, r := range c.requests() {
			if sz := proto.Size(r); sz > 64<<10 {
				t.Errorf("%s: a request of %d bytes", protocol, sz)
			}
		}
		out.Close()
	}
}

// Records of uneven size (processes with long command lines beside small
// samples) split in equal runs still leave a run over the limit: it is
// split again, so that no request is over max_request_bytes but one of a
// single record larger than that.
func TestSplitUnevenRecords(t *testing.T) {
	const limit = 64 << 10
	for _, protocol := range protocols {
		c := &collector{}
		out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{serve(t, protocol, c)},
			MaxRequestBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		b := &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Samples: outputtest.Samples(2000)}
		for i := range 100 {
			cmd := "sleep 1"
			switch {
			case i == 0:
				cmd = strings.Repeat("y", 100<<10) // a single record over the limit
			case i < 10:
				cmd = strings.Repeat("x", 30<<10) // 270 KiB more in the first tenth of the events
			}
			b.Events = append(b.Events, record.Event{Kind: record.EventProcess, Device: outputtest.Device.Index,
				StartNS: int64(i+1) * 1e6, EndNS: int64(i+1) * 1e6,
				Attrs:  []record.Attr{{Key: record.ProcessAttrCmdline, Value: cmd}},
				Fields: []record.Field{record.IntField(record.ProcessFieldPID, uint64(100+i)), record.IntField(record.ProcessFieldUsedMemory, 10)}})
		}
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatalf("%s: Write = %v", protocol, err)
		}
		points := 0
		for i, r := range c.requests() {
			p := len(flatten([]*colpb.ExportMetricsServiceRequest{r}))
			if sz := proto.Size(r); sz > limit && p != 1 {
				t.Errorf("%s: request %d has %d bytes (%d points), over max_request_bytes %d", protocol, i, sz, p, limit)
			}
			points += p
		}
		if want := int(out.Stats().Points); points != want || want != 2000+100 {
			t.Errorf("%s: %d points arrived, %d encoded, want %d", protocol, points, want, 2000+100)
		}
		out.Close()
	}
}

// A part of a split batch that the collector refuses for good costs only
// its own points: the other parts are sent, the Write succeeds (the batch
// was taken in part, as with a partial success) and the refused points
// are counted as rejected; only a batch whose every part is refused fails.
func TestSplitPartRefused(t *testing.T) {
	for _, protocol := range protocols {
		var mu sync.Mutex
		n, refuse := 0, map[int]bool{2: true}
		c := &collector{}
		c.grpcErr = func() error {
			mu.Lock()
			defer mu.Unlock()
			if n++; refuse[n] || refuse[0] {
				return status.Error(codes.InvalidArgument, "bad part")
			}
			return nil
		}
		c.httpErr = func(w http.ResponseWriter) bool {
			mu.Lock()
			defer mu.Unlock()
			if n++; refuse[n] || refuse[0] {
				w.WriteHeader(http.StatusBadRequest)
				return true
			}
			return false
		}
		out, err := newOutput(opentelemetry.Options{Protocol: protocol, Endpoints: []string{serve(t, protocol, c)},
			MaxRequestBytes: 64 << 10})
		if err != nil {
			t.Fatal(err)
		}
		want := outputtest.Samples(5000)
		b := &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Samples: want}
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatalf("%s: Write with part 2 refused = %v, want nil (the other parts were taken)", protocol, err)
		}
		got := decodeSamples(t, c.requests())
		parts := n
		s := out.Stats()
		if parts < 4 || len(c.requests()) != parts-1 {
			t.Fatalf("%s: %d parts tried, %d taken: want every part but the refused one tried and taken", protocol, parts, len(c.requests()))
		}
		if s.PartialSuccess != 1 || int(s.RejectedPoints) != len(want)-len(got) || len(got) == 0 || s.RejectedPoints == 0 {
			t.Errorf("%s: %d of %d samples arrived, stats %+v: want the refused part's points as rejected, one partial success",
				protocol, len(got), len(want), s)
		}
		mu.Lock()
		refuse[0] = true
		mu.Unlock()
		if err := out.Write(context.Background(), &record.Batch{Seq: 2, Samples: want}); record.Classify(err) != record.KindPermanent {
			t.Errorf("%s: Write with every part refused = %v, want a permanent error", protocol, err)
		}
		if s2 := out.Stats(); s2.RejectedPoints != s.RejectedPoints || s2.PartialSuccess != 1 {
			t.Errorf("%s: a failed batch counted as rejected points: %+v", protocol, s2)
		}
		out.Close()
	}
}

// A batch with an Origin (a disk-buffer backlog replayed under another
// host name and global tags) is exported under a resource with its
// host.name and tags; the next batch without one under the output's own.
func TestOriginResource(t *testing.T) {
	c := &collector{}
	out, err := newOutput(opentelemetry.Options{Protocol: opentelemetry.ProtocolHTTP, Endpoints: []string{serve(t, opentelemetry.ProtocolHTTP, c)},
		Host: "node1", GlobalTags: map[string]string{"cluster": "c1"}, Now: func() time.Time { return time.Unix(0, t0-5e9) }})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	for i, o := range []*record.Origin{{Host: "nodeA", Tags: map[string]string{"rack": "r1"}}, nil} {
		b := &record.Batch{Seq: uint64(i + 1), Origin: o, Samples: []record.Sample{
			{TimeNS: t0 + int64(i), Value: 73, Device: 0, Metric: catalog.MetricUtilGPU}}}
		if i == 0 {
			b.Devices = []record.Device{outputtest.Device}
		}
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	pts := flatten(c.requests())
	want := []string{"host.name=nodeA,rack=r1,service.name=gpusampler", "cluster=c1,host.name=node1,service.name=gpusampler"}
	if len(pts) != 2 || pts[0].resource != want[0] || pts[1].resource != want[1] {
		t.Fatalf("points %+v, want resources %q", pts, want)
	}
}

// A window that carries its distribution is one ExponentialHistogram point
// with exactly its buckets (DELTA, start = window start, time = window
// end); a window without (restored from the aggregate journal) stays the
// one-bucket explicit histogram.
func TestSummaryExponentialHistogram(t *testing.T) {
	c := &collector{}
	out, err := newOutput(opentelemetry.Options{Endpoints: []string{serveGRPC(t, c)}, Host: "node1", Timeout: slowMachine})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	// Power samples 0, 1, 2, 4 and -0.5 W at scale 0: buckets (2^i, 2^(i+1)]
	// hold 1 (i = -1), 2 (i = 0) and 4 (i = 1); 0.5 by magnitude i = -2.
	h := &record.ExpHistogram{Scale: 0, ZeroCount: 1, PositiveOffset: -1, Positive: []uint64{1, 1, 1},
		NegativeOffset: -2, Negative: []uint64{1}}
	b := &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Summaries: []record.Summary{
		{StartNS: t0, IntervalNS: 1e9, Mean: 6.5 / 5, Min: -0.5, Max: 4, Last: 4, Count: 5, Metric: catalog.MetricPowerDraw, Hist: h},
		{StartNS: t0 + 1e9, IntervalNS: 1e9, Mean: 2, Min: 1, Max: 3, Last: 3, Count: 2, Metric: catalog.MetricPowerDraw},
	}}
	if err := out.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	var exp, explicit []point
	for _, p := range flatten(c.requests()) {
		switch p.kind {
		case "exponential histogram":
			exp = append(exp, p)
		case "histogram":
			explicit = append(explicit, p)
		}
	}
	if len(exp) != 1 || len(explicit) != 1 {
		t.Fatalf("exponential %+v, explicit %+v", exp, explicit)
	}
	p, want := exp[0], expData{scale: 0, zeroCount: 1, posOffset: -1, pos: []uint64{1, 1, 1}, negOff: -2, neg: []uint64{1}, delta: true}
	if p.name != "hw.power" || p.unit != "W" || p.count != 5 || math.Abs(p.sum-6.5) > 1e-12 || p.min != -0.5 || p.max != 4 ||
		p.start != uint64(t0) || p.time != uint64(t0+1e9) || !reflect.DeepEqual(*p.exp, want) {
		t.Errorf("exponential point %+v %+v, want count 5 sum 6.5 min -0.5 max 4, %+v", p, *p.exp, want)
	}
	if q := explicit[0]; q.name != "hw.power" || q.count != 2 || q.sum != 4 || q.start != uint64(t0+1e9) {
		t.Errorf("window without buckets %+v", q)
	}
}

// Through the aggregate wrapper as the agent builds it for this kind
// (Kind().SummaryHistograms): utilization windows arrive as exponential
// histograms of the samples in the OTel unit (ratio, percent × 0.01), each
// sample in the bucket that binning it directly gives.
func TestAggregateSendsSampleDistribution(t *testing.T) {
	c := &collector{}
	out, err := newOutput(opentelemetry.Options{Endpoints: []string{serveGRPC(t, c)}, Host: "node1", Timeout: slowMachine})
	if err != nil {
		t.Fatal(err)
	}
	hs := opentelemetry.Kind().SummaryHistograms
	if hs == nil {
		t.Fatal("the kind does not ask for window histograms")
	}
	agg, err := aggregate.New(out, aggregate.Options{Interval: time.Second, Now: func() time.Time { return time.Unix(0, t0) },
		Histograms: hs})
	if err != nil {
		t.Fatal(err)
	}
	pct := []float64{10, 20, 20, 40, 80, 95, 100, 0}
	var samples []record.Sample
	for i, v := range pct {
		samples = append(samples, record.Sample{TimeNS: t0 + int64(i)*1e8, Value: v, Metric: catalog.MetricUtilGPU},
			record.Sample{TimeNS: t0 + int64(i)*1e8, Value: float64(i), Metric: catalog.MetricEnergy})
	}
	if err := agg.Write(context.Background(), &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	if err := agg.Close(); err != nil {
		t.Fatal(err)
	}
	var exp []point
	for _, p := range flatten(c.requests()) {
		if p.kind == "exponential histogram" {
			exp = append(exp, p)
		} else if p.kind == "histogram" {
			t.Errorf("explicit histogram point %+v", p)
		}
	}
	if len(exp) != 1 || exp[0].name != "hw.gpu.utilization" {
		t.Fatalf("exponential points %+v (only the gauge's window)", exp)
	}
	p := exp[0]
	got := map[int32]uint64{}
	for i, n := range p.exp.pos {
		if n > 0 {
			got[p.exp.posOffset+int32(i)] = n
		}
	}
	want := map[int32]uint64{}
	for _, v := range pct[:7] {
		want[accum.ExpIndex(v*0.01, p.exp.scale)]++
	}
	if !reflect.DeepEqual(got, want) || p.exp.zeroCount != 1 || len(p.exp.neg) != 0 || p.count != 8 ||
		math.Abs(p.sum-3.65) > 1e-9 || p.min != 0 || p.max != 1 || !p.exp.delta {
		t.Errorf("point %+v %+v: buckets %v, want %v (zero 1, count 8, sum 3.65, min 0, max 1)", p, *p.exp, got, want)
	}
	if p.exp.scale < 3 {
		t.Errorf("scale %d: 8 values in [0.1, 1] fit 160 buckets at a finer scale", p.exp.scale)
	}
}
