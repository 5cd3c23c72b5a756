//go:build cgo

package nvml

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/record"
)

// modeOf maps a mode read to Device.PersistenceMode's values: NOT_SUPPORTED
// is record.ModeUnsupported, any other failure unknown ("").
func modeOf(enabled bool, ret nvml.Return) string {
	switch ret {
	case nvml.SUCCESS:
		if enabled {
			return record.ModeEnabled
		}
		return record.ModeDisabled
	case nvml.ERROR_NOT_SUPPORTED:
		return record.ModeUnsupported
	}
	return ""
}

// archNames and computeModeNames spell NVML's architectures and compute
// modes as nvidia-smi -q -x does (product_architecture, compute_mode); a
// value missing here (newer than this table) is left unknown.
var (
	archNames = map[nvml.DeviceArchitecture]string{
		nvml.DEVICE_ARCH_KEPLER: "Kepler", nvml.DEVICE_ARCH_MAXWELL: "Maxwell", nvml.DEVICE_ARCH_PASCAL: "Pascal",
		nvml.DEVICE_ARCH_VOLTA: "Volta", nvml.DEVICE_ARCH_TURING: "Turing", nvml.DEVICE_ARCH_AMPERE: "Ampere",
		nvml.DEVICE_ARCH_ADA: "Ada Lovelace", nvml.DEVICE_ARCH_HOPPER: "Hopper", nvml.DEVICE_ARCH_BLACKWELL: "Blackwell",
	}
	computeModeNames = map[nvml.ComputeMode]string{
		nvml.COMPUTEMODE_DEFAULT: "Default", nvml.COMPUTEMODE_EXCLUSIVE_THREAD: "Exclusive_Thread",
		nvml.COMPUTEMODE_PROHIBITED: "Prohibited", nvml.COMPUTEMODE_EXCLUSIVE_PROCESS: "Exclusive_Process",
	}
)

// modeIdentity reads persistence mode, current ECC mode, architecture,
// compute mode and MIG mode into id, each only when the library has its
// symbol. A MIG instance reports its parent GPU's persistence and ECC
// modes, architecture and compute mode (they are the GPU's settings)
// and no MIG mode. The MIG mode read while enumerating MIG instances is
// reused.
func (d *device) modeIdentity(id *record.Device) {
	has := d.src.has
	h := d.dev
	if d.mig {
		h = d.migInfo.parent.dev
	}
	if has["nvmlDeviceGetPersistenceMode"] {
		start := now()
		m, ret := h.GetPersistenceMode()
		d.account("GetPersistenceMode", 1, start)
		id.PersistenceMode = modeOf(m == nvml.FEATURE_ENABLED, ret)
	}
	if has["nvmlDeviceGetEccMode"] {
		start := now()
		cur, _, ret := h.GetEccMode()
		d.account("GetEccMode", 1, start)
		id.ECCMode = modeOf(cur == nvml.FEATURE_ENABLED, ret)
	}
	if has["nvmlDeviceGetArchitecture"] {
		start := now()
		a, ret := h.GetArchitecture()
		d.account("GetArchitecture", 1, start)
		if ret == nvml.SUCCESS {
			id.Architecture = archNames[a]
		}
	}
	if has["nvmlDeviceGetComputeMode"] {
		start := now()
		m, ret := h.GetComputeMode()
		d.account("GetComputeMode", 1, start)
		if ret == nvml.SUCCESS {
			id.ComputeMode = computeModeNames[m]
		}
	}
	if d.mig {
		return
	}
	if d.migMode == "" && has["nvmlDeviceGetMigMode"] {
		start := now()
		cur, _, ret := h.GetMigMode()
		d.account("GetMigMode", 1, start)
		d.migMode = modeOf(cur == nvml.DEVICE_MIG_ENABLE, ret)
	}
	id.MIGMode = d.migMode
}
