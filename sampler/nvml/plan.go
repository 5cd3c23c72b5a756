//go:build cgo

package nvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

// planKind says how the backend reads one catalog metric.
type planKind uint8

const (
	planUnsupported planKind = iota // never asked: err says why
	planField                       // one value of the per-tick GetFieldValues batch
	planQuery                       // a point query
	planGPM                         // one metric of the per-read GPM snapshot pair
)

// query identifies a point query (several metrics may share one call).
type query uint8

const (
	qNone query = iota
	qPowerLimit
	qPowerUsage
	qClockGraphics
	qClockVideo
	qClockSM
	qClockMemory
	qEventReasons
	qPState
	qMemUsed
	qMemFree
	qMemTotal
	qMemReserved
	qTempGPU
	qFan
	qPCIeGen
	qPCIeWidth
	qPCIeReplay
	qECCCorrected
	qECCUncorrected
	qRemappedCor
	qRemappedUnc
	qUtilGPU
	qUtilMemory
	qXIDCount
	qUtilEncoder
	qUtilDecoder
	qUtilJPEG
	qUtilOFA
	qDisplayMode
	qDisplayActive
	qEncSessions
	qEncFPS
	qEncLatency
	qFBCSessions
	qFBCFPS
	qFBCLatency
	qRetiredPending
	// Dedicated getters that stand in for fields GetFieldValues does not
	// give (fallbackByField).
	qEnergy
	qTempMemory
	qViolPower
	qViolThermal
	qViolSyncBoost
	qViolBoardLimit
	qViolLowUtil
	qViolReliability
	qPCIeTx
	qPCIeRx
	qECCAggCorrected
	qECCAggUncorrected
	qRemappedPending
	qRemappedFailure
	qRetiredSBE
	qRetiredDBE
	qNVLinkReplay // the NVLink error counters in nvmlNvLinkErrorCounter_t order
	qNVLinkRecovery
	qNVLinkCRCFlit
	qNVLinkCRCData
)

// metricPlan is how one metric is read on this driver. Plans are built once
// per Source and shared read-only by its devices.
type metricPlan struct {
	kind    planKind
	name    string // for errors: the field symbol or query name
	fieldID uint32
	scale   float64
	query   query
	gpmID   nvml.GpmMetricId
	// errNS is the metric's prebuilt "not supported" error, returned without
	// a C call once the device said so (probe once, cache).
	errNS error
	// fallback is the dedicated getter that reads a field metric when
	// GetFieldValues answers NOT_SUPPORTED for it (qNone: none, or its
	// function is absent from this driver: noFallback says which).
	fallback   query
	noFallback string
	// errBothNS is the "not supported" error once the field and its
	// getter both said so.
	errBothNS error
}

// fallbackByField maps field symbols to the dedicated getter that reads the
// same metric when GetFieldValues does not (NOT_SUPPORTED, or the field is
// not defined in this driver's NVML version). Fields without one: instant
// power (GetPowerUsage is a 1 s average, another metric), the thermal and
// power-brake throttle-time counters (no getter), NVLink data bytes (the
// per-link utilization counters need a control set on the device, which
// gpusampler never changes). Retired pages are counted from the page lists
// GetRetiredPages gives per cause; the NVLink error totals are the sums of
// GetNvLinkErrorCounter over the device's links.
var fallbackByField = map[string]query{
	"NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION":          qEnergy,
	"NVML_FI_DEV_MEMORY_TEMP":                       qTempMemory,
	"NVML_FI_DEV_PERF_POLICY_POWER":                 qViolPower,
	"NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP":  qViolPower,
	"NVML_FI_DEV_PERF_POLICY_THERMAL":               qViolThermal,
	"NVML_FI_DEV_PERF_POLICY_SYNC_BOOST":            qViolSyncBoost,
	"NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST":    qViolSyncBoost,
	"NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT":           qViolBoardLimit,
	"NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION":       qViolLowUtil,
	"NVML_FI_DEV_PERF_POLICY_RELIABILITY":           qViolReliability,
	"NVML_FI_DEV_PCIE_COUNT_TX_BYTES":               qPCIeTx,
	"NVML_FI_DEV_PCIE_COUNT_RX_BYTES":               qPCIeRx,
	"NVML_FI_DEV_ECC_SBE_AGG_TOTAL":                 qECCAggCorrected,
	"NVML_FI_DEV_ECC_DBE_AGG_TOTAL":                 qECCAggUncorrected,
	"NVML_FI_DEV_REMAPPED_PENDING":                  qRemappedPending,
	"NVML_FI_DEV_REMAPPED_FAILURE":                  qRemappedFailure,
	"NVML_FI_DEV_RETIRED_SBE":                       qRetiredSBE,
	"NVML_FI_DEV_RETIRED_DBE":                       qRetiredDBE,
	"NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL":   qNVLinkReplay,
	"NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": qNVLinkRecovery,
	"NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": qNVLinkCRCFlit,
	"NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": qNVLinkCRCData,
}

// queriesByName maps the catalog's query names to point queries. Memory and
// remapped-row queries serve several metrics; the metric id picks one.
var queriesByName = map[string]query{
	"GetEnforcedPowerLimit":                   qPowerLimit,
	"GetClockInfo(GRAPHICS)":                  qClockGraphics,
	"GetClockInfo(VIDEO)":                     qClockVideo,
	"GetCurrentClocksEventReasons":            qEventReasons,
	"GetPerformanceState":                     qPState,
	"GetMemoryInfo_v2":                        qMemReserved,
	"GetTemperature":                          qTempGPU,
	"GetFanSpeed":                             qFan,
	"GetCurrPcieLinkGeneration":               qPCIeGen,
	"GetCurrPcieLinkWidth":                    qPCIeWidth,
	"GetPcieReplayCounter":                    qPCIeReplay,
	"GetTotalEccErrors(CORRECTED,VOLATILE)":   qECCCorrected,
	"GetTotalEccErrors(UNCORRECTED,VOLATILE)": qECCUncorrected,
	"XidEvents":                               qXIDCount,
	"GetDisplayMode":                          qDisplayMode,
	"GetDisplayActive":                        qDisplayActive,
	"GetRetiredPagesPendingStatus":            qRetiredPending,
}

// queryByMetric covers query names shared by several metrics, and the point
// reads of buffer metrics.
var queryByMetric = map[catalog.MetricID]query{
	catalog.MetricMemoryUsed:            qMemUsed,
	catalog.MetricMemoryFree:            qMemFree,
	catalog.MetricMemoryTotal:           qMemTotal,
	catalog.MetricRemappedCorrectable:   qRemappedCor,
	catalog.MetricRemappedUncorrectable: qRemappedUnc,
	catalog.MetricEncoderSessions:       qEncSessions,
	catalog.MetricEncoderFPS:            qEncFPS,
	catalog.MetricEncoderLatency:        qEncLatency,
	catalog.MetricFBCSessions:           qFBCSessions,
	catalog.MetricFBCFPS:                qFBCFPS,
	catalog.MetricFBCLatency:            qFBCLatency,
	// Point reads ("current value") of buffer metrics. The engine asks for
	// utilization when an idle GPU's buffers run dry.
	catalog.MetricUtilGPU:     qUtilGPU,
	catalog.MetricUtilMemory:  qUtilMemory,
	catalog.MetricPowerDraw:   qPowerUsage,
	catalog.MetricClockSM:     qClockSM,
	catalog.MetricClockMemory: qClockMemory,
	catalog.MetricUtilEncoder: qUtilEncoder,
	catalog.MetricUtilDecoder: qUtilDecoder,
	catalog.MetricUtilJPEG:    qUtilJPEG,
	catalog.MetricUtilOFA:     qUtilOFA,
}

// fieldForQuery lists slow-state metrics that a field reads as well as a
// point query; they join one GetFieldValues batch instead of one C call each.
var fieldForQuery = map[catalog.MetricID]string{
	catalog.MetricPCIeReplays:           "NVML_FI_DEV_PCIE_REPLAY_COUNTER",
	catalog.MetricECCSingleVolatile:     "NVML_FI_DEV_ECC_SBE_VOL_TOTAL",
	catalog.MetricECCDoubleVolatile:     "NVML_FI_DEV_ECC_DBE_VOL_TOTAL",
	catalog.MetricRemappedCorrectable:   "NVML_FI_DEV_REMAPPED_COR",
	catalog.MetricRemappedUncorrectable: "NVML_FI_DEV_REMAPPED_UNC",
}

// querySymbols names the NVML functions a query needs (any one of them).
var querySymbols = map[query][]string{
	qPowerLimit:        {"nvmlDeviceGetEnforcedPowerLimit"},
	qPowerUsage:        {"nvmlDeviceGetPowerUsage"},
	qClockGraphics:     {"nvmlDeviceGetClockInfo"},
	qClockVideo:        {"nvmlDeviceGetClockInfo"},
	qClockSM:           {"nvmlDeviceGetClockInfo"},
	qClockMemory:       {"nvmlDeviceGetClockInfo"},
	qEventReasons:      {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
	qPState:            {"nvmlDeviceGetPerformanceState"},
	qMemUsed:           {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"},
	qMemFree:           {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"},
	qMemTotal:          {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"},
	qMemReserved:       {"nvmlDeviceGetMemoryInfo_v2"},
	qTempGPU:           {"nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"},
	qFan:               {"nvmlDeviceGetFanSpeed"},
	qPCIeGen:           {"nvmlDeviceGetCurrPcieLinkGeneration"},
	qPCIeWidth:         {"nvmlDeviceGetCurrPcieLinkWidth"},
	qPCIeReplay:        {"nvmlDeviceGetPcieReplayCounter"},
	qECCCorrected:      {"nvmlDeviceGetTotalEccErrors"},
	qECCUncorrected:    {"nvmlDeviceGetTotalEccErrors"},
	qRemappedCor:       {"nvmlDeviceGetRemappedRows"},
	qRemappedUnc:       {"nvmlDeviceGetRemappedRows"},
	qUtilGPU:           {"nvmlDeviceGetUtilizationRates"},
	qUtilMemory:        {"nvmlDeviceGetUtilizationRates"},
	qXIDCount:          {"nvmlDeviceRegisterEvents"},
	qUtilEncoder:       {"nvmlDeviceGetEncoderUtilization"},
	qUtilDecoder:       {"nvmlDeviceGetDecoderUtilization"},
	qUtilJPEG:          {"nvmlDeviceGetJpgUtilization"},
	qUtilOFA:           {"nvmlDeviceGetOfaUtilization"},
	qDisplayMode:       {"nvmlDeviceGetDisplayMode"},
	qDisplayActive:     {"nvmlDeviceGetDisplayActive"},
	qEncSessions:       {"nvmlDeviceGetEncoderStats"},
	qEncFPS:            {"nvmlDeviceGetEncoderStats"},
	qEncLatency:        {"nvmlDeviceGetEncoderStats"},
	qFBCSessions:       {"nvmlDeviceGetFBCStats"},
	qFBCFPS:            {"nvmlDeviceGetFBCStats"},
	qFBCLatency:        {"nvmlDeviceGetFBCStats"},
	qRetiredPending:    {"nvmlDeviceGetRetiredPagesPendingStatus"},
	qEnergy:            {"nvmlDeviceGetTotalEnergyConsumption"},
	qTempMemory:        {"nvmlDeviceGetThermalSettings"},
	qViolPower:         {"nvmlDeviceGetViolationStatus"},
	qViolThermal:       {"nvmlDeviceGetViolationStatus"},
	qViolSyncBoost:     {"nvmlDeviceGetViolationStatus"},
	qViolBoardLimit:    {"nvmlDeviceGetViolationStatus"},
	qViolLowUtil:       {"nvmlDeviceGetViolationStatus"},
	qViolReliability:   {"nvmlDeviceGetViolationStatus"},
	qPCIeTx:            {"nvmlDeviceGetPcieThroughput"},
	qPCIeRx:            {"nvmlDeviceGetPcieThroughput"},
	qECCAggCorrected:   {"nvmlDeviceGetTotalEccErrors"},
	qECCAggUncorrected: {"nvmlDeviceGetTotalEccErrors"},
	qRemappedPending:   {"nvmlDeviceGetRemappedRows"},
	qRemappedFailure:   {"nvmlDeviceGetRemappedRows"},
	qRetiredSBE:        {"nvmlDeviceGetRetiredPages"},
	qRetiredDBE:        {"nvmlDeviceGetRetiredPages"},
	qNVLinkReplay:      {"nvmlDeviceGetNvLinkErrorCounter"},
	qNVLinkRecovery:    {"nvmlDeviceGetNvLinkErrorCounter"},
	qNVLinkCRCFlit:     {"nvmlDeviceGetNvLinkErrorCounter"},
	qNVLinkCRCData:     {"nvmlDeviceGetNvLinkErrorCounter"},
}

// fallbackFor returns the getter that stands in for field metric sym (or
// for a query metric that a field reads, its own query) when its symbol is
// in the library; else qNone and the absent function ("" when there is no
// getter at all).
func fallbackFor(sym string, own query, has map[string]bool) (query, string) {
	q := own
	if f, ok := fallbackByField[sym]; ok {
		q = f
	}
	if q == qNone {
		return qNone, ""
	}
	for _, fn := range querySymbols[q] {
		if has[fn] {
			return q, ""
		}
	}
	return qNone, querySymbols[q][0]
}

// fieldFallbackError is the error of a field metric GetFieldValues cannot
// give on this driver (fieldErr says why) and no getter stands in for: the
// getter's function is absent (missing), or there is none.
func fieldFallbackError(what string, fieldErr error, missing string) error {
	if missing != "" {
		return &bothAbsentError{what: what, field: fieldErr, sym: missing}
	}
	return &noGetterError{field: fieldErr}
}

// noGetterError: a field this driver or device does not give, and no other
// NVML function reads the metric. It is what the field's error is (an old
// driver's or the device's), saying there is no other way.
type noGetterError struct{ field error }

func (e *noGetterError) Error() string {
	return e.field.Error() + "; no other NVML function reads it"
}
func (e *noGetterError) Unwrap() error { return e.field }

// bothAbsentError: the field is not given and the getter that would stand
// in is absent from this driver: an old driver, whatever the device.
type bothAbsentError struct {
	what  string
	field error
	sym   string
}

func (e *bothAbsentError) Error() string {
	return e.field.Error() + "; its getter " + (&absentError{what: e.what, sym: e.sym}).Error()
}

func (e *bothAbsentError) Unwrap() []error {
	return []error{sampler.ErrNotSupported, sampler.ErrOldDriver}
}

// getterNSError: this driver cannot give the field (field says why) and
// the device answered NOT_SUPPORTED for the getter that stands in for it: a
// newer driver has the field.
type getterNSError struct {
	field  error
	getter string
}

func (e *getterNSError) Error() string {
	return e.field.Error() + "; " + e.getter + ": not supported by the device"
}

func (e *getterNSError) Unwrap() []error {
	return []error{sampler.ErrNotSupported, sampler.ErrOldDriver}
}

// bothNSError: the device answered NOT_SUPPORTED for the field and for the
// getter that stands in for it.
type bothNSError struct {
	field, getter string
}

func (e *bothNSError) Error() string {
	return "field " + e.field + " and " + e.getter + ": not supported by the device"
}
func (e *bothNSError) Unwrap() error { return sampler.ErrNotSupported }

func notSupported(what string) error {
	return &callError{op: what, ret: nvml.ERROR_NOT_SUPPORTED, is: sampler.ErrNotSupported}
}

// absentError is "not supported" because the loaded library is too old:
// a function it lacks (sym) or a field id its NVML version does not define
// (api set). It wraps sampler.ErrNotSupported and sampler.ErrOldDriver and
// says which driver has what is missing.
type absentError struct {
	what string
	sym  string     // the absent function; "" for a field
	api  APIVersion // the loaded NVML version, for a field
}

func (e *absentError) Error() string {
	if e.sym == "" {
		return fmt.Sprintf("%s: not defined in NVML %s (a newer driver has it)", e.what, e.api)
	}
	s := e.what + ": " + e.sym + " is absent from this driver"
	if v, ok := symbolSince[e.sym]; ok {
		if b := branchOf(v); b > 0 {
			s += fmt.Sprintf(" (needs NVML %s, driver R%d or newer)", v, b)
		} else {
			s += fmt.Sprintf(" (needs NVML %s or newer)", v)
		}
	}
	return s
}

func (e *absentError) Unwrap() []error { return []error{sampler.ErrNotSupported, sampler.ErrOldDriver} }

// branchOf returns the driver branch that brought NVML API v (525 for
// 12.0), or 0 when the table does not say.
func branchOf(v APIVersion) int {
	for _, b := range branches {
		if b.api == v {
			return b.branch
		}
	}
	return 0
}

// buildPlans decides, once per driver, how each catalog metric is read.
func buildPlans(cat *catalog.Catalog, api APIVersion, has map[string]bool) []metricPlan {
	plans := make([]metricPlan, cat.Len())
	for _, m := range cat.All() {
		p := &plans[m.ID]
		switch m.Src.Kind {
		case catalog.FromField:
			p.name = "field " + m.Src.Field
			id, scale, ok := FieldID(m.Src.Field, api)
			fb, missing := fallbackFor(m.Src.Field, qNone, has)
			p.fallback, p.noFallback = fb, missing
			var fieldErr error
			switch {
			case !has["nvmlDeviceGetFieldValues"]:
				fieldErr = &absentError{what: p.name, sym: "nvmlDeviceGetFieldValues"}
			case !ok && knownField(m.Src.Field):
				fieldErr = &absentError{what: p.name, api: api}
			case !ok:
				p.kind, p.errNS = planUnsupported, notSupported(p.name+" (unknown to the nvml backend)")
				continue
			default:
				p.kind, p.fieldID, p.scale, p.errNS = planField, id, scale, notSupported(p.name)
				if fb != qNone {
					p.errBothNS = &bothNSError{field: m.Src.Field, getter: querySymbols[fb][0]}
				} else {
					p.errNS = fieldFallbackError(p.name, p.errNS, missing)
				}
				continue
			}
			if fb != qNone {
				// GetFieldValues cannot give it on this driver: the getter
				// reads it from the start.
				p.kind, p.query, p.name = planQuery, fb, querySymbols[fb][0]+" (for "+p.name+")"
				p.errNS = &getterNSError{field: fieldErr, getter: querySymbols[fb][0]}
				continue
			}
			p.kind, p.errNS = planUnsupported, fieldFallbackError(p.name, fieldErr, missing)
			continue
		case catalog.FromQuery:
			p.name = "query " + m.Src.Query
			p.query = queriesByName[m.Src.Query]
			if q, ok := queryByMetric[m.ID]; ok {
				p.query = q
			}
			if sym, ok := fieldForQuery[m.ID]; ok && has["nvmlDeviceGetFieldValues"] {
				if id, scale, ok := FieldID(sym, api); ok {
					p.kind, p.fieldID, p.scale, p.errNS = planField, id, scale, notSupported("field "+sym)
					// The metric's own query stands in when the field is
					// not supported.
					if fb, _ := fallbackFor(sym, p.query, has); fb != qNone {
						p.fallback = fb
						p.errBothNS = &bothNSError{field: sym, getter: querySymbols[fb][0]}
					}
					continue
				}
			}
		case catalog.FromBuffer:
			p.name = "point read " + m.Name
		case catalog.FromGPM:
			p.name = "gpm " + m.Src.GPM
			def, ok := gpmDefs[m.Src.GPM]
			missing := ""
			for _, sym := range gpmSymbols {
				if !has[sym] {
					missing = sym
				}
			}
			switch {
			case !ok:
				p.kind, p.errNS = planUnsupported, notSupported(p.name+" (unknown to the nvml backend)")
			case missing != "":
				p.kind, p.errNS = planUnsupported, &absentError{what: p.name, sym: missing}
			default:
				p.kind, p.gpmID, p.scale, p.errNS = planGPM, def.id, def.scale, notSupported(p.name)
			}
			continue
		}
		if q, ok := queryByMetric[m.ID]; ok {
			p.query = q
		}
		if p.query == qNone {
			p.kind, p.errNS = planUnsupported, notSupported(p.name+" (not implemented by the nvml backend)")
			continue
		}
		p.kind, p.errNS = planUnsupported, &absentError{what: p.name, sym: querySymbols[p.query][0]}
		for _, sym := range querySymbols[p.query] {
			if has[sym] {
				p.kind, p.errNS = planQuery, notSupported(p.name)
				break
			}
		}
	}
	return plans
}
