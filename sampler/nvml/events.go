//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/sampler"
)

// eventMask is what the backend registers for, where the device supports
// it: XID critical errors, ECC errors, power-source and clock changes.
// P-state changes are left out (noisy; the pstate metric carries them).
const eventMask = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError |
	nvml.EventTypePowerSourceChange | nvml.EventTypeClock

// eventWaitMS bounds one nvmlEventSetWait so that WatchEvents notices its
// context ending.
const eventWaitMS = 500

// xidHints are short meanings of common XIDs (NVIDIA's XID catalog).
var xidHints = map[uint64]string{
	13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
	45: "preemptive cleanup", 48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
	62: "internal micro-controller halt", 63: "ECC page retirement or row remapping", 64: "ECC page retirement or row remapping failure",
	74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
	94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
}

// States of a device's XID watch, for the xid_errors metric.
const (
	eventsUnknown     = iota // not registered yet: the count is not known
	eventsWatching           // XIDs are being counted
	eventsUnsupported        // the driver cannot deliver XID events here
)

// WatchEvents creates an event set for this device alone and waits on it
// until ctx ends, emitting XID, ECC, power-source and clock events. It
// implements sampler.EventWatcher and runs on its own goroutine: a wait
// never delays the device's sampling. Symbols are looked up first; a
// driver without them answers sampler.ErrNotSupported.
func (d *device) WatchEvents(ctx context.Context, emit func(sampler.Event)) error {
	if d.mig {
		return fmt.Errorf("watch events: %w", notSupported("MIG instance: its GPU's events cover it"))
	}
	has := d.src.has
	for _, sym := range []string{"nvmlEventSetCreate", "nvmlEventSetFree", "nvmlDeviceRegisterEvents", "nvmlDeviceGetSupportedEventTypes"} {
		if !has[sym] {
			return fmt.Errorf("watch events: %w", notSupported(sym+" absent"))
		}
	}
	if !has["nvmlEventSetWait_v2"] && !has["nvmlEventSetWait"] {
		return fmt.Errorf("watch events: %w", notSupported("nvmlEventSetWait absent"))
	}
	d.mu.Lock()
	dev := d.dev
	d.mu.Unlock()
	if dev == nil {
		return fmt.Errorf("watch events: %w", d.noHandle())
	}
	start := now()
	supported, ret := dev.GetSupportedEventTypes()
	d.account("GetSupportedEventTypes", 1, start)
	if ret != nvml.SUCCESS {
		err := newError("get supported event types", ret)
		if errors.Is(err, sampler.ErrNotSupported) {
			d.events.Store(eventsUnsupported)
		}
		return fmt.Errorf("watch events: %w", err)
	}
	mask := supported & eventMask
	if mask == 0 {
		d.events.Store(eventsUnsupported)
		return fmt.Errorf("watch events: %w", notSupported("no event type of interest"))
	}
	set, ret := d.src.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("watch events: %w", newError("create event set", ret))
	}
	defer set.Free()
	start = now()
	ret = dev.RegisterEvents(mask, set)
	d.account("RegisterEvents", 1, start)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("watch events: %w", newError("register events", ret))
	}
	if mask&nvml.EventTypeXidCriticalError != 0 {
		d.events.Store(eventsWatching)
	}
	d.src.log.Debug("watching driver events", "device", d.index, "mask", mask)
	for ctx.Err() == nil {
		data, ret := set.Wait(eventWaitMS)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		default:
			return fmt.Errorf("watch events: %w", newError("wait for events", ret))
		}
		if ev, ok := d.toEvent(data); ok {
			emit(ev)
		}
	}
	return nil
}

// toEvent maps one NVML event to a sampler event.
func (d *device) toEvent(data nvml.EventData) (sampler.Event, bool) {
	t := d.src.opts.Now().UnixNano()
	ev := sampler.Event{Device: d.index, StartNS: t, EndNS: t}
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		ev.Kind = sampler.EventXID
		code := data.EventData
		ev.Message = fmt.Sprintf("Xid %d", code)
		if h, ok := xidHints[code]; ok {
			ev.Message += ": " + h
		}
		ev.Attrs = []sampler.Attr{{Key: "xid", Value: strconv.FormatUint(code, 10)}}
		d.xids.Add(1)
	case nvml.EventTypeSingleBitEccError, nvml.EventTypeDoubleBitEccError:
		ev.Kind = sampler.EventECC
		typ := "single_bit"
		if data.EventType == nvml.EventTypeDoubleBitEccError {
			typ = "double_bit"
		}
		ev.Message = typ + " ECC error"
		ev.Attrs = []sampler.Attr{{Key: "type", Value: typ}}
	case nvml.EventTypePowerSourceChange:
		ev.Kind = sampler.EventPowerSource
		src := map[uint64]string{0: "ac", 1: "battery", 2: "undersized"}[data.EventData]
		if src == "" {
			src = strconv.FormatUint(data.EventData, 10)
		}
		ev.Message = "power source changed to " + src
		ev.Attrs = []sampler.Attr{{Key: "source", Value: src}}
	case nvml.EventTypeClock:
		ev.Kind = sampler.EventClockChange
		ev.Message = "clocks changed"
	default:
		return ev, false
	}
	if data.GpuInstanceId != 0xFFFFFFFF && data.GpuInstanceId != 0 {
		ev.Attrs = append(ev.Attrs, sampler.Attr{Key: "gpu_instance", Value: strconv.FormatUint(uint64(data.GpuInstanceId), 10)})
	}
	return ev, true
}

// Reopen re-acquires the device's handles by UUID after it was lost,
// without touching the library or the other devices. It implements
// sampler.Reopener.
//
// An empty uuid (the device never answered) re-acquires it by its index.
func (d *device) Reopen(uuid string) error {
	if uuid == "" && !d.mig {
		return d.openByIndex()
	}
	if !d.src.has["nvmlDeviceGetHandleByUUID"] {
		return fmt.Errorf("reopen %s: %w", uuid, notSupported("nvmlDeviceGetHandleByUUID absent"))
	}
	start := now()
	h, ret := d.src.lib.DeviceGetHandleByUUID(uuid)
	d.account("DeviceGetHandleByUUID", 1, start)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("reopen %s: %w", uuid, newError("get handle by uuid", ret))
	}
	var raw = d.raw
	if d.src.direct != nil && !d.mig {
		start = now()
		r, ret := d.src.direct.handleByUUID(uuid)
		d.account("DeviceGetHandleByUUID", 1, start)
		if ret == nvml.SUCCESS {
			raw = r
		}
	}
	d.mu.Lock()
	d.dev, d.raw = h, raw
	d.mu.Unlock()
	return nil
}

// openByIndex acquires the device's handles by its index: at start, and
// to re-acquire a device that did not answer then.
func (d *device) openByIndex() error {
	s := d.src
	start := now()
	h, ret := s.lib.DeviceGetHandleByIndex(d.index)
	d.account("DeviceGetHandleByIndex", 1, start)
	if ret != nvml.SUCCESS {
		return newError(fmt.Sprintf("open device %d", d.index), ret)
	}
	raw := d.raw
	if s.direct != nil {
		start := now()
		r, ret := s.direct.deviceHandle(d.index)
		d.account("DeviceGetHandleByIndex", 1, start)
		if ret == nvml.SUCCESS {
			raw = r
		}
	}
	d.mu.Lock()
	d.dev, d.raw = h, raw
	d.mu.Unlock()
	return nil
}

// noHandle is the error of every call on a device that has had no handle
// since the start: to the engine it is lost until a probe re-acquires it.
func (d *device) noHandle() error {
	return fmt.Errorf("device %d has no handle (it did not answer at start): %w", d.index, sampler.ErrGPULost)
}
