package otelcol_test

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/gpusampler/gpusampler/catalog"
)

// point is one data point as the collector holds it, flattened: its
// metric, its resource's and its own attributes, its times and value.
type point struct {
	Name     string
	Kind     string // gauge, sum, cumulative-monotonic, histogram, ...
	Resource map[string]string
	Attrs    map[string]string
	StartNS  int64
	TimeNS   int64
	// Value is a number point's value: strconv of an int, or of a float
	// prefixed with "f".
	Value string
	// Histogram points (explicit or exponential): count, sum, min, max.
	Count                  uint64
	Sum, Min, Max          float64
	HasSum, HasMin, HasMax bool
	// Exp is an exponential histogram point's scale and buckets (nil for
	// others).
	Exp *expBuckets
}

// expBuckets are an exponential histogram point's own fields.
type expBuckets struct {
	Scale                int32
	ZeroCount            uint64
	PosOffset, NegOffset int32
	Pos, Neg             []uint64
}

// key identifies a number point: its name, attributes and time.
func (p point) key() string { return fmt.Sprintf("%s{%s}@%d", p.Name, attrString(p.Attrs), p.TimeNS) }

func attrMap(m pcommon.Map) map[string]string {
	out := make(map[string]string, m.Len())
	for k, v := range m.All() {
		out[k] = v.AsString()
	}
	return out
}

func numberValue(p pmetric.NumberDataPoint) string {
	if p.ValueType() == pmetric.NumberDataPointValueTypeInt {
		return strconv.FormatInt(p.IntValue(), 10)
	}
	return "f" + strconv.FormatFloat(p.DoubleValue(), 'g', -1, 64)
}

// flatten returns every data point of the batches.
func flatten(batches []pmetric.Metrics) []point {
	var out []point
	for _, md := range batches {
		for _, rm := range md.ResourceMetrics().All() {
			res := attrMap(rm.Resource().Attributes())
			for _, sm := range rm.ScopeMetrics().All() {
				for _, m := range sm.Metrics().All() {
					base := point{Name: m.Name(), Resource: res}
					numbers := func(kind string, dps pmetric.NumberDataPointSlice) {
						for _, dp := range dps.All() {
							p := base
							p.Kind, p.Attrs = kind, attrMap(dp.Attributes())
							p.StartNS, p.TimeNS = int64(dp.StartTimestamp()), int64(dp.Timestamp())
							p.Value = numberValue(dp)
							out = append(out, p)
						}
					}
					switch m.Type() {
					case pmetric.MetricTypeGauge:
						numbers("gauge", m.Gauge().DataPoints())
					case pmetric.MetricTypeSum:
						kind := "sum-" + m.Sum().AggregationTemporality().String()
						if m.Sum().IsMonotonic() {
							kind += "-monotonic"
						}
						numbers(kind, m.Sum().DataPoints())
					case pmetric.MetricTypeHistogram:
						h := m.Histogram()
						for _, dp := range h.DataPoints().All() {
							out = append(out, histogram(base, "histogram-"+h.AggregationTemporality().String(), dp))
						}
					case pmetric.MetricTypeExponentialHistogram:
						h := m.ExponentialHistogram()
						for _, dp := range h.DataPoints().All() {
							p := histogram(base, "exphistogram-"+h.AggregationTemporality().String(), dp)
							p.Exp = &expBuckets{Scale: dp.Scale(), ZeroCount: dp.ZeroCount(),
								PosOffset: dp.Positive().Offset(), Pos: dp.Positive().BucketCounts().AsRaw(),
								NegOffset: dp.Negative().Offset(), Neg: dp.Negative().BucketCounts().AsRaw()}
							out = append(out, p)
						}
					default:
						out = append(out, point{Name: m.Name(), Kind: m.Type().String(), Resource: res})
					}
				}
			}
		}
	}
	return out
}

// histogramPoint is what explicit and exponential histogram points share.
type histogramPoint interface {
	Attributes() pcommon.Map
	StartTimestamp() pcommon.Timestamp
	Timestamp() pcommon.Timestamp
	Count() uint64
	Sum() float64
	HasSum() bool
	Min() float64
	HasMin() bool
	Max() float64
	HasMax() bool
}

// histogram flattens a histogram point of kind onto base.
func histogram(base point, kind string, dp histogramPoint) point {
	p := base
	p.Kind, p.Attrs = kind, attrMap(dp.Attributes())
	p.StartNS, p.TimeNS = int64(dp.StartTimestamp()), int64(dp.Timestamp())
	p.Count, p.Sum, p.HasSum, p.Min, p.HasMin, p.Max, p.HasMax = dp.Count(), dp.Sum(), dp.HasSum(), dp.Min(), dp.HasMin(), dp.Max(), dp.HasMax()
	return p
}

// expected is what the collector must hold for one twin sample: the
// metric's OpenTelemetry name and instrument, the point attributes (the
// device's identity from the twin's device line, the metric's own, the
// point-read mark) and the value in OpenTelemetry units.
type expected struct {
	point
	naming catalog.OTelNaming
}

// expect maps a twin sample to its point. hw.model is left out: the
// twin's name is the display name (the simulator marks it), hw.model the
// product's (compare ignores it but requires it).
func expect(t testing.TB, tw twin, s twinLine) expected {
	t.Helper()
	m, ok := catalog.Default().Lookup(s.Metric)
	if !ok {
		t.Fatalf("twin metric %q not in the catalog", s.Metric)
	}
	n := m.OTel()
	d, ok := tw.devices[s.GPU]
	if !ok {
		t.Fatalf("twin sample of GPU %d before its device line", s.GPU)
	}
	attrs := map[string]string{
		"hw.type": "gpu", "hw.id": d.UUID, "hw.name": d.Name, "hw.vendor": "NVIDIA",
		"gpusampler.gpu.index": strconv.Itoa(d.Index), "gpusampler.gpu.pci_bus_id": d.PCIBusID,
	}
	opt := func(k, v string) {
		if v != "" {
			attrs[k] = v
		}
	}
	opt("hw.driver_version", d.DriverVersion)
	opt("hw.firmware_version", d.VBIOSVersion)
	opt("hw.serial_number", d.Serial)
	if d.Simulated {
		attrs["gpusampler.simulated"] = "true"
	}
	for _, a := range n.Attrs {
		attrs[a[0]] = a[1]
	}
	if s.PointRead {
		attrs["gpusampler.point_read"] = "true"
	}
	value := valueString(s.Value*n.Scale, n.Type)
	return expected{point: point{Name: n.Name, Attrs: attrs, TimeNS: s.Time, Value: value}, naming: n}
}

// valueString renders a value in OpenTelemetry units as numberValue does
// the point that carries it: an Int metric's as the rounded integer.
func valueString(v float64, t catalog.ValueType) string {
	if t == catalog.Int {
		return strconv.FormatInt(int64(math.Round(v)), 10)
	}
	return "f" + strconv.FormatFloat(v, 'g', -1, 64)
}

// withoutModel returns p's attributes less hw.model, failing when it is
// missing (every identified device has a product name).
func withoutModel(t testing.TB, p point) point {
	t.Helper()
	if p.Attrs["hw.model"] == "" {
		t.Fatalf("point without hw.model: %s", p.key())
	}
	a := make(map[string]string, len(p.Attrs))
	for k, v := range p.Attrs {
		if k != "hw.model" {
			a[k] = v
		}
	}
	p.Attrs = a
	return p
}
