//go:build cgo

package nvml

import (
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// MIG: a GPU in MIG mode is split into instances, each with its own UUID
// ("MIG-..."), memory and compute. The backend samples each instance as a
// device of its own, after the physical GPUs (which keep giving power,
// temperature, clocks and the rest), with identity fields naming its
// parent and partition. Under MIG the driver keeps no utilization sample
// buffers and no per-process utilization: those answer
// sampler.ErrNotSupported with a message that says so. Memory is read on
// the instance's handle; GPM through nvmlGpmMigSampleGet on the parent.

// migSymbols are needed to enumerate MIG instances at all.
var migSymbols = []string{"nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
	"nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId"}

// migInfo is a MIG instance's place on its parent GPU.
type migInfo struct {
	parent    *device
	gi, ci    int
	parentIdx int
}

// notUnderMIG is the error for what a MIG instance cannot give.
func notUnderMIG(what string) error {
	return &callError{op: what + " (utilization buffers and per-process utilization are not available under MIG)",
		ret: nvml.ERROR_NOT_SUPPORTED, is: sampler.ErrNotSupported}
}

// migDevices returns a device per MIG instance of parent when MIG mode is
// enabled on it, numbered from next. A GPU without MIG, a driver without
// the symbols, or any failure (logged) yields none.
func (s *Source) migDevices(parent *device, next int) []*device {
	for _, sym := range migSymbols {
		if !s.has[sym] {
			return nil
		}
	}
	start := now()
	cur, _, ret := parent.dev.GetMigMode()
	parent.account("GetMigMode", 1, start)
	parent.migMode = modeOf(cur == nvml.DEVICE_MIG_ENABLE, ret)
	if ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_ENABLE {
		return nil // NOT_SUPPORTED on GPUs without MIG
	}
	start = now()
	n, ret := parent.dev.GetMaxMigDeviceCount()
	parent.account("GetMaxMigDeviceCount", 1, start)
	if ret != nvml.SUCCESS {
		s.log.Warn("MIG enabled but the instance count is unreadable", "gpu", parent.index, "err", newError("get max mig device count", ret))
		return nil
	}
	var out []*device
	for j := 0; j < n; j++ {
		start = now()
		h, ret := parent.dev.GetMigDeviceHandleByIndex(j)
		parent.account("GetMigDeviceHandleByIndex", 1, start)
		if ret != nvml.SUCCESS {
			continue // NOT_FOUND: no instance in this slot
		}
		d := newDevice(s, next+len(out))
		d.dev, d.mig = h, true
		d.migInfo = migInfo{parent: parent, parentIdx: parent.index, gi: -1, ci: -1}
		start = now()
		if gi, ret := h.GetGpuInstanceId(); ret == nvml.SUCCESS {
			d.migInfo.gi = gi
		}
		if ci, ret := h.GetComputeInstanceId(); ret == nvml.SUCCESS {
			d.migInfo.ci = ci
		}
		d.account("GetGpuInstanceId", 2, start)
		for t := range d.errBufferNS {
			d.errBufferNS[t] = notUnderMIG("get samples " + catalog.BufferType(t).String())
		}
		out = append(out, d)
	}
	if len(out) > 0 {
		s.log.Info("MIG instances sampled as devices", "gpu", parent.index, "instances", len(out))
	}
	return out
}

// migIdentity fills a MIG instance's identity fields. The profile name is
// the device name's MIG suffix ("NVIDIA H200 MIG 1g.18gb" → "1g.18gb"),
// which needs no GPU-instance handle.
func (d *device) migIdentity(id *record.Device) {
	if !d.mig {
		return
	}
	id.MIG, id.Parent = true, d.migInfo.parentIdx
	id.GPUInstanceID, id.ComputeInstanceID = d.migInfo.gi, d.migInfo.ci
	id.MIGProfile = migProfile(id.Name)
}

// migProfile extracts the profile from a MIG device name.
func migProfile(name string) string {
	if i := strings.LastIndex(name, "MIG "); i >= 0 {
		return strings.TrimSpace(name[i+len("MIG "):])
	}
	return ""
}

// gpmMigSample takes a GPM sample of a MIG instance through its parent.
func (d *device) gpmMigSample(s nvml.GpmSample) nvml.Return {
	if !d.src.has["nvmlGpmMigSampleGet"] {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return d.migInfo.parent.dev.GpmMigSampleGet(d.migInfo.gi, s)
}
