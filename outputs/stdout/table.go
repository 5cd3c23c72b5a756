package stdout

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// tableEncoder renders window summaries as a live table like
// `nvidia-smi dmon`: one row per GPU per window, each cell the window's mean
// and, for power and temperatures, the window's max beside it, so that
// sub-second spikes stay visible. It consumes Batch.Summaries only (the
// stdout output wraps itself in internal/pipeline/aggregate for this format).
//
// A row is printed once summaries of a window two intervals later have
// arrived for its device (buffered metrics arrive up to a drain interval
// late), and at Close. Rows fit 80 columns.
type tableEncoder struct {
	loc      *time.Location
	color    bool
	buf      []byte
	rows     map[rowKey]*row
	newest   map[uint16]int64 // device → newest window start seen
	devs     map[int]record.Device
	printed  int
	interval int64
	// since drops windows that started before the output did: the
	// buffers' history at the first drain, and the first, partly observed
	// window (it would print as a half-empty row), like dmon starting from
	// now.
	since int64
	// printed is each device's newest printed window: a summary arriving
	// for it later (a late buffered metric) cannot be added to a row on
	// screen, and must not print a second, half-empty row for that time.
	printedTo map[uint16]int64
	// cols is the metrics each device's last printed row had of its own
	// (before held slow-query values filled it in). At the end (Flush)
	// the newest window is usually cut short by the stop: when it lacks
	// one of them it is partly observed and is not printed, as the first
	// window is not.
	cols map[uint16]map[catalog.MetricID]bool
	// simulated is set once a simulated device is seen: the header then
	// says so, so that nobody takes made-up numbers for a GPU's.
	simulated bool
	// held is each device's last summary of slow-query metrics, shown
	// again in windows where the 1 s query took no sample.
	held map[uint16]map[catalog.MetricID]record.Summary
	// cat tells slow-query metrics from the others.
	cat *catalog.Catalog
}

type rowKey struct {
	start int64
	dev   uint16
}

type row struct {
	vals map[catalog.MetricID]record.Summary
}

// tableHeaderEvery repeats the header like dmon does.
const tableHeaderEvery = 25

// tableSimulated precedes the header when the GPUs are simulated.
const tableSimulated = "# SIMULATED GPUs (no NVIDIA driver): made-up numbers, not measurements\n"

// Column layout; the throttle column takes what is left of 80.
const tableRowFormat = "%-8s %3s %9s %7s %7s %4s %4s %5s %5s %6s "

var tableHeader = fmt.Sprintf(tableRowFormat, "#time", "gpu", "pwrW/max", "gpuC/mx", "memC/mx", "sm%", "mem%",
	"smclk", "mclk", "fbMiB") + "throttle\n"

func newTableEncoder(loc *time.Location, color bool, cat *catalog.Catalog) *tableEncoder {
	if loc == nil {
		loc = time.Local
	}
	if cat == nil {
		cat = catalog.Default()
	}
	return &tableEncoder{loc: loc, color: color, cat: cat, rows: map[rowKey]*row{}, newest: map[uint16]int64{},
		devs: map[int]record.Device{}, since: time.Now().UnixNano(), printedTo: map[uint16]int64{}, cols: map[uint16]map[catalog.MetricID]bool{}, held: map[uint16]map[catalog.MetricID]record.Summary{}}
}

func (e *tableEncoder) Encode(b *record.Batch) {
	for _, d := range b.Devices {
		e.devs[d.Index] = d
		e.simulated = e.simulated || d.Simulated
	}
	for _, s := range b.Summaries {
		e.interval = s.IntervalNS
		if s.StartNS < e.since {
			continue
		}
		if p, ok := e.printedTo[s.Device]; ok && s.StartNS <= p {
			continue
		}
		k := rowKey{s.StartNS, s.Device}
		r := e.rows[k]
		if r == nil {
			r = &row{vals: map[catalog.MetricID]record.Summary{}}
			e.rows[k] = r
		}
		r.vals[s.Metric] = s
		if s.StartNS > e.newest[s.Device] {
			e.newest[s.Device] = s.StartNS
		}
	}
	e.print(false)
}

// Flush prints every pending row.
func (e *tableEncoder) Flush() { e.print(true) }

func (e *tableEncoder) print(all bool) {
	// One watermark for all devices keeps a window's rows together.
	watermark := int64(math.MaxInt64)
	for _, n := range e.newest {
		watermark = min(watermark, n)
	}
	var ready []rowKey
	for k := range e.rows {
		if all || k.start+2*e.interval <= watermark {
			ready = append(ready, k)
		}
	}
	slices.SortFunc(ready, func(a, b rowKey) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.dev, b.dev)) })
	for _, k := range ready {
		if all && k.start == e.newest[k.dev] && e.partial(k.dev, e.rows[k]) {
			delete(e.rows, k)
			continue
		}
		if e.printed%tableHeaderEvery == 0 {
			if e.simulated {
				e.buf = append(e.buf, tableSimulated...)
			}
			e.buf = append(e.buf, tableHeader...)
		}
		e.printed++
		e.printedTo[k.dev] = max(e.printedTo[k.dev], k.start)
		cols := map[catalog.MetricID]bool{}
		for id := range e.rows[k].vals {
			cols[id] = true
		}
		e.cols[k.dev] = cols
		e.hold(k.dev, e.rows[k])
		e.buf = e.appendRow(e.buf, k, e.rows[k])
		delete(e.rows, k)
	}
}

// partial reports whether r lacks a metric that device dev's last printed
// row had of its own (slow-query metrics aside: those are held over).
func (e *tableEncoder) partial(dev uint16, r *row) bool {
	for id := range e.cols[dev] {
		if _, ok := r.vals[id]; !ok && !e.slow(id) {
			return true
		}
	}
	return false
}

// slow reports whether id is a slow-query metric (read once a second,
// held over in the windows between).
func (e *tableEncoder) slow(id catalog.MetricID) bool {
	m, ok := e.cat.Get(id)
	return ok && m.Src.Kind == catalog.FromQuery
}

func (e *tableEncoder) appendRow(b []byte, k rowKey, r *row) []byte {
	get := func(id catalog.MetricID) (record.Summary, bool) { s, ok := r.vals[id]; return s, ok }
	num := func(id catalog.MetricID, width int, max bool) string {
		s, ok := get(id)
		if !ok {
			return fmt.Sprintf("%*s", width, "-")
		}
		if !max {
			return fmt.Sprintf("%*.0f", width, s.Mean)
		}
		return fmt.Sprintf("%*s", width, fmt.Sprintf("%.0f/%.0f", s.Mean, s.Max))
	}
	dev := e.devs[int(k.dev)]
	gpuTemp := num(catalog.MetricTempGPU, 7, true)
	if s, ok := get(catalog.MetricTempGPU); ok && e.color {
		warn := dev.SlowdownTempC
		if warn == 0 {
			warn = catalog.GenericGPUTempWarnC
		}
		if s.Max >= warn {
			gpuTemp = "\x1b[31m" + gpuTemp + "\x1b[0m"
		}
	}
	power := "-"
	if s, ok := get(catalog.MetricPowerDraw); ok {
		power = fmt.Sprintf("%.0f/%.0f", s.Mean, s.Max)
	}
	throttle := "-"
	if s, ok := get(catalog.MetricClocksEventReasons); ok {
		throttle = shortReasons(uint64(s.Last) &^ catalog.ReasonGPUIdle)
	}
	line := fmt.Sprintf(tableRowFormat,
		time.Unix(0, k.start).In(e.loc).Format("15:04:05"), fmt.Sprint(k.dev), power, gpuTemp,
		num(catalog.MetricTempMemory, 7, true), num(catalog.MetricUtilGPU, 4, false), num(catalog.MetricUtilMemory, 4, false),
		num(catalog.MetricClockSM, 5, false), num(catalog.MetricClockMemory, 5, false), memUsed(r))
	// Fit 80 columns: the throttle column takes what is left.
	visible := len(line)
	if strings.Contains(line, "\x1b[") {
		visible -= len("\x1b[31m\x1b[0m")
	}
	if room := 80 - visible; len(throttle) > room {
		throttle = throttle[:max(room-1, 0)] + "+"
	}
	b = append(b, line...)
	b = append(b, throttle...)
	return append(b, '\n')
}

// hold fills r's missing slow-query metrics from the device's last ones and
// remembers r's.
func (e *tableEncoder) hold(dev uint16, r *row) {
	h := e.held[dev]
	if h == nil {
		h = map[catalog.MetricID]record.Summary{}
		e.held[dev] = h
	}
	for id, s := range h {
		if _, ok := r.vals[id]; !ok {
			r.vals[id] = s
		}
	}
	for id, s := range r.vals {
		if e.slow(id) {
			h[id] = s
		}
	}
}

// shortReasons renders a clock event reason mask compactly for the table
// ("pwrcap+swthm"), "none" when empty.
func shortReasons(mask uint64) string {
	short := []struct {
		bit  uint64
		name string
	}{{catalog.ReasonAppClocksSetting, "app"}, {catalog.ReasonSWPowerCap, "pwrcap"}, {catalog.ReasonHWSlowdown, "hwslow"},
		{catalog.ReasonSyncBoost, "sync"}, {catalog.ReasonSWThermalSlowdown, "swthm"}, {catalog.ReasonHWThermalSlowdown, "hwthm"},
		{catalog.ReasonHWPowerBrake, "pbrake"}, {catalog.ReasonDisplayClocks, "disp"}}
	var parts []string
	for _, r := range short {
		if mask&r.bit != 0 {
			parts = append(parts, r.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

func memUsed(r *row) string {
	s, ok := r.vals[catalog.MetricMemoryUsed]
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.0f", math.Round(s.Mean))
}

func (e *tableEncoder) Bytes() []byte { return e.buf }
func (e *tableEncoder) Reset()        { e.buf = e.buf[:0] }
