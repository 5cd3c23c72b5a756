package opentelemetry_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	colpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the server decompresses gzip requests
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/record"
)

// collector is an in-test OTLP receiver: a gRPC MetricsService (the
// generated server of the proto module) and an OTLP/HTTP handler, both
// keeping every request they took. reply, when set, answers instead.
type collector struct {
	colpb.UnimplementedMetricsServiceServer
	mu       sync.Mutex
	reqs     []*colpb.ExportMetricsServiceRequest
	headers  []map[string]string // per request: the headers / metadata the test asked about
	encoding []string            // HTTP Content-Encoding per request
	grpcErr  func() error
	httpErr  func(w http.ResponseWriter) bool
	partial  *colpb.ExportMetricsPartialSuccess
	watch    []string // header names to record
}

func (c *collector) Export(ctx context.Context, req *colpb.ExportMetricsServiceRequest) (*colpb.ExportMetricsServiceResponse, error) {
	if c.grpcErr != nil {
		if err := c.grpcErr(); err != nil {
			return nil, err
		}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	h := map[string]string{}
	for _, k := range c.watch {
		if v := md.Get(k); len(v) > 0 {
			h[k] = v[0]
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, proto.Clone(req).(*colpb.ExportMetricsServiceRequest))
	c.headers = append(c.headers, h)
	return &colpb.ExportMetricsServiceResponse{PartialSuccess: c.partial}, nil
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("unexpected %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type")), http.StatusNotFound)
		return
	}
	if c.httpErr != nil && c.httpErr(w) {
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &colpb.ExportMetricsServiceRequest{}
	if err := proto.Unmarshal(b, req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := map[string]string{}
	for _, k := range c.watch {
		if v := r.Header.Get(k); v != "" {
			h[k] = v
		}
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.headers = append(c.headers, h)
	c.encoding = append(c.encoding, r.Header.Get("Content-Encoding"))
	partial := c.partial
	c.mu.Unlock()
	resp, _ := proto.Marshal(&colpb.ExportMetricsServiceResponse{PartialSuccess: partial})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(resp)
}

func (c *collector) requests() []*colpb.ExportMetricsServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reqs)
}

// serveGRPC starts c as an OTLP/gRPC server; it returns the endpoint.
func serveGRPC(t *testing.T, c *collector) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	colpb.RegisterMetricsServiceServer(s, c)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return "http://" + lis.Addr().String()
}

// serveHTTP starts c as an OTLP/HTTP server; it returns the endpoint.
func serveHTTP(t *testing.T, c *collector) string {
	t.Helper()
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv.URL
}

// point is one decoded data point, flattened.
type point struct {
	resource string // sorted k=v of the resource
	name     string
	unit     string
	kind     string // gauge, sum, monotonic sum, histogram
	attrs    map[string]string
	start    uint64
	time     uint64
	value    float64
	isInt    bool
	count    uint64
	sum      float64
	min, max float64
	// exp is the exponential histogram's own data (nil for others).
	exp *expData
}

// expData is an exponential histogram point's scale and buckets, and its
// metric's temporality.
type expData struct {
	scale             int32
	zeroCount         uint64
	posOffset, negOff int32
	pos, neg          []uint64
	delta             bool
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = fmt.Sprint(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.Key] = fmt.Sprint(v.DoubleValue)
		}
	}
	return m
}

func mapString(m map[string]string) string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// flatten returns every data point of the requests, in request order.
func flatten(reqs []*colpb.ExportMetricsServiceRequest) []point {
	var out []point
	for _, req := range reqs {
		for _, rm := range req.ResourceMetrics {
			res := mapString(attrMap(rm.Resource.GetAttributes()))
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					num := func(kind string, dps []*metricspb.NumberDataPoint) {
						for _, p := range dps {
							pt := point{resource: res, name: m.Name, unit: m.Unit, kind: kind, attrs: attrMap(p.Attributes),
								start: p.StartTimeUnixNano, time: p.TimeUnixNano}
							switch v := p.Value.(type) {
							case *metricspb.NumberDataPoint_AsInt:
								pt.value, pt.isInt = float64(v.AsInt), true
							case *metricspb.NumberDataPoint_AsDouble:
								pt.value = v.AsDouble
							}
							out = append(out, pt)
						}
					}
					switch d := m.Data.(type) {
					case *metricspb.Metric_Gauge:
						num("gauge", d.Gauge.DataPoints)
					case *metricspb.Metric_Sum:
						kind := "sum"
						if d.Sum.IsMonotonic {
							kind = "monotonic sum"
						}
						if d.Sum.AggregationTemporality != metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE {
							kind += " (not cumulative!)"
						}
						num(kind, d.Sum.DataPoints)
					case *metricspb.Metric_Histogram:
						for _, p := range d.Histogram.DataPoints {
							out = append(out, point{resource: res, name: m.Name, unit: m.Unit, kind: "histogram", attrs: attrMap(p.Attributes),
								start: p.StartTimeUnixNano, time: p.TimeUnixNano, count: p.Count, sum: p.GetSum(), min: p.GetMin(), max: p.GetMax()})
						}
					case *metricspb.Metric_ExponentialHistogram:
						for _, p := range d.ExponentialHistogram.DataPoints {
							out = append(out, point{resource: res, name: m.Name, unit: m.Unit, kind: "exponential histogram", attrs: attrMap(p.Attributes),
								start: p.StartTimeUnixNano, time: p.TimeUnixNano, count: p.Count, sum: p.GetSum(), min: p.GetMin(), max: p.GetMax(),
								exp: &expData{scale: p.Scale, zeroCount: p.ZeroCount, posOffset: p.GetPositive().GetOffset(),
									pos: p.GetPositive().GetBucketCounts(), negOff: p.GetNegative().GetOffset(), neg: p.GetNegative().GetBucketCounts(),
									delta: d.ExponentialHistogram.AggregationTemporality == metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA}})
						}
					}
				}
			}
		}
	}
	return out
}

// decodeSamples maps the device sample points back to records: the
// catalog metric whose OTel naming has the point's name and attributes,
// the device from gpusampler.gpu.index, the value unscaled (rounded for
// integer metrics). Points of no catalog metric are left out.
func decodeSamples(t *testing.T, reqs []*colpb.ExportMetricsServiceRequest) []record.Sample {
	t.Helper()
	cat := catalog.Default()
	byName := map[string][]catalog.Metric{}
	for _, m := range cat.All() {
		byName[m.OTel().Name] = append(byName[m.OTel().Name], m)
	}
	var out []record.Sample
	for _, p := range flatten(reqs) {
		var id catalog.MetricID
		var n catalog.OTelNaming
		for _, m := range byName[p.name] {
			on := m.OTel()
			match := true
			for _, a := range on.Attrs {
				if p.attrs[a[0]] != a[1] {
					match = false
				}
			}
			if match {
				id, n = m.ID, on
				break
			}
		}
		if id == 0 || p.kind == "histogram" || p.kind == "exponential histogram" {
			continue
		}
		var dev uint16
		fmt.Sscan(p.attrs["gpusampler.gpu.index"], &dev)
		v := p.value / n.Scale
		if m, _ := cat.Get(id); m.Type == catalog.Int {
			v = math.Round(v)
		}
		var flags record.Flags
		if p.attrs["gpusampler.point_read"] == "true" {
			flags = record.FlagPointRead
		}
		out = append(out, record.Sample{TimeNS: int64(p.time), Value: v, Device: dev, Metric: id, Flags: flags})
	}
	return out
}

// gunzipped reports whether b is gzip data.
func gunzipped(b []byte) bool { return bytes.HasPrefix(b, []byte{0x1f, 0x8b}) }

// newOutput is opentelemetry.New with the tests' export timeout,
// slowMachine, unless opts sets one.
func newOutput(opts opentelemetry.Options) (*opentelemetry.Output, error) {
	if opts.Timeout == 0 {
		opts.Timeout = slowMachine
	}
	return opentelemetry.New(opts)
}
