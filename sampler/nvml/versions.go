package nvml

import (
	"fmt"
	"strconv"
	"strings"
)

// APIVersion is an NVML API version as the headers number it ("12.4",
// "13.1"). The driver reports its NVML version as "<cuda major>.<driver
// branch>.<minor>[.<patch>]" ("12.550.54.15"); the branch decides the API
// version, see ParseNVMLVersion.
type APIVersion struct {
	Major, Minor int
}

func (v APIVersion) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// Less reports whether v is older than w.
func (v APIVersion) Less(w APIVersion) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	return v.Minor < w.Minor
}

// AtLeast reports whether v is w or newer.
func (v APIVersion) AtLeast(w APIVersion) bool { return !v.Less(w) }

// NVML API versions named in the tables below, with the driver branch that
// first shipped each.
var (
	api12_0 = APIVersion{12, 0} // R525
	api12_2 = APIVersion{12, 2} // R535: the oldest driver we support
	api12_3 = APIVersion{12, 3} // R545
	api12_4 = APIVersion{12, 4} // R550
	api12_5 = APIVersion{12, 5} // R555
	api12_8 = APIVersion{12, 8} // R570
	api12_9 = APIVersion{12, 9} // R575
	api13_0 = APIVersion{13, 0} // R580
	api13_1 = APIVersion{13, 1} // R590
)

// MinSupported is the oldest NVML API the backend supports (driver R535).
var MinSupported = api12_2

// branches maps driver branches to the NVML API version they ship, newest
// first.
var branches = []struct {
	branch int
	api    APIVersion
}{
	{590, api13_1}, {580, api13_0}, {575, api12_9}, {570, api12_8},
	{565, APIVersion{12, 7}}, {560, APIVersion{12, 6}}, {555, api12_5}, {550, api12_4},
	{545, api12_3}, {535, api12_2}, {530, APIVersion{12, 1}}, {525, api12_0},
	{520, APIVersion{11, 8}}, {515, APIVersion{11, 7}}, {510, APIVersion{11, 6}},
}

// NVMLVersion is the version SystemGetNVMLVersion reports, parsed.
type NVMLVersion struct {
	// Raw is the string as the driver reported it ("12.550.54.15").
	Raw string
	// Branch is the driver branch (550).
	Branch int
	// API is the NVML API version that branch implements (12.4).
	API APIVersion
}

// ParseNVMLVersion parses SystemGetNVMLVersion's string. Branches newer than
// the table know map to the newest known API version; older ones to 11.x.
func ParseNVMLVersion(s string) (NVMLVersion, error) {
	v := NVMLVersion{Raw: s}
	parts := strings.Split(strings.TrimSpace(s), ".")
	if len(parts) < 2 {
		return v, fmt.Errorf("parse nvml version %q: want <major>.<branch>[.<minor>...]", s)
	}
	major, err1 := strconv.Atoi(parts[0])
	branch, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major <= 0 || branch <= 0 {
		return v, fmt.Errorf("parse nvml version %q: want <major>.<branch>[.<minor>...]", s)
	}
	v.Branch = branch
	v.API = APIVersion{Major: major}
	for _, b := range branches {
		if branch >= b.branch {
			v.API = b.api
			return v, nil
		}
	}
	return v, nil
}

// symbolSince lists every NVML function the backend may call beyond Init,
// with the lowest API version that has it. The table documents; the
// decision to call is made by looking the symbol up in the loaded library
// (a call to an absent symbol kills the process), so a backport or a removal
// cannot crash us.
var symbolSince = map[string]APIVersion{
	"nvmlSystemGetDriverVersion":                {10, 0},
	"nvmlSystemGetNVMLVersion":                  {10, 0},
	"nvmlSystemGetCudaDriverVersion_v2":         {10, 0},
	"nvmlDeviceGetCount_v2":                     {10, 0},
	"nvmlDeviceGetHandleByIndex_v2":             {10, 0},
	"nvmlDeviceGetUUID":                         {10, 0},
	"nvmlDeviceGetName":                         {10, 0},
	"nvmlDeviceGetSerial":                       {10, 0},
	"nvmlDeviceGetVbiosVersion":                 {10, 0},
	"nvmlDeviceGetPciInfo_v3":                   {10, 0},
	"nvmlDeviceGetMemoryInfo":                   {10, 0},
	"nvmlDeviceGetMemoryInfo_v2":                {11, 6},
	"nvmlDeviceGetTemperatureThreshold":         {10, 0},
	"nvmlDeviceGetSamples":                      {10, 0},
	"nvmlDeviceGetFieldValues":                  {10, 0},
	"nvmlDeviceGetUtilizationRates":             {10, 0},
	"nvmlDeviceGetPowerUsage":                   {10, 0},
	"nvmlDeviceGetTemperature":                  {10, 0},
	"nvmlDeviceGetTemperatureV":                 api12_8,
	"nvmlDeviceGetClockInfo":                    {10, 0},
	"nvmlDeviceGetCurrentClocksThrottleReasons": {10, 0},
	"nvmlDeviceGetCurrentClocksEventReasons":    api12_2,
	"nvmlDeviceGetPerformanceState":             {10, 0},
	"nvmlDeviceGetEnforcedPowerLimit":           {10, 0},
	"nvmlDeviceGetFanSpeed":                     {10, 0},
	"nvmlDeviceGetCurrPcieLinkGeneration":       {10, 0},
	"nvmlDeviceGetCurrPcieLinkWidth":            {10, 0},
	"nvmlDeviceGetPcieReplayCounter":            {10, 0},
	"nvmlDeviceGetTotalEccErrors":               {10, 0},
	"nvmlDeviceGetRemappedRows":                 {11, 0},
	"nvmlDeviceGetEncoderUtilization":           {10, 0},
	"nvmlDeviceGetDecoderUtilization":           {10, 0},
	"nvmlDeviceGetJpgUtilization":               api12_0,
	"nvmlDeviceGetOfaUtilization":               api12_0,
	"nvmlDeviceGetDisplayMode":                  {10, 0},
	"nvmlDeviceGetDisplayActive":                {10, 0},
	"nvmlDeviceGetEncoderStats":                 {10, 0},
	"nvmlDeviceGetFBCStats":                     {10, 0},
	"nvmlDeviceGetRetiredPagesPendingStatus":    {10, 0},
	// Getters standing in for fields GetFieldValues does not give
	// (fallbackByField). GetViolationStatus is deprecated in the 13.0
	// headers, still exported.
	"nvmlDeviceGetTotalEnergyConsumption": {10, 0},
	"nvmlDeviceGetThermalSettings":        {11, 0},
	"nvmlDeviceGetViolationStatus":        {10, 0},
	"nvmlDeviceGetPcieThroughput":         {10, 0},
	"nvmlDeviceGetRetiredPages":           {10, 0},
	"nvmlDeviceGetNvLinkErrorCounter":     {10, 0},
	"nvmlDeviceGetHandleByUUID":           {10, 0},
	"nvmlDeviceGetPersistenceMode":        {10, 0},
	"nvmlDeviceGetEccMode":                {10, 0},
	"nvmlDeviceGetComputeMode":            {10, 0},
	"nvmlDeviceGetArchitecture":           {11, 0},
	// The GPU's NUMA placement (bench and the live NUMA finding).
	"nvmlDeviceGetCpuAffinity": {10, 0},
	// Processes. go-nvml binds the running-process lists to the newest
	// version the library has (_v3, _v2, else the original).
	"nvmlDeviceGetComputeRunningProcesses":     {10, 0},
	"nvmlDeviceGetComputeRunningProcesses_v2":  {11, 1},
	"nvmlDeviceGetComputeRunningProcesses_v3":  {11, 6},
	"nvmlDeviceGetGraphicsRunningProcesses":    {10, 0},
	"nvmlDeviceGetGraphicsRunningProcesses_v2": {11, 1},
	"nvmlDeviceGetGraphicsRunningProcesses_v3": {11, 6},
	"nvmlDeviceGetProcessUtilization":          {10, 0},
	"nvmlSystemGetProcessName":                 {10, 0},
	// MIG instances as devices.
	"nvmlDeviceGetMigMode":                {11, 0},
	"nvmlDeviceGetMaxMigDeviceCount":      {11, 0},
	"nvmlDeviceGetMigDeviceHandleByIndex": {11, 0},
	"nvmlDeviceGetGpuInstanceId":          {11, 0},
	"nvmlDeviceGetComputeInstanceId":      {11, 0},
	"nvmlGpmMigSampleGet":                 api12_0,
	// GPM (GPU performance monitoring, Hopper+).
	"nvmlGpmQueryDeviceSupport": api12_0,
	"nvmlGpmSampleAlloc":        api12_0,
	"nvmlGpmSampleFree":         api12_0,
	"nvmlGpmSampleGet":          api12_0,
	"nvmlGpmMetricsGet":         api12_0,
	// Events. go-nvml binds its EventSetWait to _v2 when the library has
	// it, else to the original; one of them must exist.
	"nvmlEventSetCreate":               {10, 0},
	"nvmlEventSetFree":                 {10, 0},
	"nvmlEventSetWait":                 {10, 0},
	"nvmlEventSetWait_v2":              {10, 0},
	"nvmlDeviceRegisterEvents":         {10, 0},
	"nvmlDeviceGetSupportedEventTypes": {10, 0},
}

// fieldDef maps an NVML field symbol to its numeric id over a range of API
// versions, and the scale from NVML's unit to the catalog's base unit.
type fieldDef struct {
	symbol string
	id     uint32
	since  APIVersion // first API version where symbol has this id
	until  APIVersion // first API version where it no longer does; zero: still does
	scale  float64
}

// fieldDefs is the one table of field ids by NVML version. Ids can move
// between versions: the thermal and power-brake throttle-time counters are
// 251–253 in the 12.9 and 13.0 headers (absent before) and 269–271 from 13.1,
// where 251–253 became power-smoothing fields. Asking an older driver for an
// id it defines differently returns a wrong value without an error, so a
// field outside its range is never requested.
var fieldDefs = []fieldDef{
	{symbol: "NVML_FI_DEV_ECC_SBE_VOL_TOTAL", id: 3, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_ECC_DBE_VOL_TOTAL", id: 4, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_ECC_SBE_AGG_TOTAL", id: 5, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_ECC_DBE_AGG_TOTAL", id: 6, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_RETIRED_SBE", id: 29, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_RETIRED_DBE", id: 30, since: APIVersion{10, 0}, scale: 1},
	// NVLink error counters summed over links by the driver (the _TOTAL
	// fields; per-link ids differ for links 0–5 and 6–11).
	{symbol: "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", id: 38, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", id: 45, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", id: 52, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", id: 59, since: APIVersion{10, 0}, scale: 1},
	// Perf-policy counters (ns); stable ids. SW power cap and sync boost
	// throttle time are aliases of 74 and 76.
	{symbol: "NVML_FI_DEV_PERF_POLICY_POWER", id: 74, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_PERF_POLICY_THERMAL", id: 75, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_PERF_POLICY_SYNC_BOOST", id: 76, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT", id: 77, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION", id: 78, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_PERF_POLICY_RELIABILITY", id: 79, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP", id: 74, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST", id: 76, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_MEMORY_TEMP", id: 82, since: APIVersion{10, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", id: 83, since: APIVersion{10, 0}, scale: 1}, // mJ
	{symbol: "NVML_FI_DEV_PCIE_REPLAY_COUNTER", id: 94, since: APIVersion{10, 0}, scale: 1},
	// NVLink data throughput counters are KiB; the catalog wants bytes.
	{symbol: "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", id: 138, since: APIVersion{10, 0}, scale: 1024},
	{symbol: "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", id: 139, since: APIVersion{10, 0}, scale: 1024},
	{symbol: "NVML_FI_DEV_REMAPPED_COR", id: 142, since: APIVersion{11, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_REMAPPED_UNC", id: 143, since: APIVersion{11, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_REMAPPED_PENDING", id: 144, since: APIVersion{11, 0}, scale: 1},
	{symbol: "NVML_FI_DEV_REMAPPED_FAILURE", id: 145, since: APIVersion{11, 0}, scale: 1},
	// Instant power is mW; the catalog wants W. First defined in the 12.2
	// headers (R535).
	{symbol: "NVML_FI_DEV_POWER_INSTANT", id: 186, since: api12_2, scale: 1e-3},
	// PCIe byte counters: the issue and DESIGN say NVML 12.4; the published
	// 12.4.99 header lacks them and 12.5.39 has them. 197/198 meant nothing
	// else before, so asking a 12.4 driver is harmless.
	{symbol: "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", id: 197, since: api12_4, scale: 1},
	{symbol: "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", id: 198, since: api12_4, scale: 1},
	{symbol: "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", id: 251, since: api12_9, until: api13_1, scale: 1},
	{symbol: "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN", id: 252, since: api12_9, until: api13_1, scale: 1},
	{symbol: "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", id: 253, since: api12_9, until: api13_1, scale: 1},
	{symbol: "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", id: 269, since: api13_1, scale: 1},
	{symbol: "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN", id: 270, since: api13_1, scale: 1},
	{symbol: "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", id: 271, since: api13_1, scale: 1},
}

// FieldID returns the numeric field id of an NVML field symbol under NVML
// API version v, its scale to the catalog's base unit, and whether v has the
// field at all.
func FieldID(symbol string, v APIVersion) (id uint32, scale float64, ok bool) {
	for _, f := range fieldDefs {
		if f.symbol != symbol || v.Less(f.since) {
			continue
		}
		if f.until != (APIVersion{}) && !v.Less(f.until) {
			continue
		}
		return f.id, f.scale, true
	}
	return 0, 0, false
}

// knownField reports whether the table knows symbol at all (in any version).
func knownField(symbol string) bool {
	for _, f := range fieldDefs {
		if f.symbol == symbol {
			return true
		}
	}
	return false
}
