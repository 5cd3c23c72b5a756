package catalog

// OpenTelemetry naming. Metrics that the OpenTelemetry hardware semantic
// conventions define for a GPU (hw.gpu.*, and hw.power, hw.energy and
// hw.errors with hw.type=gpu; status Development) carry those names, units
// and fixed attributes; every other metric is named in gpusampler's own
// namespace, OTelNamespace + its catalog name, in the UCUM spelling of its
// base unit.

// OTelNamespace prefixes the OpenTelemetry names of the metrics the
// semantic conventions do not define.
const OTelNamespace = "gpusampler."

// Instrument is how an OpenTelemetry metric's points are typed on the wire.
type Instrument uint8

const (
	// OTelGauge points are OTLP Gauge points (values go up and down).
	OTelGauge Instrument = iota + 1
	// OTelCounter points are an OTLP cumulative monotonic Sum.
	OTelCounter
	// OTelUpDownCounter points are an OTLP cumulative non-monotonic Sum
	// (the semantic conventions' UpDownCounter: memory usage and limit).
	OTelUpDownCounter
)

func (i Instrument) String() string {
	switch i {
	case OTelGauge:
		return "gauge"
	case OTelCounter:
		return "counter"
	case OTelUpDownCounter:
		return "updowncounter"
	}
	return "unknown"
}

// OTelNaming is how the OpenTelemetry output names, scales and types a
// metric: Naming's Name, Unit (UCUM), Scale and Type, the instrument, and
// the attributes every point of the metric carries besides the device's
// (hw.gpu.task=general: several catalog metrics share one OpenTelemetry
// name and differ by these).
type OTelNaming struct {
	Naming
	Instrument Instrument
	// Attrs are key, value pairs.
	Attrs [][2]string
}

// otelNamings are the metrics the semantic conventions define. Values are
// the base unit × Scale.
var otelNamings = map[MetricID]OTelNaming{
	MetricUtilGPU:     otelNM("hw.gpu.utilization", "1", 0.01, Float, OTelGauge, "hw.gpu.task", "general"),
	MetricUtilEncoder: otelNM("hw.gpu.utilization", "1", 0.01, Float, OTelGauge, "hw.gpu.task", "encoder"),
	MetricUtilDecoder: otelNM("hw.gpu.utilization", "1", 0.01, Float, OTelGauge, "hw.gpu.task", "decoder"),
	MetricMemoryUsed:  otelNM("hw.gpu.memory.usage", "By", 1<<20, Int, OTelUpDownCounter),
	MetricMemoryTotal: otelNM("hw.gpu.memory.limit", "By", 1<<20, Int, OTelUpDownCounter),
	// The driver's power samples, at full resolution: instantaneous
	// readings (hw.power is "instantaneous power"); the field read
	// power_draw_instant stays in our namespace so that one series is not
	// fed twice.
	MetricPowerDraw:   otelNM("hw.power", "W", 1, Float, OTelGauge),
	MetricEnergy:      otelNM("hw.energy", "J", 0.001, Float, OTelCounter),
	MetricPCIeTxBytes: otelNM("hw.gpu.io", "By", 1, Int, OTelCounter, "hw.direction", "transmit"),
	MetricPCIeRxBytes: otelNM("hw.gpu.io", "By", 1, Int, OTelCounter, "hw.direction", "receive"),
	// hw.errors: volatile counters (since the driver loaded) only, so
	// that summing error.type values counts each error once (the
	// aggregate ECC counters include the volatile ones).
	MetricECCSingleVolatile: otelNM("hw.errors", "{error}", 1, Int, OTelCounter, "error.type", "ecc_corrected"),
	MetricECCDoubleVolatile: otelNM("hw.errors", "{error}", 1, Int, OTelCounter, "error.type", "ecc_uncorrected"),
	MetricPCIeReplays:       otelNM("hw.errors", "{error}", 1, Int, OTelCounter, "error.type", "pcie_replay"),
	MetricXIDCount:          otelNM("hw.errors", "{error}", 1, Int, OTelCounter, "error.type", "xid"),
}

func otelNM(name, unit string, scale float64, t ValueType, in Instrument, attrs ...string) OTelNaming {
	n := OTelNaming{Naming: nm(name, unit, scale, t), Instrument: in}
	for i := 0; i+1 < len(attrs); i += 2 {
		n.Attrs = append(n.Attrs, [2]string{attrs[i], attrs[i+1]})
	}
	return n
}

// ucum spells the catalog's base units in UCUM, as OpenTelemetry metric
// units are written; units UCUM lacks become annotations ("{P}").
var ucum = map[string]string{
	"%": "%", "W": "W", "mJ": "mJ", "MHz": "MHz", "MiB": "MiBy", "°C": "Cel", "ns": "ns", "us": "us",
	"B": "By", "B/s": "By/s", "count": "{count}", "bool": "1", "bitmask": "1", "P": "{pstate}",
	"gen": "{gen}", "lanes": "{lane}", "rows": "{row}", "pages": "{page}", "fps": "{frame}/s",
}

// OTel returns the metric's OpenTelemetry naming: the semantic
// conventions' where they define the metric, else OTelNamespace + Name in
// the base unit (Scale 1), a counter for Counter metrics and a gauge for
// the rest. The returned Attrs may be shared: do not modify them.
func (m *Metric) OTel() OTelNaming {
	if n, ok := otelNamings[m.ID]; ok {
		return n
	}
	unit, ok := ucum[m.Unit]
	if !ok {
		unit = "{" + m.Unit + "}"
	}
	in := OTelGauge
	if m.Kind == Counter {
		in = OTelCounter
	}
	return OTelNaming{Naming: Naming{Name: OTelNamespace + m.Name, Unit: unit, Scale: 1, Type: m.Type}, Instrument: in}
}
