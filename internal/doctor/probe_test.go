package doctor_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/doctor"
	"github.com/gpusampler/gpusampler/sampler"
)

// drainScript answers each buffer type's cursor-0 drain as scripted (a
// type not scripted is not supported); every other method is the embedded
// nil interface's (not called by the probe).
type drainScript struct {
	sampler.DeviceSource
	drains map[catalog.BufferType]drainResult
}

type drainResult struct {
	ts  []uint64 // µs, in the order the driver returns them
	err error
}

func (d drainScript) Drain(t catalog.BufferType, cursor uint64, dst []sampler.RawSample) ([]sampler.RawSample, error) {
	r, ok := d.drains[t]
	if !ok {
		return dst, errors.Join(errors.New("sampling type"), sampler.ErrNotSupported)
	}
	if cursor != 0 {
		return dst, errors.New("probe drained from a cursor other than 0")
	}
	for _, ts := range r.ts {
		dst = append(dst, sampler.RawSample{TimeUS: ts, Value: 1})
	}
	return dst, r.err
}

// ProbeBuffers measures every buffer type from one drain: depth, median
// period, span and duplicates of the sorted timestamps, and the clock of
// the newest on the injected clocks.
func TestProbeBuffers(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	nowUS := uint64(now.UnixMicro())
	const bootUS = 1_000_000_000 // 1000 s since boot
	ms := uint64(1000)
	dev := drainScript{drains: map[catalog.BufferType]drainResult{
		// realtime, out of order, one duplicate timestamp
		catalog.BufferTotalPower: {ts: []uint64{nowUS - 30*ms, nowUS - 10*ms, nowUS - 20*ms, nowUS - 20*ms, nowUS}},
		// boot time, uneven gaps: the median is taken
		catalog.BufferGPUUtil: {ts: []uint64{bootUS - 40*ms, bootUS - 35*ms, bootUS - 20*ms, bootUS}},
		// neither clock: anchored
		catalog.BufferMemoryUtil:  {ts: []uint64{5 * ms, 6 * ms}},
		catalog.BufferEncoderUtil: {err: sampler.ErrNothingNew},
		catalog.BufferDecoderUtil: {},
		catalog.BufferSMClock:     {err: errors.New("gpu is lost")},
	}}
	got := doctor.ProbeBuffers(dev, doctor.Options{Now: func() time.Time { return now },
		Boottime: func() (time.Duration, bool) { return bootUS * time.Microsecond, true }})
	var want []doctor.BufferProbe
	for bt := catalog.BufferType(0); bt < catalog.NumBufferTypes; bt++ {
		want = append(want, doctor.BufferProbe{Type: bt.String()})
	}
	want[catalog.BufferTotalPower] = doctor.BufferProbe{Type: "total_power", Supported: true, Depth: 5,
		Period: 10 * time.Millisecond, Span: 30 * time.Millisecond, Duplicates: 1, Clock: "realtime"}
	want[catalog.BufferGPUUtil] = doctor.BufferProbe{Type: "gpu_util", Supported: true, Depth: 4,
		Period: 15 * time.Millisecond, Span: 40 * time.Millisecond, Clock: "boottime"}
	want[catalog.BufferMemoryUtil] = doctor.BufferProbe{Type: "memory_util", Supported: true, Depth: 2,
		Period: time.Millisecond, Span: time.Millisecond, Clock: "anchored"}
	want[catalog.BufferEncoderUtil] = doctor.BufferProbe{Type: catalog.BufferEncoderUtil.String(), Supported: true, Empty: true}
	want[catalog.BufferDecoderUtil] = doctor.BufferProbe{Type: catalog.BufferDecoderUtil.String(), Supported: true, Empty: true}
	want[catalog.BufferSMClock] = doctor.BufferProbe{Type: catalog.BufferSMClock.String(), Supported: true, Err: "gpu is lost"}
	if !slices.Equal(got, want) {
		t.Errorf("probes:\n got %+v\nwant %+v", got, want)
	}
}
