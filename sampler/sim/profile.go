package sim

import (
	"math"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
)

// mix is splitmix64 over a few words: a deterministic, well-spread hash.
func mix(words ...uint64) uint64 {
	var h uint64 = 0x9e3779b97f4a7c15
	for _, w := range words {
		h ^= w + 0x9e3779b97f4a7c15 + h<<6 + h>>2
		h ^= h >> 30
		h *= 0xbf58476d1ce4e5b9
		h ^= h >> 27
		h *= 0x94d049bb133111eb
		h ^= h >> 31
	}
	return h
}

// noise returns a deterministic value in [-1, 1) for a metric at an instant
// (quantized to 10 ms so that nearby reads agree).
func (d *Device) noise(id catalog.MetricID, at time.Time) float64 {
	q := uint64(at.UnixNano() / int64(10*time.Millisecond))
	return float64(mix(d.src.opts.Seed, uint64(d.index), uint64(id), q)>>11)/float64(1<<53)*2 - 1
}

// phase is the profile's state at an instant: seconds since the source
// started, and a per-device offset so that GPUs are not in lockstep.
func (d *Device) elapsed(at time.Time) float64 {
	return at.Sub(d.src.start).Seconds() + float64(d.index)*0.37
}

// Data-stall rhythm: utilization dips for stallDur every stallPeriod.
const (
	stallPeriod = 6.0 // s
	stallDur    = 1.5 // s
	// thermalRamp is how long the thermal profile takes from 60 °C to the
	// slowdown threshold.
	thermalRamp = 45.0 // s
)

// load returns the profile's GPU utilization (0–100) at t, and whether the
// engines are active at all (idle → the driver records nothing).
func (d *Device) load(at time.Time) (util float64, active bool) {
	if ph := d.phase(at); ph != nil {
		return ph.Util, ph.Util > 0
	}
	e := d.elapsed(at)
	switch d.src.opts.Profile {
	case "idle":
		return 0, false
	case "data-stall":
		if math.Mod(e, stallPeriod) > stallPeriod-stallDur {
			return 4 + 3*d.noise(0, at), true
		}
		return 96 + 3*d.noise(0, at), true
	case "memory-pressure":
		return 88 + 6*d.noise(0, at), true
	case "comm-bound":
		// A multi-GPU job whose GPUs spend half their time in collectives,
		// waiting for each other's data: the engine is busy only part of
		// the time and few SMs do work.
		return 55 + 5*d.noise(0, at), true
	default: // training, launch-bound, thermal
		return 97 + 2.5*d.noise(0, at), true
	}
}

// temperature of the GPU core at t.
func (d *Device) temperature(at time.Time) float64 {
	e := d.elapsed(at)
	switch d.src.opts.Profile {
	case "idle":
		return 31 + 0.5*d.noise(catalog.MetricTempGPU, at)
	case "launch-bound":
		return 44 + 0.5*d.noise(catalog.MetricTempGPU, at)
	case "thermal":
		// climbs from 60 °C through the slowdown threshold, then hovers just
		// above it while the clocks are pulled down.
		t := 60 + (slowdownTempC+2-60)*math.Min(e/thermalRamp, 1)
		return t + 0.4*d.noise(catalog.MetricTempGPU, at)
	default:
		return 63 + 2*math.Min(e/120, 1) + 0.5*d.noise(catalog.MetricTempGPU, at)
	}
}

// throttled reports the clock event reasons active at t.
func (d *Device) reasons(at time.Time) uint64 {
	switch d.src.opts.Profile {
	case "idle":
		return catalog.ReasonGPUIdle
	case "thermal":
		if d.temperature(at) >= slowdownTempC {
			return catalog.ReasonSWThermalSlowdown | catalog.ReasonHWThermalSlowdown
		}
	}
	return 0
}

// thermalSince is when the thermal profile's device first crossed the
// slowdown threshold (for the throttle-time counters).
func (d *Device) throttledNS(at time.Time) float64 {
	if d.src.opts.Profile != "thermal" {
		return 0
	}
	e := d.elapsed(at)
	cross := thermalRamp * (slowdownTempC - 60) / (slowdownTempC + 2 - 60)
	if e <= cross {
		return 0
	}
	return (e - cross) * 1e9
}

// value is metric id's simulated value at t; ok is false when the driver
// would have nothing (an idle engine's utilization buffer).
func (d *Device) value(id catalog.MetricID, at time.Time) (float64, bool) {
	util, active := d.load(at)
	n := d.noise(id, at)
	prof := d.src.opts.Profile
	switch id {
	case catalog.MetricUtilGPU:
		if !active {
			return 0, false
		}
		return math.Round(clamp(util, 0, 100)), true
	case catalog.MetricUtilMemory:
		if !active {
			return 0, false
		}
		f := 0.62
		if prof == "launch-bound" {
			f = 0.08
		}
		return math.Round(clamp(util*f+2*n, 0, 100)), true
	case catalog.MetricUtilEncoder, catalog.MetricUtilDecoder, catalog.MetricUtilJPEG, catalog.MetricUtilOFA:
		return 0, false // no video work in any profile
	case catalog.MetricPowerDraw, catalog.MetricPowerInstant:
		return math.Round(d.power(util, at, n)*1000) / 1000, true
	case catalog.MetricPowerLimit:
		return powerLimitW, true
	case catalog.MetricClockSM, catalog.MetricClockGraphics:
		if !active {
			return 345, true
		}
		if d.reasons(at)&catalog.ReasonThermalAny != 0 {
			return math.Round(1410 + 20*n), true
		}
		return maxSMClockMHz, true
	case catalog.MetricClockMemory:
		return memClockMHz, true
	case catalog.MetricClockVideo:
		if !active {
			return 765, true
		}
		return 1755, true
	case catalog.MetricClocksEventReasons:
		return float64(d.reasons(at)), true
	case catalog.MetricPState:
		if !active {
			return 0, true // H100/H200 stay in P0 even idle
		}
		return 0, true
	case catalog.MetricMemoryUsed:
		return d.memUsed(at), true
	case catalog.MetricMemoryFree:
		return memoryTotalMiB - d.memUsed(at) - 583, true
	case catalog.MetricMemoryReserved:
		return 583, true
	case catalog.MetricMemoryTotal:
		return memoryTotalMiB, true
	case catalog.MetricTempGPU:
		return math.Round(d.temperature(at)), true
	case catalog.MetricTempMemory:
		return math.Round(d.temperature(at) + 6 + 0.5*n), true
	case catalog.MetricThrottleSWThermal, catalog.MetricThrottleHWThermal, catalog.MetricViolationThermal:
		return math.Round(d.throttledNS(at)), true
	case catalog.MetricThrottleSWPowerCap, catalog.MetricThrottleSyncBoost, catalog.MetricThrottleHWPowerBrake,
		catalog.MetricViolationPower, catalog.MetricViolationSyncBoost, catalog.MetricViolationBoardLimit,
		catalog.MetricViolationReliability:
		return 0, true
	case catalog.MetricViolationLowUtil:
		if !active {
			return math.Round(d.elapsed(at) * 1e9), true
		}
		return 0, true
	case catalog.MetricPCIeTxBytes, catalog.MetricPCIeRxBytes, catalog.MetricNVLinkTxBytes, catalog.MetricNVLinkRxBytes:
		rate := 0.0 // bytes/s
		if active {
			rate = d.linkRate(id)
		}
		return math.Round(rate * d.elapsed(at)), true
	case catalog.MetricPCIeLinkGen:
		return 5, true
	case catalog.MetricPCIeLinkWidth:
		return 16, true
	case catalog.MetricPCIeReplays, catalog.MetricECCSingleVolatile, catalog.MetricECCDoubleVolatile,
		catalog.MetricRemappedCorrectable, catalog.MetricRemappedUncorrectable,
		catalog.MetricECCDoubleAggregate, catalog.MetricRowRemapPending, catalog.MetricRowRemapFailure,
		catalog.MetricRetiredPagesDouble, catalog.MetricRetiredPagesSingle, catalog.MetricNVLinkCRCDataErrors, catalog.MetricNVLinkRecoveryErrors:
		return 0, true
	case catalog.MetricDisplayMode, catalog.MetricDisplayActive:
		return 0, true // a headless datacenter GPU
	case catalog.MetricEncoderSessions, catalog.MetricEncoderFPS, catalog.MetricEncoderLatency,
		catalog.MetricFBCSessions, catalog.MetricFBCFPS, catalog.MetricFBCLatency:
		return 0, true // no video work in any profile
	case catalog.MetricECCSingleAggregate:
		return 3, true // a few corrected errors over the board's life
	case catalog.MetricNVLinkCRCFlitErrors, catalog.MetricNVLinkReplayErrors:
		return 1, true
	}
	return 0, false
}

// linkRate is the profile's traffic in bytes/s, one direction, on the link
// of metric id (a PCIe or NVLink counter or rate) at full load.
func (d *Device) linkRate(id catalog.MetricID) float64 {
	nvlink := id == catalog.MetricNVLinkTxBytes || id == catalog.MetricNVLinkRxBytes ||
		id == catalog.MetricNVLinkTxRate || id == catalog.MetricNVLinkRxRate
	switch d.src.opts.Profile {
	case "comm-bound":
		// all-reduce traffic dominates
		if nvlink {
			return 280e9
		}
		return 3e9
	}
	if nvlink {
		return 90e9
	}
	return 2e9
}

// power in W for a utilization at an instant.
func (d *Device) power(util float64, at time.Time, n float64) float64 {
	const idleW = 74
	if d.phase(at) != nil {
		return idleW + (625-idleW)*util/100 + 30*n
	}
	switch d.src.opts.Profile {
	case "idle":
		return idleW + 1.5*n
	case "launch-bound":
		// busy but tiny kernels: the SMs mostly wait
		return 165 + 10*n
	case "thermal":
		p := 610 + 35*n
		if d.reasons(at)&catalog.ReasonThermalAny != 0 {
			p = 480 + 25*n
		}
		return p
	}
	return idleW + (625-idleW)*util/100 + 30*n
}

// memUsed in MiB.
func (d *Device) memUsed(at time.Time) float64 {
	if ph := d.phase(at); ph != nil {
		m := 0.0
		for _, p := range ph.Procs {
			m += p.MemoryMiB
		}
		return m
	}
	switch d.src.opts.Profile {
	case "idle":
		return 4
	case "memory-pressure":
		// climbs to within ~1% of full and stays there
		e := d.elapsed(at)
		return math.Round(memoryTotalMiB*(0.90+0.09*math.Min(e/30, 1)) - 583)
	case "launch-bound":
		return 18 * 1024
	}
	return 97 * 1024
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// gpmShape is a profile's profiling signature when its engines are fully
// busy, in percent (rates scale with the load).
type gpmShape struct {
	smActive, occupancy, tensor, hmma, dfma, imma, fp64, fp32, fp16, dram float64
}

var gpmShapes = map[string]gpmShape{
	// Large matmuls: SMs busy, tensor cores dominant.
	"training": {smActive: 88, occupancy: 58, tensor: 72, hmma: 70, dfma: 0, imma: 1, fp64: 0.2, fp32: 18, fp16: 34, dram: 55},
	// Tiny kernels back to back: the engine counts as busy (high
	// utilization_gpu) while SMs mostly wait for launches.
	"launch-bound":    {smActive: 11, occupancy: 6, tensor: 2, hmma: 2, dfma: 0, imma: 0, fp64: 0, fp32: 4, fp16: 1, dram: 4},
	"data-stall":      {smActive: 85, occupancy: 55, tensor: 68, hmma: 66, dfma: 0, imma: 1, fp64: 0.2, fp32: 17, fp16: 32, dram: 52},
	"thermal":         {smActive: 90, occupancy: 60, tensor: 75, hmma: 73, dfma: 0, imma: 1, fp64: 0.2, fp32: 19, fp16: 35, dram: 58},
	"memory-pressure": {smActive: 70, occupancy: 45, tensor: 40, hmma: 38, dfma: 0, imma: 1, fp64: 0.1, fp32: 25, fp16: 20, dram: 80},
	// Collectives run on a few SMs while the rest wait for the peers' data.
	"comm-bound": {smActive: 30, occupancy: 14, tensor: 20, hmma: 19, dfma: 0, imma: 0, fp64: 0, fp32: 8, fp16: 10, dram: 35},
}

// gpmValue is a GPM metric's simulated value at t: percent for activity,
// bytes per second for link rates.
func (d *Device) gpmValue(id catalog.MetricID, at time.Time) float64 {
	util, active := d.load(at)
	if !active {
		return 0
	}
	sh := gpmShapes[d.src.opts.Profile]
	f := util / 100 // activity follows the load (data-stall dips)
	if d.src.opts.Profile == "launch-bound" {
		f = 1 // utilization_gpu is high, the SMs are not
	}
	n := d.noise(id, at)
	pct := func(v float64) float64 { return math.Round(clamp(v*f+v*0.03*n, 0, 100)*100) / 100 }
	switch id {
	case catalog.MetricGraphicsActive:
		return math.Round(clamp(util, 0, 100)*100) / 100
	case catalog.MetricSMActive:
		return pct(sh.smActive)
	case catalog.MetricSMOccupancy:
		return pct(sh.occupancy)
	case catalog.MetricTensorActive:
		return pct(sh.tensor)
	case catalog.MetricTensorHMMAActive:
		return pct(sh.hmma)
	case catalog.MetricTensorDFMAActive:
		return pct(sh.dfma)
	case catalog.MetricTensorIMMAActive:
		return pct(sh.imma)
	case catalog.MetricFP64Active:
		return pct(sh.fp64)
	case catalog.MetricFP32Active:
		return pct(sh.fp32)
	case catalog.MetricFP16Active:
		return pct(sh.fp16)
	case catalog.MetricDRAMActive:
		return pct(sh.dram)
	case catalog.MetricPCIeTxRate, catalog.MetricPCIeRxRate, catalog.MetricNVLinkTxRate, catalog.MetricNVLinkRxRate:
		if d.src.opts.Profile == "comm-bound" {
			f = 1 // the links stay busy while the SMs wait
		}
		return math.Round(d.linkRate(id) * f * (1 + 0.05*n))
	}
	return 0
}
