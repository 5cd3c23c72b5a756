package conservation_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	colpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // the sink takes gzip requests
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/record"
)

// The OpenTelemetry cells: a real opentelemetry output exporting over
// OTLP/gRPC (hop "otlp": in process; "otlpshared": an instance in the
// shared outputs process, as `gpusampler run` runs it) or OTLP/HTTP (hop
// "otlphttp", in process) to an in-test OTLP receiver, otlpSink, that
// turns every export request back into records and hands them to a
// conservation Recorder: the cell's record file holds what the collector
// received, in the terms the witness is compared in, and the control
// words act on the wire (down: UNAVAILABLE / 503; poison:
// INVALID_ARGUMENT / 400, a permanent refusal).
//
// OTLP carries less than a record batch: no device records (every point
// carries its device's attributes instead), a window as what a histogram
// carries, self-metrics and processes as one point per field. check
// compares an OTLP cell on that projection of the witness (projectOTLP).

// otlpHops are the OTLP cells' hops: the protocol they export with.
var otlpHops = map[string]string{"otlp": opentelemetry.ProtocolGRPC, "otlphttp": opentelemetry.ProtocolHTTP,
	"otlpshared": opentelemetry.ProtocolGRPC}

// otlpScenarios are the scenarios the OTLP cells run in.
var otlpScenarios = map[string]bool{"clean": true, "down": true, "refuse": true, "sighup": true, "sighupdown": true, "restart": true}

func isOTLP(c cell) bool { return otlpHops[c.hop] != "" }

// otlpCells returns the OTLP cells of scenario sc that its cell filter
// keeps: OTLP/gRPC in process behind every buffer, raw and aggregating;
// OTLP/HTTP (the same output past its exporter) unbuffered raw and behind
// a disk buffer aggregating; OTLP/gRPC in the shared outputs process
// unbuffered raw, behind a memory buffer aggregating and a disk buffer raw.
func otlpCells(sc scenario) []cell {
	var out []cell
	for _, b := range buffers {
		for _, m := range modes {
			out = append(out, cell{"otlp", b, m})
		}
	}
	out = append(out, cell{"otlphttp", "none", "raw"}, cell{"otlphttp", "disk", "agg"},
		cell{"otlpshared", "none", "raw"}, cell{"otlpshared", "memory", "agg"}, cell{"otlpshared", "disk", "raw"})
	if sc.cells != nil {
		out = slices.DeleteFunc(out, func(c cell) bool { return !sc.cells(c) })
	}
	return out
}

// TestMatrixOTLP is the conservation matrix's OpenTelemetry cells: the
// scenarios of otlpScenarios, each run with the OTLP cells beside a
// witness (in an agent of their own: with the record cells beside them
// every self-metrics tick would reach twice as many outputs), compared as
// TestMatrix compares its cells, on what OTLP carries (projectOTLP).
func TestMatrixOTLP(t *testing.T) {
	var table []string
	for _, sc := range scenarios {
		if !otlpScenarios[sc.name] {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			table = append(table, runScenario(t, sc, otlpCells(sc))...)
		})
	}
	t.Logf("conservation matrix, OpenTelemetry cells (records as OTLP carries them):\n%s", strings.Join(table, "\n"))
}

// otlpInprocKind is the opentelemetry output kind run in process, as
// kind "otlpinproc" (the matrix's host registry starts kind
// "opentelemetry" in the shared recordplugin process).
func otlpInprocKind() outputs.Kind {
	k := opentelemetry.Kind()
	k.Kind, k.OutOfProcess = "otlpinproc", false
	return k
}

// otlpBlock returns the config block of OTLP cell c, starting its sink on
// first use and pointing it at the current run's record file.
func (e *env) otlpBlock(c cell, common string) string {
	n := c.name()
	s := e.otlp[n]
	if s == nil {
		if e.otlp == nil {
			e.otlp = map[string]*otlpSink{}
		}
		s = startOTLPSink(e, c)
		e.otlp[n] = s
	}
	s.use(e.recordFile(n, e.run), e.controlFile(n))
	// write_timeout 20s, the export's timeout 10s: far above what a
	// loaded machine needs, so that no export times out after the sink
	// took it (OTLP has no sequence number: it would arrive twice).
	common = writeTimeout.ReplaceAllString(common, `write_timeout = "20s"`)
	kind := "otlpinproc"
	if c.hop == "otlpshared" {
		kind = "opentelemetry"
	}
	return fmt.Sprintf("\n[[outputs.%s]]\n%s  protocol = %q\n  endpoint = %q\n  timeout = \"10s\"\n",
		kind, common, otlpHops[c.hop], s.endpoint)
}

var writeTimeout = regexp.MustCompile(`write_timeout = "[^"]*"`)

// otlpSink is one OTLP cell's receiver: an OTLP/gRPC MetricsService or an
// OTLP/HTTP /v1/metrics handler on a loopback port, recording each export
// request as one batch of records (a Recorder line). Requests are numbered
// in the Seq of their line (OTLP carries no batch number); a request that
// arrives again with the same records keeps its first number, so the
// matrix counts it as a duplicate delivery (the dup column), as it does
// for the record cells' batches, and anything else extra fails the cell.
type otlpSink struct {
	colpb.UnimplementedMetricsServiceServer
	agg      bool // the cell aggregates: catalog metrics' points are windows
	endpoint string

	mu   sync.Mutex
	rec  *conservation.Recorder
	path string
	seq  uint64
	// seqOf is the sequence number given to each request content taken
	// (the batch it becomes, as JSON without its Seq): a request that
	// arrives again unchanged gets its first copy's number, so the matrix
	// counts it as a duplicate delivery (same seq and content), exactly as
	// for the record cells, whose batches carry the pump's Seq.
	seqOf map[string]uint64
}

func startOTLPSink(e *env, c cell) *otlpSink {
	s := &otlpSink{agg: c.mode == "agg"}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	s.endpoint = "http://" + lis.Addr().String()
	if otlpHops[c.hop] == opentelemetry.ProtocolGRPC {
		srv := grpc.NewServer()
		colpb.RegisterMetricsServiceServer(srv, s)
		go srv.Serve(lis)
		e.t.Cleanup(srv.Stop)
	} else {
		srv := &http.Server{Handler: s}
		go srv.Serve(lis)
		e.t.Cleanup(func() { srv.Close() })
	}
	e.t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.rec != nil {
			s.rec.Close()
		}
	})
	return s
}

// use records into path from now on (a new run, a new file).
func (s *otlpSink) use(path, control string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if path == s.path {
		return
	}
	if s.rec != nil {
		s.rec.Close()
	}
	rec, err := conservation.NewRecorder(path, control)
	if err != nil {
		panic(err) // a temp dir the test made
	}
	s.rec, s.path = rec, path
}

// take records one export request; the error is the Recorder's (down,
// poisoned).
func (s *otlpSink) take(ctx context.Context, req *colpb.ExportMetricsServiceRequest) error {
	b := otlpBatch(req.ResourceMetrics, s.agg)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		// The client gave up on this request (its timeout): not taken,
		// so that its retry does not arrive twice.
		return record.Unavailable(err)
	}
	key, err := json.Marshal(b)
	if err != nil {
		return record.Permanent(err)
	}
	seq, again := s.seqOf[string(key)]
	if !again {
		s.seq++
		seq = s.seq
	}
	b.Seq = seq
	if err := s.rec.Write(ctx, &b); err != nil {
		return err
	}
	if s.seqOf == nil {
		s.seqOf = map[string]uint64{}
	}
	s.seqOf[string(key)] = seq
	return nil
}

// Export is the OTLP/gRPC MetricsService's method.
func (s *otlpSink) Export(ctx context.Context, req *colpb.ExportMetricsServiceRequest) (*colpb.ExportMetricsServiceResponse, error) {
	if err := s.take(ctx, req); err != nil {
		if record.IsPermanent(err) {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &colpb.ExportMetricsServiceResponse{}, nil
}

// ServeHTTP is the OTLP/HTTP receiver (POST /v1/metrics, protobuf, gzip
// or not).
func (s *otlpSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" {
		http.NotFound(w, r)
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
	data, err := io.ReadAll(body)
	req := &colpb.ExportMetricsServiceRequest{}
	if err == nil {
		err = proto.Unmarshal(data, req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.take(r.Context(), req); err != nil {
		code := http.StatusServiceUnavailable
		if record.IsPermanent(err) {
			code = http.StatusBadRequest
		}
		http.Error(w, err.Error(), code)
		return
	}
	resp, _ := proto.Marshal(&colpb.ExportMetricsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(resp)
}

// otlpMetric is a catalog metric as its OTLP points name it.
type otlpMetric struct {
	id catalog.MetricID
	n  catalog.OTelNaming
}

// otlpMetrics are the catalog's metrics by OTel name.
var otlpMetrics = sync.OnceValue(func() map[string][]otlpMetric {
	out := map[string][]otlpMetric{}
	for _, m := range catalog.Default().All() {
		n := m.OTel()
		out[n.Name] = append(out[n.Name], otlpMetric{m.ID, n})
	}
	return out
})

// otlpBatch turns an export request back into records: a catalog metric's
// point into a sample (or, in an aggregating cell, a window: see
// projectOTLP), the event metric's point into its event, self-metrics and
// process points into one event per (time, attributes). A point that maps
// to nothing becomes an "otlp_unmapped" event, which no witness holds.
func otlpBatch(rms []*metricspb.ResourceMetrics, agg bool) record.Batch {
	var b record.Batch
	grouped := map[string]int{} // self and process points: key → index in b.Events
	unmapped := func(name string, attrs []*commonpb.KeyValue, why string) {
		b.Events = append(b.Events, record.Event{Kind: "otlp_unmapped", Device: -1,
			Message: fmt.Sprintf("%s %s: %s", name, attrString(attrs), why)})
	}
	for ri, rm := range rms {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				var numbers []*metricspb.NumberDataPoint
				switch d := m.Data.(type) {
				case *metricspb.Metric_Gauge:
					numbers = d.Gauge.DataPoints
				case *metricspb.Metric_Sum:
					numbers = d.Sum.DataPoints
				case *metricspb.Metric_Histogram:
					for _, p := range d.Histogram.DataPoints {
						otlpWindow(&b, m.Name, p.Attributes, p.StartTimeUnixNano, p.TimeUnixNano, p.Count, p.Min, p.Max, p.Sum, unmapped)
					}
				case *metricspb.Metric_ExponentialHistogram:
					for _, p := range d.ExponentialHistogram.DataPoints {
						// The window's count is what its buckets hold.
						n := p.ZeroCount
						for _, c := range p.GetPositive().GetBucketCounts() {
							n += c
						}
						for _, c := range p.GetNegative().GetBucketCounts() {
							n += c
						}
						if n != p.Count {
							unmapped(m.Name, p.Attributes, fmt.Sprintf("count %d, buckets hold %d", p.Count, n))
						}
						otlpWindow(&b, m.Name, p.Attributes, p.StartTimeUnixNano, p.TimeUnixNano, n, p.Min, p.Max, p.Sum, unmapped)
					}
				default:
					unmapped(m.Name, nil, fmt.Sprintf("data %T", m.Data))
				}
				for _, p := range numbers {
					v, isInt := numberValue(p)
					t := int64(p.TimeUnixNano)
					switch {
					case m.Name == opentelemetry.EventMetric:
						b.Events = append(b.Events, otlpEvent(p, t))
					case strings.HasPrefix(m.Name, opentelemetry.SelfPrefix):
						key := fmt.Sprintf("self %d %d %s", ri, t, attrString(p.Attributes))
						i, ok := grouped[key]
						if !ok {
							ev := record.Event{Kind: record.EventSelf, Device: -1, StartNS: t}
							for _, kv := range p.Attributes {
								ev.Attrs = append(ev.Attrs, record.Attr{Key: strings.TrimPrefix(kv.Key, opentelemetry.SelfPrefix), Value: kv.Value.GetStringValue()})
							}
							i = len(b.Events)
							grouped[key] = i
							b.Events = append(b.Events, ev)
						}
						b.Events[i].Fields = append(b.Events[i].Fields, record.Field{Key: strings.TrimPrefix(m.Name, opentelemetry.SelfPrefix), Value: v, Int: isInt})
					case strings.HasPrefix(m.Name, opentelemetry.ProcessPrefix):
						key := fmt.Sprintf("process %d %d %s", ri, t, attrString(p.Attributes))
						i, ok := grouped[key]
						if !ok {
							i = len(b.Events)
							grouped[key] = i
							b.Events = append(b.Events, otlpProcess(p.Attributes, t))
						}
						f := strings.TrimPrefix(m.Name, opentelemetry.ProcessPrefix)
						if f == "memory_used" {
							f = record.ProcessFieldUsedMemory
						}
						b.Events[i].Fields = append(b.Events[i].Fields, record.Field{Key: f, Value: v, Int: isInt})
					default:
						om, dev, ok := otlpLookup(m.Name, p.Attributes)
						if !ok {
							unmapped(m.Name, p.Attributes, "no catalog metric, or no gpu index")
							continue
						}
						if agg {
							// A counter's window: its last value, at the window's end.
							b.Summaries = append(b.Summaries, record.Summary{StartNS: t - int64(phaseSpan), IntervalNS: int64(phaseSpan),
								Last: v, Device: dev, Metric: om.id})
							continue
						}
						base, ok := unscale(v, om.n.Scale)
						if !ok {
							unmapped(m.Name, p.Attributes, fmt.Sprintf("no base value gives %v", v))
							continue
						}
						s := record.Sample{TimeNS: t, Value: base, Device: dev, Metric: om.id}
						for _, kv := range p.Attributes {
							if kv.Key == catalog.OTelNamespace+"point_read" && kv.Value.GetBoolValue() {
								s.Flags |= record.FlagPointRead
							}
						}
						b.Samples = append(b.Samples, s)
					}
				}
			}
		}
	}
	for i := range b.Events {
		if k := b.Events[i].Kind; k == record.EventSelf || k == record.EventProcess {
			b.Events[i] = sortedEvent(b.Events[i])
		}
	}
	return b
}

// otlpWindow records a histogram point as the window summary projectOTLP
// makes of the witness's: count, min and max, and the sum (in Mean), in
// the OTel unit.
func otlpWindow(b *record.Batch, name string, attrs []*commonpb.KeyValue, start, end, count uint64, lo, hi, sum *float64,
	unmapped func(string, []*commonpb.KeyValue, string)) {
	om, dev, ok := otlpLookup(name, attrs)
	if !ok || lo == nil || hi == nil || sum == nil {
		unmapped(name, attrs, "no catalog metric, no gpu index, or no min, max or sum")
		return
	}
	b.Summaries = append(b.Summaries, record.Summary{StartNS: int64(start), IntervalNS: int64(end - start),
		Count: uint32(count), Min: *lo, Max: *hi, Mean: *sum, Device: dev, Metric: om.id})
}

// otlpLookup finds the catalog metric a point names (its OTel name and
// the naming's own attributes: hw.gpu.task = encoder, ...) and its
// device's index.
func otlpLookup(name string, attrs []*commonpb.KeyValue) (om otlpMetric, dev uint16, ok bool) {
	have := map[string]string{}
	gpu := -1
	for _, kv := range attrs {
		have[kv.Key] = kv.Value.GetStringValue()
		if kv.Key == catalog.OTelNamespace+"gpu.index" {
			gpu = int(kv.Value.GetIntValue())
		}
	}
	best := -1
	for _, c := range otlpMetrics()[name] {
		match := true
		for _, a := range c.n.Attrs {
			match = match && have[a[0]] == a[1]
		}
		if match && len(c.n.Attrs) > best {
			om, best = c, len(c.n.Attrs)
		}
	}
	return om, uint16(gpu), best >= 0 && gpu >= 0
}

// otlpEvent turns an event metric point back into its event: the
// attributes under the event metric's prefix are its kind, message, end
// time, string attributes and numeric fields, in order; the device is the
// point's gpu index (-1 without one).
func otlpEvent(p *metricspb.NumberDataPoint, t int64) record.Event {
	ev := record.Event{Device: -1, StartNS: t}
	prefix := opentelemetry.EventMetric + "."
	for _, kv := range p.Attributes {
		k, ok := strings.CutPrefix(kv.Key, prefix)
		switch {
		case kv.Key == catalog.OTelNamespace+"gpu.index":
			ev.Device = int(kv.Value.GetIntValue())
		case !ok:
		case k == "kind":
			ev.Kind = record.EventKind(kv.Value.GetStringValue())
		case k == "message":
			ev.Message = kv.Value.GetStringValue()
		case k == "end_time_unix_nano":
			ev.EndNS = kv.Value.GetIntValue()
		default:
			switch v := kv.Value.Value.(type) {
			case *commonpb.AnyValue_StringValue:
				ev.Attrs = append(ev.Attrs, record.Attr{Key: k, Value: v.StringValue})
			case *commonpb.AnyValue_IntValue:
				ev.Fields = append(ev.Fields, record.Field{Key: k, Value: float64(v.IntValue), Int: true})
			case *commonpb.AnyValue_DoubleValue:
				ev.Fields = append(ev.Fields, record.Field{Key: k, Value: v.DoubleValue})
			}
		}
	}
	return ev
}

// otlpProcess starts a process event from a process point's attributes:
// its device, pid, executable name, command line and other attributes.
func otlpProcess(attrs []*commonpb.KeyValue, t int64) record.Event {
	ev := record.Event{Kind: record.EventProcess, Device: -1, StartNS: t}
	for _, kv := range attrs {
		switch k := kv.Key; {
		case k == catalog.OTelNamespace+"gpu.index":
			ev.Device = int(kv.Value.GetIntValue())
		case k == "process.pid":
			ev.Fields = append(ev.Fields, record.Field{Key: record.ProcessFieldPID, Value: float64(kv.Value.GetIntValue()), Int: true})
		case k == "process.executable.name":
			ev.Attrs = append(ev.Attrs, record.Attr{Key: record.ProcessAttrName, Value: kv.Value.GetStringValue()})
		case k == "process.command_line":
			ev.Attrs = append(ev.Attrs, record.Attr{Key: record.ProcessAttrCmdline, Value: kv.Value.GetStringValue()})
		case strings.HasPrefix(k, opentelemetry.ProcessPrefix):
			ev.Attrs = append(ev.Attrs, record.Attr{Key: strings.TrimPrefix(k, opentelemetry.ProcessPrefix), Value: kv.Value.GetStringValue()})
		}
	}
	return ev
}

func numberValue(p *metricspb.NumberDataPoint) (v float64, isInt bool) {
	if i, ok := p.Value.(*metricspb.NumberDataPoint_AsInt); ok {
		return float64(i.AsInt), true
	}
	return p.GetAsDouble(), false
}

// unscale returns the base-unit value x whose x × scale is v bit for bit:
// of the candidates near v / scale, the one with the shortest decimal
// form (several may give v; a recorded value is such a short one).
func unscale(v, scale float64) (float64, bool) {
	if scale == 1 {
		return v, true
	}
	q := v / scale
	cands := []float64{q}
	for prec := 1; prec <= 17; prec++ {
		c, _ := strconv.ParseFloat(strconv.FormatFloat(q, 'g', prec, 64), 64)
		cands = append(cands, c)
	}
	for _, dir := range []float64{math.Inf(1), math.Inf(-1)} {
		c := q
		for range 4 {
			c = math.Nextafter(c, dir)
			cands = append(cands, c)
		}
	}
	best, ok := 0.0, false
	for _, c := range cands {
		if c*scale != v {
			continue
		}
		if !ok || len(strconv.FormatFloat(c, 'g', -1, 64)) < len(strconv.FormatFloat(best, 'g', -1, 64)) {
			best, ok = c, true
		}
	}
	return best, ok
}

// attrString renders attributes in order, for grouping and messages.
func attrString(attrs []*commonpb.KeyValue) string {
	var b strings.Builder
	for _, kv := range attrs {
		fmt.Fprintf(&b, "%s=%v,", kv.Key, kv.Value.GetValue())
	}
	return b.String()
}

// projectOTLP returns the records an OTLP cell's sink can hold for the
// records in want (the witness's, in aggregate cells with the windows
// summarized): no device records (OTLP carries a device's identity as
// attributes of each point); samples whole (a value sent as value ×
// scale comes back bit for bit), flags other than point_read dropped; a
// gauge's window as a histogram carries it (count, min and max × scale,
// and the sum — mean × count × scale — in Mean), a counter's as its last
// value × scale; self-metrics without device, end time or message, fields
// by key; process records without end time or attribution attributes
// (those go to the resource), fields and attributes by key; an event
// without fields or (processes) without any field but the pid sends no
// point. Integer fields go as integers (rounded); a field's gauge mark is
// not carried (every field is sent as a gauge).
func projectOTLP(want bag) bag {
	out := bag{}
	for r, n := range want {
		var kind string
		var v any
		switch r.kind {
		case "device":
			continue
		case "sample":
			var s record.Sample
			mustUnmarshal(r.key, &s)
			s.Flags &= record.FlagPointRead
			kind, v = "sample", s
		case "summary":
			var s record.Summary
			mustUnmarshal(r.key, &s)
			kind, v = "summary", otlpSummary(s)
		case "event":
			var ev record.Event
			mustUnmarshal(r.key, &ev)
			p, ok := otlpEventProjection(ev)
			if !ok {
				continue
			}
			kind, v = "event", p
		default:
			kind, v = r.kind, r.key
		}
		out[recordKey{kind, keyOf(v)}] += n
	}
	return out
}

func otlpSummary(s record.Summary) record.Summary {
	m, ok := catalog.Default().Get(s.Metric)
	if !ok {
		return s
	}
	n := m.OTel()
	out := record.Summary{StartNS: s.StartNS, IntervalNS: s.IntervalNS, Device: s.Device, Metric: s.Metric}
	if n.Instrument != catalog.OTelGauge {
		out.Last = s.Last * n.Scale
		if n.Type == catalog.Int {
			out.Last = math.Round(out.Last)
		}
		return out
	}
	out.Count = s.Count
	out.Min, out.Max = s.Min*n.Scale, s.Max*n.Scale
	if n.Scale < 0 {
		out.Min, out.Max = out.Max, out.Min
	}
	out.Mean = s.Mean * float64(s.Count) * n.Scale
	return out
}

func otlpEventProjection(ev record.Event) (record.Event, bool) {
	fields := func(fs []record.Field) []record.Field {
		var out []record.Field
		for _, f := range fs {
			if f.Int {
				f.Value = math.Round(f.Value)
			}
			f.Gauge = false // every field's point is a gauge
			out = append(out, f)
		}
		return out
	}
	switch ev.Kind {
	case record.EventSelf:
		if len(ev.Fields) == 0 {
			return ev, false
		}
		p := record.Event{Kind: ev.Kind, Device: -1, StartNS: ev.StartNS, Fields: fields(ev.Fields)}
		if len(ev.Attrs) > 0 {
			p.Attrs = ev.Attrs
		}
		return sortedEvent(p), true
	case record.EventProcess:
		p := record.Event{Kind: ev.Kind, Device: ev.Device, StartNS: ev.StartNS, Fields: fields(ev.Fields)}
		if !slices.ContainsFunc(ev.Fields, func(f record.Field) bool { return f.Key != record.ProcessFieldPID }) {
			return ev, false
		}
		for _, a := range ev.Attrs {
			if !record.IsAttributionKey(a.Key) {
				p.Attrs = append(p.Attrs, a)
			}
		}
		return sortedEvent(p), true
	}
	p := ev
	p.Device = max(p.Device, -1)
	p.Fields = fields(ev.Fields)
	p.Attrs = nil
	if len(ev.Attrs) > 0 {
		p.Attrs = ev.Attrs
	}
	return p, true
}
