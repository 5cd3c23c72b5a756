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

// modeIdentity reads persistence mode, current ECC mode and MIG mode into
// id, each only when the library has its symbol. A MIG instance reports
// its parent GPU's persistence and ECC modes (they are the GPU's settings)
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
