package catalog

import (
	"strings"
	"testing"
)

// Every metric has an OpenTelemetry name; the hw.* ones are those the
// hardware semantic conventions define, with their units and instruments;
// no two metrics share a name and attributes (one series each); the rest
// are in our namespace.
func TestOTelNaming(t *testing.T) {
	c := NewCatalog()
	seen := map[string]string{}
	for _, m := range c.All() {
		n := m.OTel()
		key := n.Name
		for _, a := range n.Attrs {
			key += "," + a[0] + "=" + a[1]
		}
		if other, dup := seen[key]; dup {
			t.Errorf("%s and %s are both %s", m.Name, other, key)
		}
		seen[key] = m.Name
		if n.Scale == 0 || n.Unit == "" || n.Type == 0 || n.Instrument == 0 {
			t.Errorf("%s: incomplete OTel naming %+v", m.Name, n)
		}
		if !strings.HasPrefix(n.Name, "hw.") && n.Name != OTelNamespace+m.Name {
			t.Errorf("%s: OTel name %s, want %s%s", m.Name, n.Name, OTelNamespace, m.Name)
		}
		if m.Kind == Counter && n.Instrument != OTelCounter {
			t.Errorf("%s: a counter as %s", m.Name, n.Instrument)
		}
	}
	for _, tc := range []struct {
		metric MetricID
		name   string
		unit   string
		scale  float64
		in     Instrument
		attrs  string
	}{
		{MetricUtilGPU, "hw.gpu.utilization", "1", 0.01, OTelGauge, "hw.gpu.task=general"},
		{MetricUtilEncoder, "hw.gpu.utilization", "1", 0.01, OTelGauge, "hw.gpu.task=encoder"},
		{MetricUtilDecoder, "hw.gpu.utilization", "1", 0.01, OTelGauge, "hw.gpu.task=decoder"},
		{MetricMemoryUsed, "hw.gpu.memory.usage", "By", 1 << 20, OTelUpDownCounter, ""},
		{MetricMemoryTotal, "hw.gpu.memory.limit", "By", 1 << 20, OTelUpDownCounter, ""},
		{MetricPowerDraw, "hw.power", "W", 1, OTelGauge, ""},
		{MetricEnergy, "hw.energy", "J", 0.001, OTelCounter, ""},
		{MetricPCIeTxBytes, "hw.gpu.io", "By", 1, OTelCounter, "hw.direction=transmit"},
		{MetricECCDoubleVolatile, "hw.errors", "{error}", 1, OTelCounter, "error.type=ecc_uncorrected"},
		{MetricTempGPU, "gpusampler.temperature_gpu", "Cel", 1, OTelGauge, ""},
		{MetricThrottleHWThermal, "gpusampler.throttle_hw_thermal", "ns", 1, OTelCounter, ""},
		{MetricMemoryFree, "gpusampler.memory_free", "MiBy", 1, OTelGauge, ""},
	} {
		m, _ := c.Get(tc.metric)
		n := m.OTel()
		var attrs []string
		for _, a := range n.Attrs {
			attrs = append(attrs, a[0]+"="+a[1])
		}
		if n.Name != tc.name || n.Unit != tc.unit || n.Scale != tc.scale || n.Instrument != tc.in || strings.Join(attrs, ",") != tc.attrs {
			t.Errorf("%s: %+v, want %s %s ×%g %s {%s}", m.Name, n, tc.name, tc.unit, tc.scale, tc.in, tc.attrs)
		}
	}
}
