//go:build cgo

package nvml

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

// gpmDef maps a catalog GPM symbol to NVML's metric id and the scale to the
// catalog's base unit (percent stays; MiB/s becomes B/s).
type gpmDef struct {
	id    nvml.GpmMetricId
	scale float64
}

// gpmDefs lists the GPM metrics the catalog uses. Their ids are stable
// since GPM appeared (NVML 12.0, R525); a driver that does not know one
// answers it with its own NOT_SUPPORTED return code.
var gpmDefs = map[string]gpmDef{
	"GPM_METRIC_GRAPHICS_UTIL":           {nvml.GPM_METRIC_GRAPHICS_UTIL, 1},
	"GPM_METRIC_SM_UTIL":                 {nvml.GPM_METRIC_SM_UTIL, 1},
	"GPM_METRIC_SM_OCCUPANCY":            {nvml.GPM_METRIC_SM_OCCUPANCY, 1},
	"GPM_METRIC_ANY_TENSOR_UTIL":         {nvml.GPM_METRIC_ANY_TENSOR_UTIL, 1},
	"GPM_METRIC_DFMA_TENSOR_UTIL":        {nvml.GPM_METRIC_DFMA_TENSOR_UTIL, 1},
	"GPM_METRIC_HMMA_TENSOR_UTIL":        {nvml.GPM_METRIC_HMMA_TENSOR_UTIL, 1},
	"GPM_METRIC_IMMA_TENSOR_UTIL":        {nvml.GPM_METRIC_IMMA_TENSOR_UTIL, 1},
	"GPM_METRIC_FP64_UTIL":               {nvml.GPM_METRIC_FP64_UTIL, 1},
	"GPM_METRIC_FP32_UTIL":               {nvml.GPM_METRIC_FP32_UTIL, 1},
	"GPM_METRIC_FP16_UTIL":               {nvml.GPM_METRIC_FP16_UTIL, 1},
	"GPM_METRIC_DRAM_BW_UTIL":            {nvml.GPM_METRIC_DRAM_BW_UTIL, 1},
	"GPM_METRIC_PCIE_TX_PER_SEC":         {nvml.GPM_METRIC_PCIE_TX_PER_SEC, 1 << 20},
	"GPM_METRIC_PCIE_RX_PER_SEC":         {nvml.GPM_METRIC_PCIE_RX_PER_SEC, 1 << 20},
	"GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC": {nvml.GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, 1 << 20},
	"GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC": {nvml.GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, 1 << 20},
}

// gpmSymbols are the NVML functions GPM needs; all must be present.
var gpmSymbols = []string{"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree",
	"nvmlGpmSampleGet", "nvmlGpmMetricsGet"}

// GPM support state of a device.
const (
	gpmUnknown int8 = iota
	gpmSupported
	gpmUnsupported
)

// gpmState is a device's GPM snapshots: two samples used alternately, the
// previous one's time, and the request buffer (about 19 KiB, allocated
// once). Owned by the device's loop goroutine.
type gpmState struct {
	state   int8
	samples [2]nvml.GpmSample
	cur     int // samples[cur] receives the next snapshot
	hasPrev bool
	prevAt  time.Time
	req     *nvml.GpmMetricsGetType
	slot    []int // per requested GPM metric: its index in req.Metrics
	errNS   error
}

// readGPM answers the GPM metrics among ids (those with kind planGPM and
// no error yet): one snapshot, then one GpmMetricsGet over the previous
// snapshot and this one. The first snapshot, or one less than
// sampler.MinGPMInterval after the previous, answers ErrNothingNew. It
// returns a device-lost error for the whole Read.
func (d *device) readGPM(ids []catalog.MetricID, out []sampler.Reading) error {
	g := &d.gpm
	want := false
	for i, id := range ids {
		if out[i].Err == nil && d.src.plans[id].kind == planGPM {
			want = true
			break
		}
	}
	if !want {
		return nil
	}
	if g.state == gpmUnknown {
		g.state = gpmUnsupported
		g.errNS = notSupported("gpm (device does not support GPM)")
		start := now()
		gdev := d.dev
		if d.mig {
			gdev = d.migInfo.parent.dev // GPM of an instance is read through its GPU
		}
		sup, ret := gdev.GpmQueryDeviceSupport()
		d.account("GpmQueryDeviceSupport", 1, start)
		switch {
		case sentinel(ret) == sampler.ErrGPULost:
			g.state = gpmUnknown
			return fmt.Errorf("read device %d: %w", d.index, newError("gpm query device support", ret))
		case ret == nvml.ERROR_FUNCTION_NOT_FOUND || ret == nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
			// The library exports the function but its GPM does not
			// answer this request: the driver's doing, not the GPU's.
			g.errNS = &gpmDriverError{ret: ret}
		case ret == nvml.SUCCESS && sup.IsSupportedDevice != 0:
			g.state = gpmSupported
			// Sample buffers are host allocations, not device calls: not
			// counted in CallStats.
			for k := range g.samples {
				s, ret := d.src.lib.GpmSampleAlloc()
				if ret != nvml.SUCCESS {
					g.state = gpmUnsupported
					g.errNS = notSupported("gpm sample alloc: " + returnText(ret))
					break
				}
				g.samples[k] = s
			}
			g.req = &nvml.GpmMetricsGetType{}
		}
	}
	if g.state != gpmSupported {
		for i, id := range ids {
			if out[i].Err == nil && d.src.plans[id].kind == planGPM {
				out[i].Err = g.errNS
				d.unsupported[id] = true
				d.warnUnreadable(id, g.errNS)
			}
		}
		return nil
	}
	at := d.src.opts.Now()
	if g.hasPrev && at.Sub(g.prevAt) < sampler.MinGPMInterval {
		d.setGPMErr(ids, out, errGPMTooSoon)
		return nil
	}
	start := now()
	var ret nvml.Return
	if d.mig {
		ret = d.gpmMigSample(g.samples[g.cur])
	} else {
		ret = d.dev.GpmSampleGet(g.samples[g.cur])
	}
	d.account("GpmSampleGet", 1, start)
	if ret != nvml.SUCCESS {
		err := newError("gpm sample get", ret)
		if sentinel(ret) == sampler.ErrGPULost {
			return fmt.Errorf("read device %d: %w", d.index, err)
		}
		g.hasPrev = false
		d.setGPMErr(ids, out, err)
		return nil
	}
	prev := g.samples[g.cur^1]
	first := !g.hasPrev
	g.hasPrev, g.prevAt, g.cur = true, at, g.cur^1
	if first {
		d.setGPMErr(ids, out, errGPMFirst)
		return nil
	}
	req := g.req
	req.Sample1, req.Sample2 = prev, g.samples[g.cur^1]
	req.NumMetrics = 0
	g.slot = g.slot[:0]
	for i, id := range ids {
		if out[i].Err != nil || d.src.plans[id].kind != planGPM || int(req.NumMetrics) >= len(req.Metrics) {
			g.slot = append(g.slot, -1)
			continue
		}
		req.Metrics[req.NumMetrics] = nvml.GpmMetric{MetricId: uint32(d.src.plans[id].gpmID)}
		g.slot = append(g.slot, int(req.NumMetrics))
		req.NumMetrics++
	}
	start = now()
	ret = d.src.lib.GpmMetricsGet(req)
	d.account("GpmMetricsGet", 1, start)
	for i, id := range ids {
		k := g.slot[i]
		if k < 0 {
			continue
		}
		p := &d.src.plans[id]
		switch {
		case ret != nvml.SUCCESS:
			out[i].Err = newError("gpm metrics get", ret)
		case nvml.Return(req.Metrics[k].NvmlReturn) != nvml.SUCCESS:
			out[i].Err = d.valueError(id, p, nvml.Return(req.Metrics[k].NvmlReturn))
		default:
			out[i].Value = req.Metrics[k].Value * p.scale
			out[i].TimeNS = at.UnixNano()
		}
	}
	return nil
}

var (
	errGPMFirst   = &callError{op: "gpm: first snapshot", ret: nvml.ERROR_NOT_FOUND, is: sampler.ErrNothingNew}
	errGPMTooSoon = &callError{op: "gpm: snapshots less than 100 ms apart", ret: nvml.ERROR_NOT_FOUND, is: sampler.ErrNothingNew}
)

func (d *device) setGPMErr(ids []catalog.MetricID, out []sampler.Reading, err error) {
	for i, id := range ids {
		if out[i].Err == nil && d.src.plans[id].kind == planGPM {
			out[i].Err = err
		}
	}
}

// freeGPM releases the device's GPM samples (at Source.Close).
func (d *device) freeGPM() {
	for k, s := range d.gpm.samples {
		if s != nil {
			s.Free()
			d.gpm.samples[k] = nil
		}
	}
}

// gpmDriverError: nvmlGpmQueryDeviceSupport is exported but answers that
// the function is not there or that it does not know the request's
// version: the driver's GPM is older than the request, whatever the GPU.
type gpmDriverError struct{ ret nvml.Return }

func (e *gpmDriverError) Error() string {
	return "gpm: the driver answers nvmlGpmQueryDeviceSupport with \"" + returnText(e.ret) + "\" (its GPM is older than gpusampler asks for; a newer driver has it)"
}

func (e *gpmDriverError) Unwrap() []error {
	return []error{sampler.ErrNotSupported, sampler.ErrOldDriver}
}
