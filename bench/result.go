package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Schema identifies the JSON results format; SchemaVersion increases on
// any incompatible change (fields are only added within a version).
const (
	Schema        = "gpusampler.bench"
	SchemaVersion = 2
)

// Num is a float64 that encodes NaN and ±Inf (unknown, not measured) as
// JSON null, and decodes null as NaN.
type Num float64

// MarshalJSON writes null for NaN and infinities.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', 10, 64), nil
}

// UnmarshalJSON reads a number, or null as NaN.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("not a number: %s", b)
	}
	*n = Num(f)
	return nil
}

// Known reports whether n holds a value (not NaN or infinite).
func (n Num) Known() bool { return !math.IsNaN(float64(n)) && !math.IsInf(float64(n), 0) }

// Result is everything one `gpusampler bench` invocation measured. Its JSON
// form is the documented, stable export (README.md).
type Result struct {
	Schema        string `json:"schema"`
	SchemaVersion int    `json:"schema_version"`
	// Tool is "gpusampler VERSION".
	Tool string `json:"tool"`
	// Created is when the benchmark started (RFC 3339).
	Created string `json:"created"`
	// Simulated is true when the GPUs were simulated: the numbers say
	// nothing about real hardware.
	Simulated bool `json:"simulated"`
	// Partial is true when the benchmark was interrupted: the numbers cover
	// the runs that completed (a warning says how many).
	Partial bool   `json:"partial,omitempty"`
	Backend string `json:"backend"`
	// Profile is the simulator's workload profile (simulated only).
	Profile  string       `json:"profile,omitempty"`
	Settings Settings     `json:"settings"`
	Devices  []DeviceInfo `json:"devices"`
	Hygiene  Hygiene      `json:"hygiene"`
	Baseline Baseline     `json:"baseline"`
	// Benchmarks holds one entry per command: "A", and "B" with --vs.
	Benchmarks []Benchmark `json:"benchmarks"`
	// Comparison of B against A (with --vs).
	Comparison *Comparison `json:"comparison,omitempty"`
	// Warnings about the measurement itself (contamination, coarse
	// counters, lost samples).
	Warnings []string `json:"warnings,omitempty"`

	// raw holds the collected samples per device (baseline to the last
	// run), for the CSV and SVG exports; not part of the JSON. cat is the
	// catalog their metric IDs refer to (nil: the built-in one).
	raw map[int][]record.Sample
	cat *catalog.Catalog
}

// metricCatalog returns the catalog of r's raw samples.
func (r *Result) metricCatalog() *catalog.Catalog {
	if r.cat == nil {
		return catalog.Default()
	}
	return r.cat
}

// Settings are the benchmark's parameters.
type Settings struct {
	Runs            int     `json:"runs"`
	Warmup          int     `json:"warmup"`
	FieldIntervalMS float64 `json:"field_interval_ms"`
	DrainIntervalMS float64 `json:"drain_interval_ms"`
	BaselineS       float64 `json:"baseline_s"`
	// Selection says how the devices were chosen ("all",
	// "CUDA_VISIBLE_DEVICES=0,1", "--devices 1").
	Selection string `json:"selection"`
	// MarksEnv is the environment variable naming the step-mark FIFO.
	MarksEnv string `json:"marks_env"`
	// Order is how an A/B benchmark ordered each pair of runs: PairOrder
	// ("ABBA": A B, then B A, alternating); empty for one command.
	Order string `json:"order,omitempty"`
}

// DeviceInfo identifies one sampled GPU.
type DeviceInfo struct {
	Index          int     `json:"index"`
	UUID           string  `json:"uuid"`
	Name           string  `json:"name"`
	PCIBusID       string  `json:"pci_bus_id"`
	MemoryTotalMiB float64 `json:"memory_total_mib"`
	DriverVersion  string  `json:"driver_version"`
	Simulated      bool    `json:"simulated,omitempty"`
}

// Hygiene records the machine state that can contaminate a benchmark.
// Items that could not be read say "unknown"; nothing is invented.
type Hygiene struct {
	Items    []HygieneItem `json:"items"`
	Warnings []string      `json:"warnings,omitempty"`
}

// HygieneItem is one recorded setting, per device (Device -1: the host).
type HygieneItem struct {
	Device int    `json:"device"`
	Name   string `json:"name"`
	// Value is the reading, or "unknown" when it could not be read.
	Value string `json:"value"`
}

// Baseline is the idle measurement taken before the runs.
type Baseline struct {
	DurationS Num              `json:"duration_s"`
	Devices   []BaselineDevice `json:"devices"`
}

// BaselineDevice is one device's idle state.
type BaselineDevice struct {
	Index        int `json:"index"`
	PowerW       Num `json:"power_w"`
	UtilPct      Num `json:"utilization_pct"`
	SMClockMHz   Num `json:"sm_clock_mhz"`
	TempC        Num `json:"temperature_c"`
	MemoryUsedMB Num `json:"memory_used_mib"`
}

// Benchmark is one command's runs and their summary.
type Benchmark struct {
	// Name is "A" (the command after --) or "B" (--vs).
	Name string `json:"name"`
	// Command is the argv; Shell is true when it ran as `sh -c Command[0]`.
	Command []string `json:"command"`
	Shell   bool     `json:"shell,omitempty"`
	Runs    []Run    `json:"runs"`
	Summary Summary  `json:"summary"`
	// Diagnoses are the detectors' findings overlapping this command's
	// runs; empty means none found.
	Diagnoses []Diagnosis `json:"diagnoses"`
}

// Run is one timed execution of a command.
type Run struct {
	// Index numbers the measured runs of a command from 1, as every table
	// and warning does (warmups are not recorded). Schema version 1 counted
	// from 0; ReadResult renumbers such files.
	Index    int   `json:"index"`
	StartNS  int64 `json:"start_ns"`
	EndNS    int64 `json:"end_ns"`
	WallS    Num   `json:"wall_s"`
	ExitCode int   `json:"exit_code"`
	// EnergyJ is summed over the devices; EnergyAboveIdleJ subtracts the
	// baseline power × wall time.
	EnergyJ          Num `json:"energy_j"`
	EnergyAboveIdleJ Num `json:"energy_above_idle_j"`
	// PowerMeanW is the summed mean power of the devices.
	PowerMeanW Num `json:"power_mean_w"`
	// UtilMeanPct is the mean utilization over the devices.
	UtilMeanPct Num         `json:"utilization_mean_pct"`
	Devices     []RunDevice `json:"devices"`
	Steps       []Step      `json:"steps,omitempty"`
	// Outlier marks a run whose wall time lies beyond 1.5 IQR of the
	// others.
	Outlier bool `json:"outlier,omitempty"`
	// OutlierReason names what is known to set an outlier run apart
	// (throttling, a thermal climb, another process, the first run), "" when
	// nothing is.
	OutlierReason string   `json:"outlier_reason,omitempty"`
	Findings      []string `json:"findings,omitempty"`
	Warnings      []string `json:"warnings,omitempty"`
	// others names the foreign processes seen on the GPUs during the run
	// ("pid 1234 python3 on GPU 0"), for its outlier reason.
	others []string
}

// Energy is one device's energy over a window.
type Energy struct {
	// J is the value used: the counter's when it is fine, else the
	// integrated power's.
	J Num `json:"j"`
	// Source is "counter" or "integrated_power" (or "none").
	Source string `json:"source"`
	// CounterJ from the energy counter (interpolated at the window's ends);
	// IntegratedJ from integrating instant power samples.
	CounterJ    Num `json:"counter_j"`
	IntegratedJ Num `json:"integrated_j"`
	// CounterUpdateMS is the counter's observed update period; Coarse is
	// true when it is too coarse for the window (> 1/5 of it).
	CounterUpdateMS Num  `json:"counter_update_ms"`
	Coarse          bool `json:"coarse,omitempty"`
	// Discrepancy is |counter − integrated| / integrated.
	Discrepancy Num `json:"discrepancy"`
}

// Dist summarizes a distribution of samples.
type Dist struct {
	N    int `json:"n"`
	Mean Num `json:"mean"`
	Min  Num `json:"min"`
	P5   Num `json:"p5"`
	P50  Num `json:"p50"`
	P95  Num `json:"p95"`
	Max  Num `json:"max"`
}

// RunDevice is one device's numbers for one run.
type RunDevice struct {
	Index            int    `json:"index"`
	Energy           Energy `json:"energy"`
	EnergyAboveIdleJ Num    `json:"energy_above_idle_j"`
	PowerMeanW       Num    `json:"power_mean_w"`
	PowerPeakW       Num    `json:"power_peak_w"`
	Util             Dist   `json:"utilization_pct"`
	MemUtil          Dist   `json:"memory_utilization_pct"`
	SMClock          Dist   `json:"sm_clock_mhz"`
	MemoryPeakMiB    Num    `json:"memory_peak_mib"`
	TempPeakC        Num    `json:"temperature_peak_c"`
	MemTempPeakC     Num    `json:"memory_temperature_peak_c"`
	// ThrottleMS is the time clocks were held down per reason (counter
	// deltas), in ms; reasons the device does not report are absent.
	ThrottleMS map[string]Num `json:"throttle_ms"`
	// GPM activity (Hopper+), when the catalog and device have it.
	SMActive *Dist `json:"sm_active_pct,omitempty"`
	Tensor   *Dist `json:"tensor_active_pct,omitempty"`
	Samples  int   `json:"samples"`
}

// Step is one phase between two step marks (or a run edge).
type Step struct {
	Name string `json:"name"`
	// StartNS and EndNS in Unix ns; marks carry the program's own clock.
	StartNS     int64 `json:"start_ns"`
	EndNS       int64 `json:"end_ns"`
	WallS       Num   `json:"wall_s"`
	EnergyJ     Num   `json:"energy_j"`
	PowerMeanW  Num   `json:"power_mean_w"`
	UtilMeanPct Num   `json:"utilization_mean_pct"`
}

// Stat summarizes one quantity across runs.
type Stat struct {
	N      int `json:"n"`
	Mean   Num `json:"mean"`
	SD     Num `json:"sd"`
	Min    Num `json:"min"`
	Max    Num `json:"max"`
	Median Num `json:"median"`
	// CI95 is the half-width of the mean's 95% confidence interval.
	CI95 Num `json:"ci95"`
}

// Summary aggregates a benchmark's runs.
type Summary struct {
	WallS            Stat `json:"wall_s"`
	EnergyJ          Stat `json:"energy_j"`
	EnergyAboveIdleJ Stat `json:"energy_above_idle_j"`
	PowerMeanW       Stat `json:"power_mean_w"`
	UtilMeanPct      Stat `json:"utilization_mean_pct"`
	// Outliers lists the run numbers (Run.Index) of outlier runs (wall
	// time).
	Outliers []int `json:"outliers,omitempty"`
	// Failed counts runs that exited non-zero.
	Failed int `json:"failed,omitempty"`
}

// Diagnosis is one detector finding, with its evidence.
type Diagnosis struct {
	Finding string `json:"finding"`
	// Kind is the reader's name for it: input-pipeline stall,
	// launch-bound, thermal, power-capped, memory nearly full, ...
	Kind     string            `json:"kind"`
	Device   int               `json:"device"`
	StartNS  int64             `json:"start_ns"`
	EndNS    int64             `json:"end_ns"`
	Message  string            `json:"message"`
	Evidence map[string]string `json:"evidence"`
	// Runs lists the runs (by Run.Index) the finding overlaps.
	Runs []int `json:"runs"`
}

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ErrSchema is wrapped by ReadResult's errors for files that are not
// gpusampler bench results of a version this build reads.
var ErrSchema = errors.New("bench: not a gpusampler bench result")

// ReadResult decodes a saved result and checks its schema.
func ReadResult(r io.Reader) (*Result, error) {
	var res Result
	dec := json.NewDecoder(r)
	if err := dec.Decode(&res); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("%w: invalid JSON at byte %d: %v", ErrSchema, se.Offset, err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: truncated JSON (unexpected end of file)", ErrSchema)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%w: field %s: %v", ErrSchema, te.Field, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrSchema, err)
	}
	if res.Schema != Schema {
		return nil, fmt.Errorf("%w: schema %q, want %q", ErrSchema, res.Schema, Schema)
	}
	if res.SchemaVersion < 1 || res.SchemaVersion > SchemaVersion {
		return nil, fmt.Errorf("%w: schema_version %d, this build reads 1..%d", ErrSchema, res.SchemaVersion, SchemaVersion)
	}
	if len(res.Benchmarks) == 0 {
		return nil, fmt.Errorf("%w: no benchmarks in the file", ErrSchema)
	}
	for _, b := range res.Benchmarks {
		if len(b.Runs) == 0 {
			return nil, fmt.Errorf("%w: benchmark %s has no runs", ErrSchema, b.Name)
		}
	}
	if res.SchemaVersion == 1 {
		// Version 1 numbered runs from 0.
		for bi := range res.Benchmarks {
			b := &res.Benchmarks[bi]
			for ri := range b.Runs {
				b.Runs[ri].Index++
			}
			for oi := range b.Summary.Outliers {
				b.Summary.Outliers[oi]++
			}
			for di := range b.Diagnoses {
				for k := range b.Diagnoses[di].Runs {
					b.Diagnoses[di].Runs[k]++
				}
			}
		}
		res.SchemaVersion = SchemaVersion
	}
	return &res, nil
}
