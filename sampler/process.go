package sampler

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gpusampler/gpusampler/record"
)

// Process defaults and limits.
const (
	// DefaultProcessInterval: process queries cost milliseconds per GPU
	// (two lists, and utilization while processes run); every 5 s keeps
	// the default config within 10 NVML calls per GPU per second.
	DefaultProcessInterval = 5 * time.Second
	// MinProcessInterval bounds Config.ProcessInterval: process queries
	// run at most once per second.
	MinProcessInterval = time.Second
	// DefaultCmdlineMax is how many bytes of a command line are kept when
	// command lines are enabled.
	DefaultCmdlineMax = 128
)

// Process is one process using a device, as a ProcessSource reports it.
type Process struct {
	// PID is the host PID (NVML reports host PIDs; inside a container the
	// name resolves only with the host PID namespace).
	PID uint32
	// Name is the process name (the driver's, else /proc/PID/comm); empty
	// when unknown.
	Name string
	// Type is "C" (compute), "G" (graphics) or "C+G", as nvidia-smi shows
	// it; empty when the process appeared only in the utilization samples.
	Type string
	// Cmdline is the command line (arguments joined by spaces), filled only
	// when ProcessQuery.Cmdline asks for it, at most ProcessQuery.CmdlineMax
	// bytes.
	Cmdline string
	// UsedMemoryMiB is the device memory the process holds; valid when
	// HasMemory (the driver may not know it, e.g. without privilege).
	UsedMemoryMiB uint64
	HasMemory     bool
	// SMUtil, MemUtil, EncUtil and DecUtil are percentages of the
	// process's newest utilization sample after the cursor; valid when
	// HasUtil.
	SMUtil, MemUtil, EncUtil, DecUtil float64
	HasUtil                           bool
	// TimeUS is the utilization sample's raw driver timestamp (the drain
	// cursor, like RawSample.TimeUS); 0 when !HasUtil.
	TimeUS uint64
}

// ProcessQuery asks a ProcessSource for the processes on its device.
type ProcessQuery struct {
	// Cursor is the newest utilization timestamp already delivered (raw
	// driver µs, 0 for "all"): utilization samples at or before it are not
	// returned again.
	Cursor uint64
	// Cmdline asks for command lines (opt-in: they can hold secrets),
	// truncated to CmdlineMax bytes.
	Cmdline    bool
	CmdlineMax int
}

// ProcessSource is implemented by device sources that list the processes
// using their device. It is called from the device's loop goroutine, like
// the DeviceSource methods, at most every Config.ProcessInterval.
type ProcessSource interface {
	// Processes appends one Process per process on the device to dst and
	// returns the extended slice. Utilization is drained with q.Cursor:
	// each utilization sample is delivered once. A device that can list
	// processes but not their utilization (MIG) returns them without
	// HasUtil. ErrNotSupported for the whole call means the device can give
	// neither; the engine then stops asking.
	Processes(q ProcessQuery, dst []Process) ([]Process, error)
}

// processEvent converts p into a record.EventProcess event at nowNS. fields and
// attrs are scratch slices reused between calls (the event log clones
// them on Emit).
func processEvent(dev int, p *Process, nowNS int64, fields []record.Field, attrs []record.Attr) record.Event {
	fields = append(fields[:0], record.Field{Key: record.ProcessFieldPID, Value: float64(p.PID), Int: true})
	if p.HasMemory {
		fields = append(fields, record.Field{Key: record.ProcessFieldUsedMemory, Value: float64(p.UsedMemoryMiB), Int: true})
	}
	if p.HasUtil {
		fields = append(fields,
			record.Field{Key: record.ProcessFieldSMUtil, Value: p.SMUtil, Int: true},
			record.Field{Key: record.ProcessFieldMemUtil, Value: p.MemUtil, Int: true},
			record.Field{Key: record.ProcessFieldEncUtil, Value: p.EncUtil, Int: true},
			record.Field{Key: record.ProcessFieldDecUtil, Value: p.DecUtil, Int: true})
	}
	name := p.Name
	if name == "" {
		name = "pid" + strconv.FormatUint(uint64(p.PID), 10)
	}
	typ := p.Type
	if typ == "" {
		typ = "unknown"
	}
	attrs = append(attrs[:0], record.Attr{Key: record.ProcessAttrName, Value: name}, record.Attr{Key: record.ProcessAttrType, Value: typ})
	if p.Cmdline != "" {
		attrs = append(attrs, record.Attr{Key: record.ProcessAttrCmdline, Value: p.Cmdline})
	}
	return record.Event{Kind: record.EventProcess, Device: dev, StartNS: nowNS, EndNS: nowNS, Attrs: attrs, Fields: fields}
}

// TruncateCmdline cuts s to at most max bytes without splitting a UTF-8
// sequence. max ≤ 0 means DefaultCmdlineMax.
func TruncateCmdline(s string, max int) string {
	if max <= 0 {
		max = DefaultCmdlineMax
	}
	if len(s) <= max {
		return s
	}
	s = s[:max]
	// Drop a rune cut in half (at most UTFMax-1 trailing bytes).
	for i := 0; i < utf8.UTFMax-1 && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
			break
		}
		s = s[:len(s)-1]
	}
	return s
}
