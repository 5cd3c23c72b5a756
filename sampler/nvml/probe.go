package nvml

import (
	"errors"
	"slices"
	"time"

	"github.com/gpusampler/gpusampler/sampler"
)

// BufferProbe is what one cursor-0 drain of a sample buffer shows: how deep
// the driver's buffer is, how often it samples and on which clock.
type BufferProbe struct {
	Type sampler.BufferType
	// Supported is false when the device lacks the buffer type.
	Supported bool
	// Empty is true when the buffer held nothing (idle engine, or not
	// started yet); Depth and Period are then unknown.
	Empty bool
	// Depth is the number of samples a cursor-0 drain returned: the buffer's
	// depth once it has filled.
	Depth int
	// Period is the median spacing of the samples.
	Period time.Duration
	// Span is the time between the oldest and newest sample.
	Span time.Duration
	// Duplicates counts samples whose timestamp equals their predecessor's.
	Duplicates int
	// NewestUS is the newest raw timestamp.
	NewestUS uint64
	// Clock is the timestamp clock as the sampler's Timebase classifies
	// the newest sample.
	Clock sampler.ClockKind
	// Err is the drain's error, when not "not supported" or "nothing new".
	Err error
}

// ProbeBuffers drains every buffer type of ds once from cursor 0 and
// measures it (for doctor and gpu-check). It works on any DeviceSource.
func ProbeBuffers(ds sampler.DeviceSource) []BufferProbe {
	out := make([]BufferProbe, 0, sampler.NumBufferTypes)
	var raw []sampler.RawSample
	for t := sampler.BufferType(0); t < sampler.NumBufferTypes; t++ {
		var err error
		raw, err = ds.Drain(t, 0, raw[:0])
		out = append(out, measure(t, raw, err))
	}
	return out
}

func measure(t sampler.BufferType, raw []sampler.RawSample, err error) BufferProbe {
	p := BufferProbe{Type: t, Supported: true}
	switch {
	case errors.Is(err, sampler.ErrNotSupported):
		p.Supported = false
		return p
	case errors.Is(err, sampler.ErrNothingNew):
		p.Empty = true
		return p
	case err != nil:
		p.Err = err
		return p
	}
	if len(raw) == 0 {
		p.Empty = true
		return p
	}
	ts := make([]uint64, len(raw))
	for i, r := range raw {
		ts[i] = r.TimeUS
	}
	slices.Sort(ts)
	p.Depth = len(ts)
	p.NewestUS = ts[len(ts)-1]
	p.Span = time.Duration(ts[len(ts)-1]-ts[0]) * time.Microsecond
	var gaps []uint64
	for i := 1; i < len(ts); i++ {
		if ts[i] == ts[i-1] {
			p.Duplicates++
			continue
		}
		gaps = append(gaps, ts[i]-ts[i-1])
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		p.Period = time.Duration(gaps[len(gaps)/2]) * time.Microsecond
	}
	tb := sampler.NewTimebase()
	tb.Observe(p.NewestUS)
	p.Clock = tb.Kind
	return p
}
