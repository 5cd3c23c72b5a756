//go:build cgo

package nvml

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// now is the clock for call latencies.
var now = time.Now

// device is one GPU. The engine calls Identity, Drain and Read from the
// device's loop goroutine only, one at a time; CallStats may be called from
// any goroutine.
type device struct {
	src   *Source
	index int
	dev   nvml.Device
	// raw is the device's own nvmlDevice_t for the one-call drain path
	// (see direct); nil when that path is unavailable.
	raw unsafe.Pointer

	calls atomic.Uint64
	// byOp counts calls per NVML function (CallsByFunction), guarded by
	// opMu: the loop and the event watcher both call.
	opMu      sync.Mutex
	byOp      map[string]uint64
	latencyNS atomic.Int64
	xids      atomic.Uint64 // XID events seen by WatchEvents
	events    atomic.Int32  // eventsUnknown, eventsWatching, eventsUnsupported

	// mu guards dev and raw against Reopen (loop goroutine) while
	// WatchEvents (its own goroutine) reads them.
	mu sync.Mutex

	// Owned by the loop goroutine.
	unsupported []bool // by MetricID: the device said not supported
	// byGetter (by MetricID) is set once GetFieldValues answered NOT_SUPPORTED
	// for a field metric that has a dedicated getter: it is read with the
	// getter from then on. nsErr holds a device-specific "not supported"
	// error (the field and its getter both refused); nil means the plan's.
	byGetter []bool
	nsErr    []error
	// bufferNS is set per buffer type the device answered NOT_SUPPORTED.
	bufferNS [catalog.NumBufferTypes]bool
	// pcie is the state of the PCIe byte counters read with
	// GetPcieThroughput (see pcieBytes).
	pcie [2]pcieCounter
	// nvlinks are the links whose error counters answer, found by the
	// first nvlinkErrors (nvlinksFound).
	nvlinks      []int
	nvlinksFound bool
	fv           []nvml.FieldValue
	slot         []int
	// Prebuilt errors per buffer type, so an idle drain allocates nothing.
	errNothingNew [catalog.NumBufferTypes]error
	errBufferNS   [catalog.NumBufferTypes]error
	// One-call drain path: per buffer type, the capacity from the size
	// query (0: not asked yet, -1: the query failed) and a buffer that big.
	capacity [catalog.NumBufferTypes]int
	sbuf     [catalog.NumBufferTypes][]nvml.Sample
	// gpm holds the GPM snapshots (see readGPM).
	gpm gpmState
	// procs is the per-process polling state (see Processes).
	procs procState
	// mig is set for a MIG instance's device, migInfo then places it (see
	// mig.go).
	mig     bool
	migInfo migInfo
	// migMode is the physical GPU's MIG mode as last read (see
	// modeIdentity); "" until read.
	migMode string
}

var (
	_ sampler.CPUAffinityReporter = (*device)(nil)
	_ sampler.DeviceSource        = (*device)(nil)
	_ sampler.CallCounter         = (*device)(nil)
	_ sampler.CallBreakdown       = (*device)(nil)
)

func newDevice(s *Source, index int) *device {
	d := &device{src: s, index: index, unsupported: make([]bool, len(s.plans)), byGetter: make([]bool, len(s.plans)),
		nsErr: make([]error, len(s.plans))}
	for t := catalog.BufferType(0); t < catalog.NumBufferTypes; t++ {
		op := "get samples " + t.String()
		d.errNothingNew[t] = &callError{op: op, ret: nvml.ERROR_NOT_FOUND, is: sampler.ErrNothingNew}
		d.errBufferNS[t] = notSupported(op)
	}
	return d
}

// CallStats returns the NVML C calls this device made and their summed
// latency. GetSamples counts two calls when it returned samples (go-nvml
// asks for the size, then fills), one otherwise.
func (d *device) CallStats() sampler.CallStats {
	return sampler.CallStats{Calls: d.calls.Load(), Latency: time.Duration(d.latencyNS.Load())}
}

func (d *device) account(op string, calls int, start time.Time) {
	dur := now().Sub(start)
	d.calls.Add(uint64(calls))
	d.latencyNS.Add(int64(dur))
	d.opMu.Lock()
	if d.byOp == nil {
		d.byOp = make(map[string]uint64)
	}
	d.byOp[op] += uint64(calls)
	d.opMu.Unlock()
	if h := d.src.opts.CallHook; h != nil {
		h(op, dur)
	}
}

// affinityCPUs is how many CPUs the affinity query covers (go-nvml sizes
// the mask from it).
const affinityCPUs = 4096

// CPUAffinity returns the CPUs close to the GPU (nvmlDeviceGetCpuAffinity:
// the GPU's NUMA node), ascending. It may be called from any goroutine.
func (d *device) CPUAffinity() ([]int, error) {
	d.mu.Lock()
	dev := d.dev
	d.mu.Unlock()
	if dev == nil {
		return nil, d.noHandle()
	}
	if !d.src.has["nvmlDeviceGetCpuAffinity"] {
		// Calling a symbol the library lacks kills the process.
		return nil, fmt.Errorf("get cpu affinity: %w (nvmlDeviceGetCpuAffinity absent from this driver)", sampler.ErrNotSupported)
	}
	start := now()
	mask, r := dev.GetCpuAffinity(affinityCPUs)
	d.account("GetCpuAffinity", 1, start)
	if r != nvml.SUCCESS {
		return nil, newError("get cpu affinity", r)
	}
	return cpusOfMask(mask), nil
}

// cpusOfMask lists the CPUs set in an NVML CPU mask: bit j of word i is
// CPU i × (bits per word) + j.
func cpusOfMask(mask []uint) []int {
	var out []int
	for i, w := range mask {
		for j := 0; j < bits.UintSize; j++ {
			if w&(1<<j) != 0 {
				out = append(out, i*bits.UintSize+j)
			}
		}
	}
	return out
}

// CallsByFunction returns the NVML C calls this device made per function
// ("GetSamples", "GetFieldValues", "GetClockInfo"...; "GetSamples(size)"
// for the size queries of the one-call drain path). It implements
// sampler.CallBreakdown; the counts add up to CallStats().Calls.
func (d *device) CallsByFunction() map[string]uint64 {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	return maps.Clone(d.byOp)
}

// Identity reads the device's identity and temperature thresholds.
func (d *device) Identity() (record.Device, error) {
	id := record.Device{Index: d.index, Backend: "nvml", DriverVersion: d.src.driver, CUDAVersion: d.src.cuda}
	if d.dev == nil {
		return id, d.noHandle()
	}
	has := d.src.has
	if !has["nvmlDeviceGetUUID"] {
		return id, fmt.Errorf("open device %d: %w", d.index, notSupported("get uuid"))
	}
	start := now()
	uuid, ret := d.dev.GetUUID()
	d.account("GetUUID", 1, start)
	if ret != nvml.SUCCESS {
		return id, newError(fmt.Sprintf("open device %d", d.index), ret)
	}
	id.UUID = uuid
	if has["nvmlDeviceGetName"] {
		start = now()
		id.Name, _ = d.dev.GetName()
		d.account("GetName", 1, start)
	}
	if has["nvmlDeviceGetPciInfo_v3"] {
		start = now()
		pci, ret := d.dev.GetPciInfo()
		d.account("GetPciInfo", 1, start)
		if ret == nvml.SUCCESS {
			id.PCIBusID = cString(pci.BusId[:])
		}
	}
	if has["nvmlDeviceGetSerial"] {
		start = now()
		if serial, ret := d.dev.GetSerial(); ret == nvml.SUCCESS {
			id.Serial = serial
		}
		d.account("GetSerial", 1, start)
	}
	if has["nvmlDeviceGetVbiosVersion"] {
		// The board's: a MIG instance reports its parent GPU's.
		h := d.dev
		if d.mig {
			h = d.migInfo.parent.dev
		}
		start = now()
		if v, ret := h.GetVbiosVersion(); ret == nvml.SUCCESS {
			id.VBIOSVersion = v
		}
		d.account("GetVbiosVersion", 1, start)
	}
	if has["nvmlDeviceGetMemoryInfo"] {
		start = now()
		if mem, ret := d.dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			id.MemoryTotalMiB = mem.Total >> 20
		}
		d.account("GetMemoryInfo", 1, start)
	}
	if has["nvmlDeviceGetTemperatureThreshold"] {
		for _, th := range []struct {
			t   nvml.TemperatureThresholds
			dst *float64
		}{
			{nvml.TEMPERATURE_THRESHOLD_SLOWDOWN, &id.SlowdownTempC},
			{nvml.TEMPERATURE_THRESHOLD_SHUTDOWN, &id.ShutdownTempC},
			{nvml.TEMPERATURE_THRESHOLD_GPU_MAX, &id.MaxOperatingTempC},
			{nvml.TEMPERATURE_THRESHOLD_MEM_MAX, &id.MemoryMaxTempC},
		} {
			start = now()
			v, ret := d.dev.GetTemperatureThreshold(th.t)
			d.account("GetTemperatureThreshold", 1, start)
			if ret == nvml.SUCCESS {
				*th.dst = float64(v)
			}
		}
	}
	d.modeIdentity(&id)
	d.migIdentity(&id)
	return id, nil
}

// cString converts a NUL-terminated C char array.
func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

// Drain appends the samples of buffer type t newer than cursor to dst.
// Values are decoded by the type the driver returns and scaled to the
// catalog's base units (power mW → W).
func (d *device) Drain(t catalog.BufferType, cursor uint64, dst []sampler.RawSample) ([]sampler.RawSample, error) {
	if t >= catalog.NumBufferTypes {
		return dst, notSupported("get samples " + t.String())
	}
	if !d.src.has["nvmlDeviceGetSamples"] || d.mig {
		d.bufferNS[t] = true
		d.src.warnBuffer(t, d.index)
		return dst, d.errBufferNS[t]
	}
	if d.dev == nil {
		return dst, d.noHandle()
	}
	var vt nvml.ValueType
	var samples []nvml.Sample
	var ret nvml.Return
	if d.BufferCapacity(t) > 0 {
		start := now()
		vt, samples, ret = d.src.direct.fill(d.raw, int(t), cursor, d.sbuf[t])
		d.account("GetSamples", 1, start)
		if ret == nvml.ERROR_INSUFFICIENT_SIZE {
			d.capacity[t] = 0 // the buffer grew: ask its size again next time
		}
	} else {
		start := now()
		vt, samples, ret = d.dev.GetSamples(nvml.SamplingType(t), cursor)
		calls := 2
		if len(samples) == 0 {
			calls = 1 // the size query failed or said zero: no fill call
		}
		d.account("GetSamples", calls, start)
	}
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_NOT_FOUND, nvml.ERROR_NO_DATA:
		return dst, d.errNothingNew[t]
	case nvml.ERROR_NOT_SUPPORTED:
		d.bufferNS[t] = true
		d.src.warnBuffer(t, d.index)
		return dst, d.errBufferNS[t]
	case nvml.ERROR_INVALID_ARGUMENT:
		if t < catalog.BufferJPEGUtil {
			return dst, newError("get samples "+t.String(), ret)
		}
		// The JPEG and optical-flow sample types are newer than the other
		// buffers: a driver that does not know the type says "invalid
		// argument". Not the device's doing: a newer driver has it.
		d.bufferNS[t] = true
		d.src.warnBuffer(t, d.index)
		return dst, &absentError{what: "get samples " + t.String(), api: d.src.version.API}
	default:
		return dst, newError("get samples "+t.String(), ret)
	}
	scale := 1.0
	if t == catalog.BufferTotalPower || t == catalog.BufferModulePower {
		scale = 1e-3 // mW → W
	}
	before := len(dst)
	for i := range samples {
		s := &samples[i]
		if s.TimeStamp <= cursor {
			continue
		}
		v, ok := decodeValue(vt, s.SampleValue)
		if !ok {
			return dst[:before], fmt.Errorf("get samples %s: unknown value type %d", t, vt)
		}
		dst = append(dst, sampler.RawSample{TimeUS: s.TimeStamp, Value: applyScale(v, scale)})
	}
	if len(dst) == before {
		return dst, d.errNothingNew[t]
	}
	return dst, nil
}

// BufferCapacity returns how many samples buffer type t holds, from NVML's
// size query (one C call per type, once), or 0 when unknown: the one-call
// drain path is unavailable (see direct) or the query failed. It
// implements sampler.BufferCapacitor; call it from the device's loop.
func (d *device) BufferCapacity(t catalog.BufferType) int {
	if t >= catalog.NumBufferTypes || d.raw == nil || d.src.direct == nil {
		return 0
	}
	if d.capacity[t] == 0 {
		start := now()
		n, ret := d.src.direct.capacity(d.raw, int(t))
		d.account("GetSamples(size)", 1, start)
		if ret != nvml.SUCCESS || n <= 0 {
			d.capacity[t] = -1
			return 0
		}
		d.capacity[t] = n
		if cap(d.sbuf[t]) < n {
			d.sbuf[t] = make([]nvml.Sample, n)
		}
		d.sbuf[t] = d.sbuf[t][:n]
	}
	return max(d.capacity[t], 0)
}

// applyScale converts v to the catalog's unit. Scales below 1 divide, so
// 123100 mW is exactly 123.1 W (123100 × 0.001 is not).
func applyScale(v, scale float64) float64 {
	if scale < 1 {
		return v / math.Round(1/scale)
	}
	return v * scale
}

// decodeValue decodes an nvmlValue_t union by its type. Only the bytes of
// the type are read: an unsigned int is the low 4 bytes, whatever the rest
// holds.
func decodeValue(vt nvml.ValueType, b [8]byte) (float64, bool) {
	ne := binary.NativeEndian
	switch vt {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(ne.Uint64(b[:])), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(ne.Uint32(b[:4])), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(ne.Uint64(b[:])), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(ne.Uint64(b[:]))), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(ne.Uint32(b[:4]))), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(ne.Uint16(b[:2])), true
	}
	return 0, false
}

// Read reads ids into out: every field metric (and slow state that a field
// also gives) in one GetFieldValues call, each value with its own return
// code; the rest with point queries, one call per query however many metrics
// it serves. The returned error is for the device (lost); per-value errors
// are in out[i].Err.
func (d *device) Read(ids []catalog.MetricID, out []sampler.Reading) error {
	if d.dev == nil {
		return d.noHandle()
	}
	if cap(d.slot) < len(ids) {
		d.slot = make([]int, len(ids))
	}
	slot := d.slot[:len(ids)]
	d.fv = d.fv[:0]
	for i, id := range ids {
		out[i] = sampler.Reading{}
		slot[i] = -1
		if int(id) >= len(d.src.plans) || id == 0 {
			out[i].Err = notSupported(fmt.Sprintf("read metric %d", id))
			continue
		}
		p := &d.src.plans[id]
		if d.unsupported[id] || p.kind == planUnsupported {
			out[i].Err = p.errNS
			if e := d.nsErr[id]; e != nil {
				out[i].Err = e
			}
			d.warnUnreadable(id, out[i].Err)
			continue
		}
		if p.kind != planField || d.byGetter[id] {
			continue
		}
		k := -1
		for j := range d.fv {
			if d.fv[j].FieldId == p.fieldID {
				k = j
				break
			}
		}
		if k < 0 {
			d.fv = append(d.fv, nvml.FieldValue{FieldId: p.fieldID})
			k = len(d.fv) - 1
		}
		slot[i] = k
	}
	var batchErr error
	batchRet := nvml.SUCCESS
	if len(d.fv) > 0 {
		start := now()
		ret := d.dev.GetFieldValues(d.fv)
		d.account("GetFieldValues", 1, start)
		if ret != nvml.SUCCESS {
			batchRet = ret
			batchErr = newError("get field values", ret)
			if sentinel(ret) == sampler.ErrGPULost {
				return fmt.Errorf("read device %d: %w", d.index, batchErr)
			}
		}
	}
	var q queryState
	var lost error
	for i, id := range ids {
		if out[i].Err != nil {
			continue
		}
		p := &d.src.plans[id]
		switch p.kind {
		case planField:
			if !d.byGetter[id] {
				r := batchRet
				if batchErr == nil {
					r = nvml.Return(d.fv[slot[i]].NvmlReturn)
				}
				if r != nvml.SUCCESS && isNotSupported(r) && p.fallback != qNone {
					// GetFieldValues does not give it here: its getter
					// does, from now on.
					d.byGetter[id] = true
					d.src.log.Debug("field not supported; read with its getter", "device", d.index,
						"metric", catalog.Default().Name(id), "field", p.name, "getter", querySymbols[p.fallback][0])
				}
			}
			if d.byGetter[id] {
				v, r := d.query(&q, p.fallback)
				if r != nvml.SUCCESS {
					if isNotSupported(r) {
						d.unsupported[id] = true
						d.nsErr[id] = p.errBothNS
						out[i].Err = p.errBothNS
						d.warnUnreadable(id, out[i].Err)
						continue
					}
					out[i].Err = newError(querySymbols[p.fallback][0]+" (for "+p.name+")", r)
					if sentinel(r) == sampler.ErrGPULost && lost == nil {
						lost = fmt.Errorf("read device %d: %w", d.index, out[i].Err)
					}
					continue
				}
				out[i].Value = v
				continue
			}
			if batchErr != nil {
				out[i].Err = d.valueError(id, p, batchRet)
				continue
			}
			fv := &d.fv[slot[i]]
			if r := nvml.Return(fv.NvmlReturn); r != nvml.SUCCESS {
				out[i].Err = d.valueError(id, p, r)
				continue
			}
			v, ok := decodeValue(nvml.ValueType(fv.ValueType), fv.Value)
			if !ok {
				out[i].Err = fmt.Errorf("%s: unknown value type %d", p.name, fv.ValueType)
				continue
			}
			out[i].Value = applyScale(v, p.scale)
			if fv.Timestamp > 0 {
				out[i].TimeNS = fv.Timestamp * 1000
			}
		case planQuery:
			v, r := d.query(&q, p.query)
			if r != nvml.SUCCESS {
				out[i].Err = d.valueError(id, p, r)
				if sentinel(r) == sampler.ErrGPULost && lost == nil {
					lost = fmt.Errorf("read device %d: %w", d.index, out[i].Err)
				}
				continue
			}
			out[i].Value = v
		}
	}
	if err := d.readGPM(ids, out); err != nil && lost == nil {
		lost = err
	}
	return lost
}

// valueError returns the error for one value; "not supported" is cached so
// the device is not asked again.
func (d *device) valueError(id catalog.MetricID, p *metricPlan, r nvml.Return) error {
	if isNotSupported(r) {
		d.unsupported[id] = true
		d.warnUnreadable(id, p.errNS)
		return p.errNS
	}
	return newError(p.name, r)
}

// warnUnreadable names a metric this device cannot give (see
// Source.warnUnreadable). A buffer metric's point read counts only when the
// buffer is not supported either: otherwise the buffer serves the metric.
func (d *device) warnUnreadable(id catalog.MetricID, err error) {
	if m, ok := catalog.Default().Get(id); ok && m.Src.Kind == catalog.FromBuffer && !d.bufferNS[m.Src.Buffer] {
		return
	}
	d.src.warnUnreadable(id, d.index, err)
}

func isNotSupported(r nvml.Return) bool {
	return r == nvml.ERROR_NOT_SUPPORTED || r == nvml.ERROR_FUNCTION_NOT_FOUND
}

// queryState holds the results of calls that serve several metrics within
// one Read, so each is made once.
type queryState struct {
	memDone, remapDone, utilDone bool
	mem                          nvml.Memory_v2
	memRet                       nvml.Return
	remapCor, remapUnc           int
	remapRet                     nvml.Return
	util                         nvml.Utilization
	utilRet                      nvml.Return
	encDone, fbcDone             bool
	enc                          nvml.FBCStats // GetEncoderStats' three values
	encRet                       nvml.Return
	fbc                          nvml.FBCStats
	fbcRet                       nvml.Return
	remapPending, remapFailure   bool
	violDone                     [6]bool // by nvmlPerfPolicyType_t
	viol                         [6]nvml.ViolationTime
	violRet                      [6]nvml.Return
}

const mib = 1 << 20

// enableValue is an nvmlEnableState_t as the catalog's two-state value (1
// enabled, 0 disabled); any other state is "no data".
func enableValue(v nvml.EnableState, r nvml.Return) (float64, nvml.Return) {
	if r != nvml.SUCCESS {
		return 0, r
	}
	switch v {
	case nvml.FEATURE_ENABLED:
		return 1, r
	case nvml.FEATURE_DISABLED:
		return 0, r
	}
	return 0, nvml.ERROR_NO_DATA
}

// statsValue is one of a session statistics triple: 0 sessions, 1 average
// fps, 2 average latency (µs).
func statsValue(s nvml.FBCStats, i query) float64 {
	switch i {
	case 0:
		return float64(s.SessionsCount)
	case 1:
		return float64(s.AverageFPS)
	}
	return float64(s.AverageLatency)
}

// query performs point query k (or reuses its result within this Read).
func (d *device) query(q *queryState, k query) (float64, nvml.Return) {
	has := d.src.has
	dev := d.dev
	start := now()
	switch k {
	case qPowerLimit:
		v, r := dev.GetEnforcedPowerLimit()
		d.account("GetEnforcedPowerLimit", 1, start)
		return applyScale(float64(v), 1e-3), r
	case qPowerUsage:
		v, r := dev.GetPowerUsage()
		d.account("GetPowerUsage", 1, start)
		return applyScale(float64(v), 1e-3), r
	case qClockGraphics, qClockVideo, qClockSM, qClockMemory:
		ct := map[query]nvml.ClockType{qClockGraphics: nvml.CLOCK_GRAPHICS, qClockVideo: nvml.CLOCK_VIDEO,
			qClockSM: nvml.CLOCK_SM, qClockMemory: nvml.CLOCK_MEM}[k]
		v, r := dev.GetClockInfo(ct)
		d.account("GetClockInfo", 1, start)
		return float64(v), r
	case qEventReasons:
		var v uint64
		var r nvml.Return
		if has["nvmlDeviceGetCurrentClocksEventReasons"] {
			v, r = dev.GetCurrentClocksEventReasons()
			d.account("GetCurrentClocksEventReasons", 1, start)
		} else {
			v, r = dev.GetCurrentClocksThrottleReasons()
			d.account("GetCurrentClocksThrottleReasons", 1, start)
		}
		return float64(v), r
	case qPState:
		v, r := dev.GetPerformanceState()
		d.account("GetPerformanceState", 1, start)
		if r == nvml.SUCCESS && v == nvml.PSTATE_UNKNOWN {
			r = nvml.ERROR_NO_DATA
		}
		return float64(v), r
	case qMemUsed, qMemFree, qMemTotal, qMemReserved:
		if !q.memDone {
			q.memDone = true
			if has["nvmlDeviceGetMemoryInfo_v2"] {
				q.mem, q.memRet = dev.GetMemoryInfo_v2()
				d.account("GetMemoryInfo_v2", 1, start)
			} else {
				m, r := dev.GetMemoryInfo()
				d.account("GetMemoryInfo", 1, start)
				q.mem, q.memRet = nvml.Memory_v2{Total: m.Total, Free: m.Free, Used: m.Used}, r
			}
		}
		if q.memRet != nvml.SUCCESS {
			return 0, q.memRet
		}
		switch k {
		case qMemUsed:
			return float64(q.mem.Used) / mib, nvml.SUCCESS
		case qMemFree:
			return float64(q.mem.Free) / mib, nvml.SUCCESS
		case qMemTotal:
			return float64(q.mem.Total) / mib, nvml.SUCCESS
		}
		return float64(q.mem.Reserved) / mib, nvml.SUCCESS
	case qTempGPU:
		if has["nvmlDeviceGetTemperatureV"] {
			t, r := dev.GetTemperatureV().V1()
			d.account("GetTemperatureV", 1, start)
			return float64(t.Temperature), r
		}
		v, r := dev.GetTemperature(nvml.TEMPERATURE_GPU)
		d.account("GetTemperature", 1, start)
		return float64(v), r
	case qFan:
		v, r := dev.GetFanSpeed()
		d.account("GetFanSpeed", 1, start)
		return float64(v), r
	case qPCIeGen:
		v, r := dev.GetCurrPcieLinkGeneration()
		d.account("GetCurrPcieLinkGeneration", 1, start)
		return float64(v), r
	case qPCIeWidth:
		v, r := dev.GetCurrPcieLinkWidth()
		d.account("GetCurrPcieLinkWidth", 1, start)
		return float64(v), r
	case qPCIeReplay:
		v, r := dev.GetPcieReplayCounter()
		d.account("GetPcieReplayCounter", 1, start)
		return float64(v), r
	case qECCCorrected, qECCUncorrected:
		typ := nvml.MEMORY_ERROR_TYPE_CORRECTED
		if k == qECCUncorrected {
			typ = nvml.MEMORY_ERROR_TYPE_UNCORRECTED
		}
		v, r := dev.GetTotalEccErrors(typ, nvml.VOLATILE_ECC)
		d.account("GetTotalEccErrors", 1, start)
		return float64(v), r
	case qRemappedCor, qRemappedUnc, qRemappedPending, qRemappedFailure:
		if !q.remapDone {
			q.remapDone = true
			q.remapCor, q.remapUnc, q.remapPending, q.remapFailure, q.remapRet = dev.GetRemappedRows()
			d.account("GetRemappedRows", 1, start)
		}
		switch k {
		case qRemappedCor:
			return float64(q.remapCor), q.remapRet
		case qRemappedUnc:
			return float64(q.remapUnc), q.remapRet
		case qRemappedPending:
			return boolValue(q.remapPending), q.remapRet
		}
		return boolValue(q.remapFailure), q.remapRet
	case qEnergy:
		v, r := dev.GetTotalEnergyConsumption()
		d.account("GetTotalEnergyConsumption", 1, start)
		return float64(v), r // mJ
	case qTempMemory:
		ts, r := dev.GetThermalSettings(uint32(nvml.THERMAL_TARGET_ALL))
		d.account("GetThermalSettings", 1, start)
		if r != nvml.SUCCESS {
			return 0, r
		}
		for _, s := range ts.Sensor[:min(int(ts.Count), len(ts.Sensor))] {
			if nvml.ThermalTarget(s.Target) == nvml.THERMAL_TARGET_MEMORY {
				return float64(s.CurrentTemp), nvml.SUCCESS
			}
		}
		return 0, nvml.ERROR_NOT_SUPPORTED // no memory sensor on this board
	case qViolPower, qViolThermal, qViolSyncBoost, qViolBoardLimit, qViolLowUtil, qViolReliability:
		// nvmlPerfPolicyType_t 0-5 are the perf-policy fields 74-79; the
		// power-cap and sync-boost throttle times share policies 0 and 2.
		pol := k - qViolPower
		if !q.violDone[pol] {
			q.violDone[pol] = true
			q.viol[pol], q.violRet[pol] = dev.GetViolationStatus(nvml.PerfPolicyType(pol))
			d.account("GetViolationStatus", 1, start)
		}
		return float64(q.viol[pol].ViolationTime), q.violRet[pol] // ns
	case qPCIeTx, qPCIeRx:
		return d.pcieBytes(int(k-qPCIeTx), start)
	case qECCAggCorrected, qECCAggUncorrected:
		typ := nvml.MEMORY_ERROR_TYPE_CORRECTED
		if k == qECCAggUncorrected {
			typ = nvml.MEMORY_ERROR_TYPE_UNCORRECTED
		}
		v, r := dev.GetTotalEccErrors(typ, nvml.AGGREGATE_ECC)
		d.account("GetTotalEccErrors", 1, start)
		return float64(v), r
	case qRetiredSBE, qRetiredDBE:
		// The number of pages retired for the cause, as fields 29/30
		// give it: go-nvml grows the list until it fits (a retry per
		// INSUFFICIENT_SIZE, counted here as one call).
		cause := nvml.PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
		if k == qRetiredDBE {
			cause = nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
		}
		pages, r := dev.GetRetiredPages(cause)
		d.account("GetRetiredPages", 1, start)
		return float64(len(pages)), r
	case qNVLinkReplay, qNVLinkRecovery, qNVLinkCRCFlit, qNVLinkCRCData:
		return d.nvlinkErrors(nvml.NvLinkErrorCounter(k-qNVLinkReplay), start)
	case qXIDCount: // counted by WatchEvents: no C call
		switch d.events.Load() {
		case eventsWatching:
			return float64(d.xids.Load()), nvml.SUCCESS
		case eventsUnsupported:
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return 0, nvml.ERROR_NO_DATA
	case qUtilEncoder, qUtilDecoder, qUtilJPEG, qUtilOFA:
		var v uint32
		var r nvml.Return
		switch k {
		case qUtilEncoder:
			v, _, r = dev.GetEncoderUtilization()
			d.account("GetEncoderUtilization", 1, start)
		case qUtilDecoder:
			v, _, r = dev.GetDecoderUtilization()
			d.account("GetDecoderUtilization", 1, start)
		case qUtilJPEG:
			v, _, r = dev.GetJpgUtilization()
			d.account("GetJpgUtilization", 1, start)
		default:
			v, _, r = dev.GetOfaUtilization()
			d.account("GetOfaUtilization", 1, start)
		}
		return float64(v), r
	case qDisplayMode, qDisplayActive, qRetiredPending:
		var v nvml.EnableState
		var r nvml.Return
		switch k {
		case qDisplayMode:
			v, r = dev.GetDisplayMode()
			d.account("GetDisplayMode", 1, start)
		case qDisplayActive:
			v, r = dev.GetDisplayActive()
			d.account("GetDisplayActive", 1, start)
		default:
			v, r = dev.GetRetiredPagesPendingStatus()
			d.account("GetRetiredPagesPendingStatus", 1, start)
		}
		return enableValue(v, r)
	case qEncSessions, qEncFPS, qEncLatency:
		if !q.encDone {
			q.encDone = true
			var n int
			n, q.enc.AverageFPS, q.enc.AverageLatency, q.encRet = dev.GetEncoderStats()
			q.enc.SessionsCount = uint32(n)
			d.account("GetEncoderStats", 1, start)
		}
		return statsValue(q.enc, k-qEncSessions), q.encRet
	case qFBCSessions, qFBCFPS, qFBCLatency:
		if !q.fbcDone {
			q.fbcDone = true
			q.fbc, q.fbcRet = dev.GetFBCStats()
			d.account("GetFBCStats", 1, start)
		}
		return statsValue(q.fbc, k-qFBCSessions), q.fbcRet
	case qUtilGPU, qUtilMemory:
		if !q.utilDone {
			q.utilDone = true
			q.util, q.utilRet = dev.GetUtilizationRates()
			d.account("GetUtilizationRates", 1, start)
		}
		if k == qUtilGPU {
			return float64(q.util.Gpu), q.utilRet
		}
		return float64(q.util.Memory), q.utilRet
	}
	return 0, nvml.ERROR_NOT_SUPPORTED
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// pcieThroughputEvery is how often the PCIe byte counters are read with
// nvmlDeviceGetPcieThroughput where GetFieldValues lacks them: the call
// measures for 20 ms before it returns, so it is made at most this often
// per direction, never at the field rate; reads in between answer "nothing
// new".
const pcieThroughputEvery = 10 * time.Second

// pcieCounter integrates one direction's sampled PCIe throughput into a
// byte counter: each read adds the mean of this throughput and the last
// one over the time between them. It starts at 0 when first read; it is
// an estimate from 20 ms samples, not the driver's count.
type pcieCounter struct {
	started bool
	at      time.Time
	rateBps float64 // bytes per second at the last read
	bytes   float64
}

// nvlinkErrors sums NVLink error counter c over the device's links, as the
// driver's total fields do; the call was started at start. The first call
// asks every link NVLink can have and keeps those that answer; a link that
// does not exist answers INVALID_ARGUMENT or NOT_SUPPORTED. No link
// answering is NOT_SUPPORTED; any other error is the reading's.
func (d *device) nvlinkErrors(c nvml.NvLinkErrorCounter, start time.Time) (float64, nvml.Return) {
	links := d.nvlinks
	if !d.nvlinksFound {
		links = make([]int, nvml.NVLINK_MAX_LINKS)
		for i := range links {
			links[i] = i
		}
	}
	var sum uint64
	var found []int
	calls := 0
	for _, l := range links {
		v, r := d.dev.GetNvLinkErrorCounter(l, c)
		calls++
		switch {
		case r == nvml.SUCCESS:
			sum += v
			found = append(found, l)
		case isNotSupported(r) || r == nvml.ERROR_INVALID_ARGUMENT:
		default:
			d.account("GetNvLinkErrorCounter", calls, start)
			return 0, r
		}
	}
	d.account("GetNvLinkErrorCounter", calls, start)
	if !d.nvlinksFound && len(found) > 0 {
		d.nvlinks, d.nvlinksFound = found, true
	}
	if len(found) == 0 {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return float64(sum), nvml.SUCCESS
}

// pcieBytes reads the estimated PCIe byte counter of direction dir (0 TX,
// 1 RX); the call was started at start.
func (d *device) pcieBytes(dir int, start time.Time) (float64, nvml.Return) {
	c := &d.pcie[dir]
	at := d.src.opts.Now()
	if c.started && at.Sub(c.at) < pcieThroughputEvery {
		return 0, nvml.ERROR_NOT_FOUND // nothing new
	}
	kbps, r := d.dev.GetPcieThroughput(nvml.PcieUtilCounter(dir))
	d.account("GetPcieThroughput", 1, start)
	if r != nvml.SUCCESS {
		return 0, r
	}
	rate := float64(kbps) * 1024 // KB/s (KiB) → B/s
	if c.started {
		c.bytes += (c.rateBps + rate) / 2 * at.Sub(c.at).Seconds()
	}
	c.started, c.at, c.rateBps = true, at, rate
	return math.Round(c.bytes), nvml.SUCCESS
}
