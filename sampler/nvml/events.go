//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// eventMask is what the backend registers for, where the device supports
// it: XID critical errors, ECC errors, power-source and clock changes.
// P-state changes are left out (noisy; the pstate metric carries them).
const eventMask = nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError |
	nvml.EventTypePowerSourceChange | nvml.EventTypeClock

// Driver events are polled, not waited for: once every eventPollEvery the
// watcher asks the event set with a wait of eventPollWaitMS, takes every
// event that is ready, and sleeps in Go until the next poll. A long
// blocking wait (the driver sleeping in the kernel for up to its timeout)
// costs more than the poll: while a goroutine sits in a long cgo call, Go's
// sysmon thread keeps waking (about 0.25 % of a core for the one waiter,
// measured with scripts/event-cpu.sh). A poll a second delays an event by
// less than a second.
//
// The wait is 1 ms, not 0: NVML's timeout 0 is no poll (NVIDIA's Python
// bindings document it as "wait indefinitely", and a real driver blocks
// there), and go-nvml passes the value through unchanged.
const (
	eventPollEvery  = time.Second
	eventPollWaitMS = 1
)

// pollEvents polls set every eventPollEvery until ctx ends, handing each
// ready event to handle, and calls every (when not nil) after each poll.
// It returns the first wait error other than a timeout.
func pollEvents(ctx context.Context, set nvml.EventSet, handle func(nvml.EventData), every func()) error {
	tick := time.NewTicker(eventPollEvery)
	defer tick.Stop()
	for ctx.Err() == nil {
		for ctx.Err() == nil { // everything ready, then sleep
			data, ret := set.Wait(eventPollWaitMS)
			if ret == nvml.ERROR_TIMEOUT {
				break
			}
			if ret != nvml.SUCCESS {
				return newError("wait for events", ret)
			}
			handle(data)
		}
		if every != nil {
			every()
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	return nil
}

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
func (d *device) WatchEvents(ctx context.Context, emit func(record.Event)) error {
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
	err := pollEvents(ctx, set, func(data nvml.EventData) {
		if ev, ok := d.toEvent(data); ok {
			emit(ev)
		}
	}, nil)
	if err != nil {
		return fmt.Errorf("watch events: %w", err)
	}
	return nil
}

// toEvent maps one NVML event to a sampler event.
func (d *device) toEvent(data nvml.EventData) (record.Event, bool) {
	t := d.src.opts.Now().UnixNano()
	ev := record.Event{Device: d.index, StartNS: t, EndNS: t}
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		ev.Kind = record.EventXID
		code := data.EventData
		ev.Message = fmt.Sprintf("Xid %d", code)
		if h, ok := xidHints[code]; ok {
			ev.Message += ": " + h
		}
		ev.Attrs = []record.Attr{{Key: "xid", Value: strconv.FormatUint(code, 10)}}
		d.xids.Add(1)
	case nvml.EventTypeSingleBitEccError, nvml.EventTypeDoubleBitEccError:
		ev.Kind = record.EventECC
		typ := "single_bit"
		if data.EventType == nvml.EventTypeDoubleBitEccError {
			typ = "double_bit"
		}
		ev.Message = typ + " ECC error"
		ev.Attrs = []record.Attr{{Key: "type", Value: typ}}
	case nvml.EventTypePowerSourceChange:
		ev.Kind = record.EventPowerSource
		src := map[uint64]string{0: "ac", 1: "battery", 2: "undersized"}[data.EventData]
		if src == "" {
			src = strconv.FormatUint(data.EventData, 10)
		}
		ev.Message = "power source changed to " + src
		ev.Attrs = []record.Attr{{Key: "source", Value: src}}
	case nvml.EventTypeClock:
		ev.Kind = record.EventClockChange
		ev.Message = "clocks changed"
	default:
		return ev, false
	}
	if data.GpuInstanceId != 0xFFFFFFFF && data.GpuInstanceId != 0 {
		ev.Attrs = append(ev.Attrs, record.Attr{Key: "gpu_instance", Value: strconv.FormatUint(uint64(data.GpuInstanceId), 10)})
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
	var direct func() (unsafe.Pointer, nvml.Return)
	if d.src.direct != nil && !d.mig {
		direct = func() (unsafe.Pointer, nvml.Return) { return d.src.direct.handleByUUID(uuid) }
	}
	d.adopt(h, "DeviceGetHandleByUUID", direct)
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
	var direct func() (unsafe.Pointer, nvml.Return)
	if s.direct != nil {
		direct = func() (unsafe.Pointer, nvml.Return) { return s.direct.deviceHandle(d.index) }
	}
	d.adopt(h, "DeviceGetHandleByIndex", direct)
	return nil
}

// adopt installs h as the device's handle and, when direct is set, the raw
// handle it returns for the one-call drain path (counted as fn); a raw
// lookup that fails keeps the previous raw handle.
func (d *device) adopt(h nvml.Device, fn string, direct func() (unsafe.Pointer, nvml.Return)) {
	raw := d.raw
	if direct != nil {
		start := now()
		r, ret := direct()
		d.account(fn, 1, start)
		if ret == nvml.SUCCESS {
			raw = r
		}
	}
	d.mu.Lock()
	d.dev, d.raw = h, raw
	d.mu.Unlock()
}

// noHandle is the error of every call on a device that has had no handle
// since the start: to the engine it is lost until a probe re-acquires it.
func (d *device) noHandle() error {
	return fmt.Errorf("device %d has no handle (it did not answer at start): %w", d.index, sampler.ErrGPULost)
}

// reregisterEvery is how often the shared watcher retries registering the
// devices that could not be registered (no handle yet, lost) and
// re-registers those whose handle changed (recovered by UUID).
const reregisterEvery = 10 * time.Second

// WatchAllEvents implements sampler.SourceEventWatcher: one event set for
// the GPUs among indexes (MIG instances are covered by their GPU's events)
// and one waiter for all of them, instead of a set and a waiting thread per
// GPU. The set is polled once a second (see pollEvents): about one NVML
// call per second for the whole host. Devices that cannot be registered
// yet are retried every reregisterEvery. It returns
// sampler.ErrNotSupported when the driver lacks the event functions or no
// device supports an event of interest.
func (s *Source) WatchAllEvents(ctx context.Context, indexes []int, emit func(record.Event)) error {
	for _, sym := range []string{"nvmlEventSetCreate", "nvmlEventSetFree", "nvmlDeviceRegisterEvents", "nvmlDeviceGetSupportedEventTypes"} {
		if !s.has[sym] {
			return fmt.Errorf("watch events: %w", &absentError{what: "watch events", sym: sym})
		}
	}
	if !s.has["nvmlEventSetWait_v2"] && !s.has["nvmlEventSetWait"] {
		return fmt.Errorf("watch events: %w", &absentError{what: "watch events", sym: "nvmlEventSetWait_v2"})
	}
	devs, err := s.Devices()
	if err != nil {
		return fmt.Errorf("watch events: %w", err)
	}
	var watch []*device
	for _, ds := range devs {
		if d, ok := ds.(*device); ok && !d.mig && slices.Contains(indexes, d.index) {
			watch = append(watch, d)
		}
	}
	set, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("watch events: %w", newError("create event set", ret))
	}
	defer set.Free()
	// registered[i] is the handle device watch[i] is registered with (nil:
	// not registered); unsupported[i]: the device has no event of interest.
	registered := make([]nvml.Device, len(watch))
	unsupported := make([]bool, len(watch))
	register := func() {
		for i, d := range watch {
			if unsupported[i] {
				continue
			}
			d.mu.Lock()
			dev := d.dev
			d.mu.Unlock()
			if dev == nil || dev == registered[i] {
				continue
			}
			switch err := d.registerEvents(dev, set); {
			case err == nil:
				registered[i] = dev
			case errors.Is(err, sampler.ErrNotSupported):
				unsupported[i] = true
				s.log.Info("driver events not supported on this device", "device", d.index, "err", err)
			default:
				s.log.Debug("cannot register for driver events yet", "device", d.index, "err", err)
			}
		}
	}
	register()
	if !slices.Contains(unsupported, false) {
		return fmt.Errorf("watch events: %w", notSupported("no device supports an event of interest"))
	}
	lastRegister := time.Now()
	err = pollEvents(ctx, set, func(data nvml.EventData) {
		for i, d := range watch {
			if registered[i] != nil && data.Device == registered[i] {
				if ev, ok := d.toEvent(data); ok {
					emit(ev)
				}
				break
			}
		}
	}, func() {
		if time.Since(lastRegister) >= reregisterEvery {
			register()
			lastRegister = time.Now()
		}
	})
	if err != nil {
		return fmt.Errorf("watch events: %w", err)
	}
	return nil
}

// registerEvents registers the device (handle dev) in set for the events
// of interest it supports.
func (d *device) registerEvents(dev nvml.Device, set nvml.EventSet) error {
	start := now()
	supported, ret := dev.GetSupportedEventTypes()
	d.account("GetSupportedEventTypes", 1, start)
	if ret != nvml.SUCCESS {
		err := newError("get supported event types", ret)
		if errors.Is(err, sampler.ErrNotSupported) {
			d.events.Store(eventsUnsupported)
		}
		return err
	}
	mask := supported & eventMask
	if mask == 0 {
		d.events.Store(eventsUnsupported)
		return notSupported("no event type of interest")
	}
	start = now()
	ret = dev.RegisterEvents(mask, set)
	d.account("RegisterEvents", 1, start)
	if ret != nvml.SUCCESS {
		return newError("register events", ret)
	}
	if mask&nvml.EventTypeXidCriticalError != 0 {
		d.events.Store(eventsWatching)
	}
	d.src.log.Debug("watching driver events", "device", d.index, "mask", mask)
	return nil
}
