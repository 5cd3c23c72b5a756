package catalog

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// MetricID identifies a catalog entry. IDs are dense, starting at 1; 0 is
// never a valid metric.
type MetricID uint16

// Group collects related metrics; include/exclude patterns and NATS
// subjects use it.
type Group string

// Metric groups.
const (
	GroupPower       Group = "power"
	GroupUtilization Group = "utilization"
	GroupClocks      Group = "clocks"
	GroupMemory      Group = "memory"
	GroupTemperature Group = "temperature"
	GroupThrottle    Group = "throttle"
	GroupPCIe        Group = "pcie"
	GroupNVLink      Group = "nvlink"
	GroupHealth      Group = "health"
	// GroupProfiling holds GPM metrics (Hopper and newer): SM activity,
	// pipes, DRAM and link rates, computed from two snapshots.
	GroupProfiling Group = "profiling"
)

// Groups returns every group in catalog order, in a new slice the caller
// may keep and modify.
func Groups() []Group {
	return []Group{GroupPower, GroupUtilization, GroupClocks, GroupMemory,
		GroupTemperature, GroupThrottle, GroupPCIe, GroupNVLink, GroupHealth, GroupProfiling}
}

// SourceKind says how a backend obtains a metric.
type SourceKind uint8

const (
	// FromBuffer metrics are drained from a driver sample buffer
	// (nvmlDeviceGetSamples). A point read of such a metric is a current-value
	// query (e.g. nvmlDeviceGetUtilizationRates).
	FromBuffer SourceKind = iota + 1
	// FromField metrics are read in one batch per tick
	// (nvmlDeviceGetFieldValues).
	FromField
	// FromQuery metrics are slow state read with point queries at ≥ 1 s.
	FromQuery
	// FromGPM metrics are GPU performance-monitoring (GPM, Hopper+)
	// metrics: the backend takes a snapshot per read and computes each
	// value over the time since the previous read, so the engine reads
	// them together every sampler.Config.GPMInterval (at least
	// sampler.MinGPMInterval). The first read of a device answers
	// sampler.ErrNothingNew (one snapshot, no interval).
	FromGPM
)

func (k SourceKind) String() string {
	switch k {
	case FromBuffer:
		return "buffer"
	case FromField:
		return "field"
	case FromQuery:
		return "query"
	case FromGPM:
		return "gpm"
	}
	return "unknown"
}

// BufferType is an NVML sampling type (nvmlSamplingType_t), 0–9.
type BufferType uint8

// Driver sample-buffer types.
const (
	BufferTotalPower BufferType = iota
	BufferGPUUtil
	BufferMemoryUtil
	BufferEncoderUtil
	BufferDecoderUtil
	BufferSMClock
	BufferMemoryClock
	BufferModulePower
	BufferJPEGUtil
	BufferOFAUtil
	// NumBufferTypes is the number of sampling types.
	NumBufferTypes
)

var bufferTypeNames = [NumBufferTypes]string{"total_power", "gpu_util", "memory_util",
	"encoder_util", "decoder_util", "sm_clock", "memory_clock", "module_power", "jpeg_util", "ofa_util"}

func (t BufferType) String() string {
	if t < NumBufferTypes {
		return bufferTypeNames[t]
	}
	return fmt.Sprintf("buffer(%d)", uint8(t))
}

// ParseBufferType returns the buffer type named name (as String writes
// it); ok is false for any other name.
func ParseBufferType(name string) (t BufferType, ok bool) {
	for i, n := range bufferTypeNames {
		if n == name {
			return BufferType(i), true
		}
	}
	return 0, false
}

// BufferTypeNames returns the names of every buffer type, in type order.
func BufferTypeNames() []string { return bufferTypeNames[:] }

// Origin describes where a metric's values come from.
type Origin struct {
	Kind SourceKind
	// Buffer is the sampling type for FromBuffer metrics.
	Buffer BufferType
	// Field is the NVML field symbol for FromField metrics
	// ("NVML_FI_DEV_POWER_INSTANT"). The NVML backend maps symbols to ids per
	// NVML version, because some ids moved between versions.
	Field string
	// Query names the point query for FromQuery metrics ("GetTemperature").
	Query string
	// GPM names the GPM metric for FromGPM metrics ("GPM_METRIC_SM_UTIL").
	GPM string
}

func (s Origin) String() string {
	switch s.Kind {
	case FromBuffer:
		return "buffer:" + s.Buffer.String()
	case FromField:
		return "field:" + s.Field
	case FromQuery:
		return "query:" + s.Query
	case FromGPM:
		return "gpm:" + s.GPM
	}
	return "unknown"
}

// Kind says how a metric's values behave over time.
type Kind uint8

const (
	// Gauge values go up and down.
	Gauge Kind = iota + 1
	// Counter values only increase (until the driver resets them).
	Counter
	// State values are enumerations or bit masks (P-state, throttle reasons).
	State
)

func (k Kind) String() string {
	switch k {
	case Gauge:
		return "gauge"
	case Counter:
		return "counter"
	case State:
		return "state"
	}
	return "unknown"
}

// ValueType is how a naming scheme types a value on the wire.
type ValueType uint8

const (
	// Float values are 64-bit floats.
	Float ValueType = iota + 1
	// Int values are signed 64-bit integers (InfluxDB 1.x rejects unsigned).
	Int
)

func (t ValueType) String() string {
	switch t {
	case Float:
		return "float"
	case Int:
		return "int"
	}
	return "unknown"
}

// Naming is how one naming scheme spells, scales and types a metric. An empty
// Name means the scheme has no such metric; outputs using that scheme then
// fall back to the catalog's own name where the scheme allows it.
type Naming struct {
	Name  string
	Unit  string
	Scale float64 // scheme value = base value × Scale
	Type  ValueType
}

// Convert returns v (in the catalog's base unit) in this scheme's unit, and
// rounded when the scheme types the value as an integer.
func (n Naming) Convert(v float64) float64 {
	v *= n.Scale
	if n.Type == Int {
		v = math.Round(v)
	}
	return v
}

// TextNaming is how Telegraf's nvidia_smi input writes a two-state metric
// as a string field: Values[0] for the value 0, Values[1] for 1 ("No",
// "Yes"; "Disabled", "Enabled"). Also, when set, is a second field name
// Telegraf writes with the same string (nvidia-smi renamed the element and
// Telegraf reads both). An empty Name means no such field.
type TextNaming struct {
	Name   string
	Also   string
	Values [2]string
}

// Text returns the string for v; ok is false for a value other than 0 or 1
// (left out, as Telegraf leaves out nvidia-smi's "N/A").
func (t TextNaming) Text(v float64) (s string, ok bool) {
	switch v {
	case 0:
		return t.Values[0], true
	case 1:
		return t.Values[1], true
	}
	return "", false
}

// Metric is one catalog entry.
type Metric struct {
	ID    MetricID
	Name  string // our name, snake_case, unique
	Unit  string // base unit of record.Sample.Value
	Group Group
	Kind  Kind
	Type  ValueType // our scheme's wire type
	Help  string
	Src   Origin
	// Rare marks slow state that seldom changes (limits, link settings,
	// health counters, memory total): the engine reads it every
	// sampler.Config.RareInterval instead of every SlowInterval (or every
	// FieldInterval for field metrics), saving NVML calls.
	Rare bool
	// Telegraf is the nvidia_smi input's naming (measurement nvidia_smi):
	// set only for fields Telegraf's parser really emits.
	Telegraf Naming
	// TelegrafText is the nvidia_smi input's string field for a two-state
	// metric it writes as text ("Yes"/"No"). The nvidia_smi drop-in shape
	// writes it instead of the number; other line-protocol outputs keep the
	// number under Influx()'s naming (an integer, our own name, so it
	// never clashes with Telegraf's string).
	TelegrafText TextNaming
	// Line is the line-protocol field naming of a metric Telegraf lacks,
	// when it differs from ours (kept stable for dashboards written against
	// earlier versions); empty means our own naming.
	Line Naming
	// DCGM is dcgm-exporter's naming (DCGM_FI_*).
	DCGM Naming
}

// Ours returns the metric's naming in gpusampler's own scheme.
func (m *Metric) Ours() Naming {
	return Naming{Name: m.Name, Unit: m.Unit, Scale: 1, Type: m.Type}
}

// Influx returns the field naming used for InfluxDB line protocol: Telegraf's
// name, unit and type where Telegraf has the field, else the metric's Line
// naming where it has one, else ours.
func (m *Metric) Influx() Naming {
	if m.Telegraf.Name != "" {
		return m.Telegraf
	}
	if m.Line.Name != "" {
		return m.Line
	}
	return m.Ours()
}

// Catalog is the table of every metric. Index i holds MetricID i; entry 0
// is unused. A Catalog cannot be modified once built: Get, Lookup and All
// return copies, so any number of goroutines may share one.
type Catalog struct {
	metrics []Metric
	byName  map[string]MetricID
}

// Metric IDs of the built-in catalog. Order matters only for listing.
const (
	_ MetricID = iota
	MetricPowerDraw
	MetricPowerInstant
	MetricModulePower
	MetricPowerLimit
	MetricEnergy
	MetricUtilGPU
	MetricUtilMemory
	MetricUtilEncoder
	MetricUtilDecoder
	MetricUtilJPEG
	MetricUtilOFA
	MetricClockSM
	MetricClockMemory
	MetricClockGraphics
	MetricClockVideo
	MetricClocksEventReasons
	MetricPState
	MetricMemoryUsed
	MetricMemoryFree
	MetricMemoryReserved
	MetricMemoryTotal
	MetricTempGPU
	MetricTempMemory
	MetricFanSpeed
	MetricThrottleSWPowerCap
	MetricThrottleSyncBoost
	MetricThrottleSWThermal
	MetricThrottleHWThermal
	MetricThrottleHWPowerBrake
	MetricViolationPower
	MetricViolationThermal
	MetricViolationSyncBoost
	MetricViolationBoardLimit
	MetricViolationLowUtil
	MetricViolationReliability
	MetricPCIeTxBytes
	MetricPCIeRxBytes
	MetricPCIeLinkGen
	MetricPCIeLinkWidth
	MetricNVLinkTxBytes
	MetricNVLinkRxBytes
	MetricPCIeReplays
	MetricECCSingleVolatile
	MetricECCDoubleVolatile
	MetricRemappedCorrectable
	MetricRemappedUncorrectable
	MetricXIDCount
	// Health counters added after the first release: new metrics are
	// appended, never inserted, because IDs travel on the wire (disk
	// buffer, plugin protocol).
	MetricECCSingleAggregate
	MetricECCDoubleAggregate
	MetricRowRemapPending
	MetricRowRemapFailure
	MetricRetiredPagesSingle
	MetricRetiredPagesDouble
	MetricNVLinkCRCFlitErrors
	MetricNVLinkCRCDataErrors
	MetricNVLinkReplayErrors
	MetricNVLinkRecoveryErrors
	// GPM profiling (group profiling).
	MetricGraphicsActive
	MetricSMActive
	MetricSMOccupancy
	MetricTensorActive
	MetricTensorDFMAActive
	MetricTensorHMMAActive
	MetricTensorIMMAActive
	MetricFP64Active
	MetricFP32Active
	MetricFP16Active
	MetricDRAMActive
	MetricPCIeTxRate
	MetricPCIeRxRate
	MetricNVLinkTxRate
	MetricNVLinkRxRate
	// Added for the nvidia_smi drop-in (read at the rare interval):
	// display state, encoder and frame-buffer-capture session statistics,
	// pending page retirement.
	MetricDisplayMode
	MetricDisplayActive
	MetricEncoderSessions
	MetricEncoderFPS
	MetricEncoderLatency
	MetricFBCSessions
	MetricFBCFPS
	MetricFBCLatency
	MetricRetiredPagesPending
	numMetrics
)

// Clock event reason bits (nvmlClocksEventReason*), as reported by
// MetricClocksEventReasons.
const (
	ReasonGPUIdle           = 0x1
	ReasonAppClocksSetting  = 0x2
	ReasonSWPowerCap        = 0x4
	ReasonHWSlowdown        = 0x8
	ReasonSyncBoost         = 0x10
	ReasonSWThermalSlowdown = 0x20
	ReasonHWThermalSlowdown = 0x40
	ReasonHWPowerBrake      = 0x80
	ReasonDisplayClocks     = 0x100
	ReasonThermalAny        = ReasonSWThermalSlowdown | ReasonHWThermalSlowdown
	ReasonPowerAny          = ReasonSWPowerCap | ReasonHWPowerBrake
	ReasonThrottleAny       = ReasonSWPowerCap | ReasonHWSlowdown | ReasonSyncBoost | ReasonThermalAny | ReasonHWPowerBrake
)

// Reason is one clock event reason bit and its short name.
type Reason struct {
	Bit  uint64
	Name string
}

// reasons lists the clock event reason bits and their names, in bit order.
// It is never modified; ReasonNames hands out copies.
var reasons = [...]Reason{
	{ReasonGPUIdle, "idle"}, {ReasonAppClocksSetting, "app_clocks"}, {ReasonSWPowerCap, "sw_power_cap"},
	{ReasonHWSlowdown, "hw_slowdown"}, {ReasonSyncBoost, "sync_boost"}, {ReasonSWThermalSlowdown, "sw_thermal"},
	{ReasonHWThermalSlowdown, "hw_thermal"}, {ReasonHWPowerBrake, "hw_power_brake"}, {ReasonDisplayClocks, "display_clocks"},
}

// ReasonNames returns the clock event reason bits and their short names, in
// bit order, in a new slice the caller may keep and modify.
func ReasonNames() []Reason { return slices.Clone(reasons[:]) }

// ReasonString renders a clock event reason mask as "sw_thermal+hw_thermal",
// or "none".
func ReasonString(mask uint64) string {
	var b strings.Builder
	for _, r := range reasons {
		if mask&r.Bit != 0 {
			if b.Len() > 0 {
				b.WriteByte('+')
			}
			b.WriteString(r.Name)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// Generic temperature thresholds from the field guide, used only when the
// device does not report its own (record.Device.SlowdownTempC etc.).
const (
	GenericGPUTempWarnC     = 80
	GenericGPUTempCritC     = 90
	GenericMemoryTempWarnC  = 95
	GenericMemoryTempCritC  = 105
	GenericMemoryNearFullPc = 95
)

func nm(name, unit string, scale float64, t ValueType) Naming {
	return Naming{Name: name, Unit: unit, Scale: scale, Type: t}
}

// yesNo is Telegraf's text for a flag nvidia-smi prints as "No"/"Yes".
func yesNo(name, also string) TextNaming {
	return TextNaming{Name: name, Also: also, Values: [2]string{"No", "Yes"}}
}

// enabled is Telegraf's text for a state nvidia-smi prints as
// "Disabled"/"Enabled".
func enabled(name string) TextNaming {
	return TextNaming{Name: name, Values: [2]string{"Disabled", "Enabled"}}
}

func buildCatalog() []Metric {
	buf := func(t BufferType) Origin { return Origin{Kind: FromBuffer, Buffer: t} }
	field := func(sym string) Origin { return Origin{Kind: FromField, Field: sym} }
	query := func(q string) Origin { return Origin{Kind: FromQuery, Query: q} }
	gpm := func(g string) Origin { return Origin{Kind: FromGPM, GPM: g} }
	// DCGM's profiling metrics are ratios 0–1; GPM gives percent.
	ratio := func(name string) Naming { return nm(name, "ratio", 0.01, Float) }
	prof := func(name, help, g, dcgm string) Metric {
		return Metric{Name: name, Unit: "%", Group: GroupProfiling, Kind: Gauge, Type: Float, Help: help, Src: gpm(g), DCGM: ratio(dcgm)}
	}
	rate := func(name, help, g, dcgm string) Metric {
		return Metric{Name: name, Unit: "B/s", Group: GroupProfiling, Kind: Gauge, Type: Float, Help: help, Src: gpm(g), DCGM: nm(dcgm, "B/s", 1, Float)}
	}
	return []Metric{
		MetricPowerDraw: {Name: "power_draw", Unit: "W", Group: GroupPower, Kind: Gauge, Type: Float,
			Help: "Board power from the driver's power sample buffer.", Src: buf(BufferTotalPower),
			Telegraf: nm("power_draw", "W", 1, Float), DCGM: nm("DCGM_FI_DEV_POWER_USAGE", "W", 1, Float)},
		MetricPowerInstant: {Name: "power_draw_instant", Unit: "W", Group: GroupPower, Kind: Gauge, Type: Float,
			Help: "Instantaneous board power (field 186; GetPowerUsage is a 1 s average on Hopper).", Src: field("NVML_FI_DEV_POWER_INSTANT"),
			DCGM: nm("DCGM_FI_DEV_POWER_USAGE_INSTANT", "W", 1, Float)},
		MetricModulePower: {Name: "module_power_draw", Unit: "W", Group: GroupPower, Kind: Gauge, Type: Float,
			Help: "Module (Grace-Hopper superchip) power from the sample buffer.", Src: buf(BufferModulePower),
			Telegraf: nm("module_power_draw", "W", 1, Float)},
		MetricPowerLimit: {Name: "power_limit", Unit: "W", Group: GroupPower, Kind: Gauge, Type: Float,
			Help: "Enforced power limit.", Src: query("GetEnforcedPowerLimit"), Rare: true,
			Telegraf: nm("power_limit", "W", 1, Float), DCGM: nm("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "W", 1, Float)},
		MetricEnergy: {Name: "energy_consumption", Unit: "mJ", Group: GroupPower, Kind: Counter, Type: Int,
			Help: "Total energy since the driver loaded.", Src: field("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
			DCGM: nm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ", 1, Int)},

		MetricUtilGPU: {Name: "utilization_gpu", Unit: "%", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Percent of time a kernel was running.", Src: buf(BufferGPUUtil),
			Telegraf: nm("utilization_gpu", "%", 1, Int), DCGM: nm("DCGM_FI_DEV_GPU_UTIL", "%", 1, Int)},
		MetricUtilMemory: {Name: "utilization_memory", Unit: "%", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Percent of time device memory was read or written.", Src: buf(BufferMemoryUtil),
			Telegraf: nm("utilization_memory", "%", 1, Int), DCGM: nm("DCGM_FI_DEV_MEM_COPY_UTIL", "%", 1, Int)},
		MetricUtilEncoder: {Name: "utilization_encoder", Unit: "%", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Video encoder utilization.", Src: buf(BufferEncoderUtil),
			Telegraf: nm("utilization_encoder", "%", 1, Int), DCGM: nm("DCGM_FI_DEV_ENC_UTIL", "%", 1, Int)},
		MetricUtilDecoder: {Name: "utilization_decoder", Unit: "%", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Video decoder utilization.", Src: buf(BufferDecoderUtil),
			Telegraf: nm("utilization_decoder", "%", 1, Int), DCGM: nm("DCGM_FI_DEV_DEC_UTIL", "%", 1, Int)},
		MetricUtilJPEG: {Name: "utilization_jpeg", Unit: "%", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "JPEG decoder utilization.", Src: buf(BufferJPEGUtil),
			Telegraf: nm("utilization_jpeg", "%", 1, Int)},
		MetricUtilOFA: {Name: "utilization_ofa", Unit: "%", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Optical flow accelerator utilization.", Src: buf(BufferOFAUtil),
			Telegraf: nm("utilization_ofa", "%", 1, Int)},

		MetricClockSM: {Name: "clocks_current_sm", Unit: "MHz", Group: GroupClocks, Kind: Gauge, Type: Int,
			Help: "SM clock from the sample buffer.", Src: buf(BufferSMClock),
			Telegraf: nm("clocks_current_sm", "MHz", 1, Int), DCGM: nm("DCGM_FI_DEV_SM_CLOCK", "MHz", 1, Int)},
		MetricClockMemory: {Name: "clocks_current_memory", Unit: "MHz", Group: GroupClocks, Kind: Gauge, Type: Int,
			Help: "Memory clock from the sample buffer.", Src: buf(BufferMemoryClock),
			Telegraf: nm("clocks_current_memory", "MHz", 1, Int), DCGM: nm("DCGM_FI_DEV_MEM_CLOCK", "MHz", 1, Int)},
		MetricClockGraphics: {Name: "clocks_current_graphics", Unit: "MHz", Group: GroupClocks, Kind: Gauge, Type: Int,
			Help: "Graphics clock.", Src: query("GetClockInfo(GRAPHICS)"),
			Telegraf: nm("clocks_current_graphics", "MHz", 1, Int)},
		MetricClockVideo: {Name: "clocks_current_video", Unit: "MHz", Group: GroupClocks, Kind: Gauge, Type: Int,
			Help: "Video clock.", Src: query("GetClockInfo(VIDEO)"),
			Telegraf: nm("clocks_current_video", "MHz", 1, Int), DCGM: nm("DCGM_FI_DEV_VIDEO_CLOCK", "MHz", 1, Int)},
		MetricClocksEventReasons: {Name: "clocks_event_reasons", Unit: "bitmask", Group: GroupThrottle, Kind: State, Type: Int,
			Help: "Active clock event (throttle) reasons, nvmlClocksEventReason bits.", Src: query("GetCurrentClocksEventReasons"),
			DCGM: nm("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "bitmask", 1, Int)},
		MetricPState: {Name: "pstate", Unit: "P", Group: GroupClocks, Kind: State, Type: Int,
			Help: "Performance state (0 = P0, fastest). Telegraf carries it as the pstate tag.", Src: query("GetPerformanceState"),
			DCGM: nm("DCGM_FI_DEV_PSTATE", "P", 1, Int)},

		MetricMemoryUsed: {Name: "memory_used", Unit: "MiB", Group: GroupMemory, Kind: Gauge, Type: Int,
			Help: "Framebuffer memory used.", Src: query("GetMemoryInfo"),
			Telegraf: nm("memory_used", "MiB", 1, Int), DCGM: nm("DCGM_FI_DEV_FB_USED", "MiB", 1, Int)},
		MetricMemoryFree: {Name: "memory_free", Unit: "MiB", Group: GroupMemory, Kind: Gauge, Type: Int,
			Help: "Framebuffer memory free.", Src: query("GetMemoryInfo"),
			Telegraf: nm("memory_free", "MiB", 1, Int), DCGM: nm("DCGM_FI_DEV_FB_FREE", "MiB", 1, Int)},
		MetricMemoryReserved: {Name: "memory_reserved", Unit: "MiB", Group: GroupMemory, Kind: Gauge, Type: Int,
			Help: "Framebuffer memory reserved by the driver.", Src: query("GetMemoryInfo_v2"), Rare: true,
			Telegraf: nm("memory_reserved", "MiB", 1, Int), DCGM: nm("DCGM_FI_DEV_FB_RESERVED", "MiB", 1, Int)},
		MetricMemoryTotal: {Name: "memory_total", Unit: "MiB", Group: GroupMemory, Kind: Gauge, Type: Int,
			Help: "Framebuffer memory total.", Src: query("GetMemoryInfo"), Rare: true,
			Telegraf: nm("memory_total", "MiB", 1, Int), DCGM: nm("DCGM_FI_DEV_FB_TOTAL", "MiB", 1, Int)},

		MetricTempGPU: {Name: "temperature_gpu", Unit: "°C", Group: GroupTemperature, Kind: Gauge, Type: Int,
			Help: "GPU core temperature.", Src: query("GetTemperature"),
			Telegraf: nm("temperature_gpu", "°C", 1, Int), DCGM: nm("DCGM_FI_DEV_GPU_TEMP", "°C", 1, Int)},
		MetricTempMemory: {Name: "temperature_memory", Unit: "°C", Group: GroupTemperature, Kind: Gauge, Type: Int,
			Help: "HBM temperature (field 82).", Src: field("NVML_FI_DEV_MEMORY_TEMP"),
			DCGM: nm("DCGM_FI_DEV_MEMORY_TEMP", "°C", 1, Int)},
		MetricFanSpeed: {Name: "fan_speed", Unit: "%", Group: GroupTemperature, Kind: Gauge, Type: Int,
			Help: "Fan speed (absent on passively cooled boards).", Src: query("GetFanSpeed"), Rare: true,
			Telegraf: nm("fan_speed", "%", 1, Int), DCGM: nm("DCGM_FI_DEV_FAN_SPEED", "%", 1, Int)},

		MetricThrottleSWPowerCap: {Name: "throttle_sw_power_cap", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Time clocks were held down by the software power cap.", Src: field("NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP"),
			Line: nm("clocks_event_reasons_counters_sw_power_cap", "us", 1e-3, Int)},
		MetricThrottleSyncBoost: {Name: "throttle_sync_boost", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Time clocks were held down by sync boost.", Src: field("NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST"),
			Line: nm("clocks_event_reasons_counters_sync_boost", "us", 1e-3, Int)},
		MetricThrottleSWThermal: {Name: "throttle_sw_thermal", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Time clocks were held down by software thermal slowdown.", Src: field("NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN"),
			Line: nm("clocks_event_reasons_counters_sw_therm_slowdown", "us", 1e-3, Int)},
		MetricThrottleHWThermal: {Name: "throttle_hw_thermal", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Time clocks were held down by hardware thermal slowdown.", Src: field("NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN"),
			Line: nm("clocks_event_reasons_counters_hw_therm_slowdown", "us", 1e-3, Int)},
		MetricThrottleHWPowerBrake: {Name: "throttle_hw_power_brake", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Time clocks were held down by the hardware power brake.", Src: field("NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN"),
			Line: nm("clocks_event_reasons_counters_hw_power_brake", "us", 1e-3, Int)},
		MetricViolationPower: {Name: "violation_power", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Perf-policy time limited by power (field 74).", Src: field("NVML_FI_DEV_PERF_POLICY_POWER"),
			DCGM: nm("DCGM_FI_DEV_POWER_VIOLATION", "us", 1e-3, Int)},
		MetricViolationThermal: {Name: "violation_thermal", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Perf-policy time limited by temperature (field 75).", Src: field("NVML_FI_DEV_PERF_POLICY_THERMAL"),
			DCGM: nm("DCGM_FI_DEV_THERMAL_VIOLATION", "us", 1e-3, Int)},
		MetricViolationSyncBoost: {Name: "violation_sync_boost", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Perf-policy time limited by sync boost (field 76).", Src: field("NVML_FI_DEV_PERF_POLICY_SYNC_BOOST"),
			DCGM: nm("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "us", 1e-3, Int)},
		MetricViolationBoardLimit: {Name: "violation_board_limit", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Perf-policy time limited by the board limit (field 77).", Src: field("NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT"),
			DCGM: nm("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "us", 1e-3, Int)},
		MetricViolationLowUtil: {Name: "violation_low_util", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Perf-policy time limited by low utilization (field 78).", Src: field("NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION"),
			DCGM: nm("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "us", 1e-3, Int)},
		MetricViolationReliability: {Name: "violation_reliability", Unit: "ns", Group: GroupThrottle, Kind: Counter, Type: Int,
			Help: "Perf-policy time limited by board reliability (field 79).", Src: field("NVML_FI_DEV_PERF_POLICY_RELIABILITY"),
			DCGM: nm("DCGM_FI_DEV_RELIABILITY_VIOLATION", "us", 1e-3, Int)},

		MetricPCIeTxBytes: {Name: "pcie_tx_bytes", Unit: "B", Group: GroupPCIe, Kind: Counter, Type: Int,
			Help: "PCIe bytes transmitted (NVML ≥ 12.4).", Src: field("NVML_FI_DEV_PCIE_COUNT_TX_BYTES")},
		MetricPCIeRxBytes: {Name: "pcie_rx_bytes", Unit: "B", Group: GroupPCIe, Kind: Counter, Type: Int,
			Help: "PCIe bytes received (NVML ≥ 12.4).", Src: field("NVML_FI_DEV_PCIE_COUNT_RX_BYTES")},
		MetricPCIeLinkGen: {Name: "pcie_link_gen_current", Unit: "gen", Group: GroupPCIe, Kind: State, Type: Int,
			Help: "Current PCIe link generation.", Src: query("GetCurrPcieLinkGeneration"), Rare: true,
			Telegraf: nm("pcie_link_gen_current", "gen", 1, Int), DCGM: nm("DCGM_FI_DEV_PCIE_LINK_GEN", "gen", 1, Int)},
		MetricPCIeLinkWidth: {Name: "pcie_link_width_current", Unit: "lanes", Group: GroupPCIe, Kind: State, Type: Int,
			Help: "Current PCIe link width.", Src: query("GetCurrPcieLinkWidth"), Rare: true,
			Telegraf: nm("pcie_link_width_current", "lanes", 1, Int), DCGM: nm("DCGM_FI_DEV_PCIE_LINK_WIDTH", "lanes", 1, Int)},
		MetricNVLinkTxBytes: {Name: "nvlink_tx_bytes", Unit: "B", Group: GroupNVLink, Kind: Counter, Type: Int,
			Help: "NVLink data bytes transmitted, all links (field 138, KiB in NVML).", Src: field("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX")},
		MetricNVLinkRxBytes: {Name: "nvlink_rx_bytes", Unit: "B", Group: GroupNVLink, Kind: Counter, Type: Int,
			Help: "NVLink data bytes received, all links (field 139, KiB in NVML).", Src: field("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")},

		MetricPCIeReplays: {Name: "pcie_replay_counter", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "PCIe replays.", Src: query("GetPcieReplayCounter"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "count", 1, Int)},
		MetricECCSingleVolatile: {Name: "ecc_errors_volatile_correctable", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "Corrected (single-bit) ECC errors since the driver loaded.", Src: query("GetTotalEccErrors(CORRECTED,VOLATILE)"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "count", 1, Int)},
		MetricECCDoubleVolatile: {Name: "ecc_errors_volatile_uncorrectable", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "Uncorrected (double-bit) ECC errors since the driver loaded.", Src: query("GetTotalEccErrors(UNCORRECTED,VOLATILE)"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "count", 1, Int)},
		MetricRemappedCorrectable: {Name: "remapped_rows_correctable", Unit: "rows", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "Rows remapped for correctable errors.", Src: query("GetRemappedRows"), Rare: true,
			Telegraf: nm("remapped_rows_correctable", "rows", 1, Int), DCGM: nm("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "rows", 1, Int)},
		MetricRemappedUncorrectable: {Name: "remapped_rows_uncorrectable", Unit: "rows", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "Rows remapped for uncorrectable errors.", Src: query("GetRemappedRows"), Rare: true,
			Telegraf: nm("remapped_rows_uncorrectable", "rows", 1, Int), DCGM: nm("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "rows", 1, Int)},
		MetricXIDCount: {Name: "xid_errors", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "XID critical errors the driver's event set delivered since gpusampler started (each also travels as an xid event).",
			// No DCGM naming: DCGM_FI_DEV_XID_ERRORS is the last XID's code,
			// which outputs derive from the xid events.
			Src: query("XidEvents")},

		MetricECCSingleAggregate: {Name: "ecc_errors_aggregate_correctable", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "Corrected (single-bit) ECC errors over the board's life (field 5).", Src: field("NVML_FI_DEV_ECC_SBE_AGG_TOTAL"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "count", 1, Int)},
		MetricECCDoubleAggregate: {Name: "ecc_errors_aggregate_uncorrectable", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "Uncorrected (double-bit) ECC errors over the board's life (field 6).", Src: field("NVML_FI_DEV_ECC_DBE_AGG_TOTAL"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "count", 1, Int)},
		// Telegraf's remapped_rows_pending/_failure are strings ("Yes"):
		// our names differ so an integer never clashes with them.
		MetricRowRemapPending: {Name: "row_remap_pending", Unit: "bool", Group: GroupHealth, Kind: State, Type: Int,
			Help: "1 when a row remapping is pending (the GPU needs a reset to apply it; field 144).", Src: field("NVML_FI_DEV_REMAPPED_PENDING"), Rare: true,
			TelegrafText: yesNo("remapped_rows_pending", ""),
			DCGM:         nm("DCGM_FI_DEV_ROW_REMAP_PENDING", "bool", 1, Int)},
		MetricRowRemapFailure: {Name: "row_remap_failure", Unit: "bool", Group: GroupHealth, Kind: State, Type: Int,
			Help: "1 when a row remapping failed (the GPU should be serviced; field 145).", Src: field("NVML_FI_DEV_REMAPPED_FAILURE"), Rare: true,
			TelegrafText: yesNo("remapped_rows_failure", ""),
			DCGM:         nm("DCGM_FI_DEV_ROW_REMAP_FAILURE", "bool", 1, Int)},
		MetricRetiredPagesSingle: {Name: "retired_pages_single_bit", Unit: "pages", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "Pages retired for multiple single-bit ECC errors (pre-Ampere page retirement; field 29).", Src: field("NVML_FI_DEV_RETIRED_SBE"), Rare: true,
			Telegraf: nm("retired_pages_multiple_single_bit", "pages", 1, Int), DCGM: nm("DCGM_FI_DEV_RETIRED_SBE", "pages", 1, Int)},
		MetricRetiredPagesDouble: {Name: "retired_pages_double_bit", Unit: "pages", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "Pages retired for double-bit ECC errors (pre-Ampere page retirement; field 30).", Src: field("NVML_FI_DEV_RETIRED_DBE"), Rare: true,
			Telegraf: nm("retired_pages_double_bit", "pages", 1, Int), DCGM: nm("DCGM_FI_DEV_RETIRED_DBE", "pages", 1, Int)},
		MetricNVLinkCRCFlitErrors: {Name: "nvlink_crc_flit_errors", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "NVLink flow-control CRC errors, summed over links by the driver (field 38).", Src: field("NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "count", 1, Int)},
		MetricNVLinkCRCDataErrors: {Name: "nvlink_crc_data_errors", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "NVLink data CRC errors, summed over links by the driver (field 45).", Src: field("NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "count", 1, Int)},
		MetricNVLinkReplayErrors: {Name: "nvlink_replay_errors", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "NVLink replays, summed over links by the driver (field 52).", Src: field("NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "count", 1, Int)},
		MetricNVLinkRecoveryErrors: {Name: "nvlink_recovery_errors", Unit: "count", Group: GroupHealth, Kind: Counter, Type: Int,
			Help: "NVLink link recoveries, summed over links by the driver (field 59).", Src: field("NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"), Rare: true,
			DCGM: nm("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "count", 1, Int)},

		MetricGraphicsActive: prof("graphics_active", "Percent of time the graphics or compute engine was active (GPM).",
			"GPM_METRIC_GRAPHICS_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
		MetricSMActive: prof("sm_active", "Percent of time at least one warp was resident per SM, averaged over SMs (GPM). Low with high utilization_gpu: the SMs mostly wait.",
			"GPM_METRIC_SM_UTIL", "DCGM_FI_PROF_SM_ACTIVE"),
		MetricSMOccupancy: prof("sm_occupancy", "Resident warps as a percent of the SMs' maximum (GPM).",
			"GPM_METRIC_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY"),
		MetricTensorActive: prof("tensor_active", "Percent of time any tensor pipe was active (GPM).",
			"GPM_METRIC_ANY_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
		MetricTensorDFMAActive: prof("tensor_dfma_active", "Percent of time the FP64 (DFMA) tensor pipe was active (GPM).",
			"GPM_METRIC_DFMA_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE"),
		MetricTensorHMMAActive: prof("tensor_hmma_active", "Percent of time the half-precision (HMMA) tensor pipe was active (GPM).",
			"GPM_METRIC_HMMA_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE"),
		MetricTensorIMMAActive: prof("tensor_imma_active", "Percent of time the integer (IMMA) tensor pipe was active (GPM).",
			"GPM_METRIC_IMMA_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE"),
		MetricFP64Active: prof("fp64_active", "Percent of time the FP64 pipe was active (GPM).",
			"GPM_METRIC_FP64_UTIL", "DCGM_FI_PROF_PIPE_FP64_ACTIVE"),
		MetricFP32Active: prof("fp32_active", "Percent of time the FP32 pipe was active (GPM).",
			"GPM_METRIC_FP32_UTIL", "DCGM_FI_PROF_PIPE_FP32_ACTIVE"),
		MetricFP16Active: prof("fp16_active", "Percent of time the FP16 pipe was active (GPM).",
			"GPM_METRIC_FP16_UTIL", "DCGM_FI_PROF_PIPE_FP16_ACTIVE"),
		MetricDRAMActive: prof("dram_active", "DRAM bandwidth used, percent of peak (GPM).",
			"GPM_METRIC_DRAM_BW_UTIL", "DCGM_FI_PROF_DRAM_ACTIVE"),
		MetricPCIeTxRate: rate("pcie_tx_rate", "PCIe bytes per second sent by the GPU (GPM; MiB/s in NVML).",
			"GPM_METRIC_PCIE_TX_PER_SEC", "DCGM_FI_PROF_PCIE_TX_BYTES"),
		MetricPCIeRxRate: rate("pcie_rx_rate", "PCIe bytes per second received by the GPU (GPM; MiB/s in NVML).",
			"GPM_METRIC_PCIE_RX_PER_SEC", "DCGM_FI_PROF_PCIE_RX_BYTES"),
		MetricNVLinkTxRate: rate("nvlink_tx_rate", "NVLink bytes per second sent, all links (GPM; MiB/s in NVML).",
			"GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "DCGM_FI_PROF_NVLINK_TX_BYTES"),
		MetricNVLinkRxRate: rate("nvlink_rx_rate", "NVLink bytes per second received, all links (GPM; MiB/s in NVML).",
			"GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", "DCGM_FI_PROF_NVLINK_RX_BYTES"),

		MetricDisplayMode: {Name: "display_enabled", Unit: "bool", Group: GroupHealth, Kind: State, Type: Int,
			Help: "1 when a display can be attached to the GPU (display mode enabled).", Src: query("GetDisplayMode"), Rare: true,
			TelegrafText: enabled("display_mode")},
		MetricDisplayActive: {Name: "display_in_use", Unit: "bool", Group: GroupHealth, Kind: State, Type: Int,
			Help: "1 when a display is initialized on the GPU (e.g. an X server has a screen on it).", Src: query("GetDisplayActive"), Rare: true,
			TelegrafText: enabled("display_active")},
		MetricEncoderSessions: {Name: "encoder_sessions", Unit: "count", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Active video encoder sessions.", Src: query("GetEncoderStats"), Rare: true,
			Telegraf: nm("encoder_stats_session_count", "count", 1, Int)},
		MetricEncoderFPS: {Name: "encoder_average_fps", Unit: "fps", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Frames per second averaged over the active encoder sessions.", Src: query("GetEncoderStats"), Rare: true,
			Telegraf: nm("encoder_stats_average_fps", "fps", 1, Int)},
		MetricEncoderLatency: {Name: "encoder_average_latency", Unit: "us", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Encode latency averaged over the active encoder sessions.", Src: query("GetEncoderStats"), Rare: true,
			Telegraf: nm("encoder_stats_average_latency", "us", 1, Int)},
		MetricFBCSessions: {Name: "fbc_sessions", Unit: "count", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Active frame buffer capture sessions.", Src: query("GetFBCStats"), Rare: true,
			Telegraf: nm("fbc_stats_session_count", "count", 1, Int)},
		MetricFBCFPS: {Name: "fbc_average_fps", Unit: "fps", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Frames per second averaged over the frame buffer capture sessions.", Src: query("GetFBCStats"), Rare: true,
			Telegraf: nm("fbc_stats_average_fps", "fps", 1, Int)},
		MetricFBCLatency: {Name: "fbc_average_latency", Unit: "us", Group: GroupUtilization, Kind: Gauge, Type: Int,
			Help: "Capture latency averaged over the frame buffer capture sessions.", Src: query("GetFBCStats"), Rare: true,
			Telegraf: nm("fbc_stats_average_latency", "us", 1, Int)},
		MetricRetiredPagesPending: {Name: "page_retirement_pending", Unit: "bool", Group: GroupHealth, Kind: State, Type: Int,
			Help: "1 when pages are waiting to be retired at the next driver reload (pre-Ampere page retirement).", Src: query("GetRetiredPagesPendingStatus"), Rare: true,
			// nvidia-smi called it "pending blacklist" before "pending
			// retirement"; Telegraf reads both elements.
			TelegrafText: yesNo("retired_pages_pending", "retired_pages_blacklist")},
		numMetrics: {},
	}[:numMetrics]
}

// NewCatalog returns the built-in catalog. It is immutable; share it freely.
func NewCatalog() *Catalog {
	ms := buildCatalog()
	c := &Catalog{metrics: ms, byName: make(map[string]MetricID, len(ms))}
	for i := 1; i < len(ms); i++ {
		ms[i].ID = MetricID(i)
		c.byName[ms[i].Name] = MetricID(i)
	}
	return c
}

// defaultCatalog is the catalog Default returns, built once.
var defaultCatalog = NewCatalog()

// Default returns the built-in catalog, one instance shared by every
// caller: a Catalog cannot be modified, and what it hands out are copies.
// Code that is given a catalog (an option, a Config field) uses that one;
// Default is for where none is given.
func Default() *Catalog { return defaultCatalog }

// Len returns the number of valid metric IDs plus one (IDs run 1..Len()-1).
func (c *Catalog) Len() int { return len(c.metrics) }

// Get returns a copy of the metric for id; ok is false when id is not in
// the catalog.
func (c *Catalog) Get(id MetricID) (m Metric, ok bool) {
	if id == 0 || int(id) >= len(c.metrics) {
		return Metric{}, false
	}
	return c.metrics[id], true
}

// Lookup returns a copy of the metric with our name; ok is false when there
// is none.
func (c *Catalog) Lookup(name string) (m Metric, ok bool) {
	id, ok := c.byName[name]
	if !ok {
		return Metric{}, false
	}
	return c.metrics[id], true
}

// All returns every metric in catalog order, in a new slice the caller may
// keep and modify.
func (c *Catalog) All() []Metric { return slices.Clone(c.metrics[1:]) }

// BufferMetric returns the metric drained from buffer type t.
func (c *Catalog) BufferMetric(t BufferType) MetricID {
	for i := 1; i < len(c.metrics); i++ {
		if c.metrics[i].Src.Kind == FromBuffer && c.metrics[i].Src.Buffer == t {
			return MetricID(i)
		}
	}
	return 0
}

// Name returns the metric's name, or "metric(N)" for unknown ids.
func (c *Catalog) Name(id MetricID) string {
	if id != 0 && int(id) < len(c.metrics) {
		return c.metrics[id].Name
	}
	return fmt.Sprintf("metric(%d)", id)
}
