//go:build cgo

package nvml

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/sampler"
)

// procState is a device's per-process polling state, owned by the loop
// goroutine.
type procState struct {
	// utilUnsupported: nvmlDeviceGetProcessUtilization answered
	// NOT_SUPPORTED (MIG instances, some boards); computeUnsupported and
	// graphicsUnsupported likewise for the running-process lists.
	utilUnsupported, computeUnsupported, graphicsUnsupported bool
	// names caches process names by PID for the processes of the previous
	// poll (one SystemGetProcessName per new PID, not per poll).
	names, nextNames map[uint32]string
	// byPID indexes the poll's result while merging.
	byPID map[uint32]int
}

// hasAny reports whether the library exports one of the symbols.
func (s *Source) hasAny(syms ...string) bool {
	for _, sym := range syms {
		if s.has[sym] {
			return true
		}
	}
	return false
}

// Processes lists the processes on the device (sampler.ProcessSource):
// compute processes (nvmlDeviceGetComputeRunningProcesses, whichever
// version the library has: go-nvml binds the newest) and graphics
// processes with their used memory, merged by PID with the newest
// per-process utilization sample after q.Cursor
// (nvmlDeviceGetProcessUtilization, not available under MIG). Names come
// from nvmlSystemGetProcessName, else /proc/PID/comm; command lines from
// /proc/PID/cmdline when asked. Each part the device does not support is
// asked once and then skipped; when no part is supported the call answers
// sampler.ErrNotSupported.
func (d *device) Processes(q sampler.ProcessQuery, dst []sampler.Process) ([]sampler.Process, error) {
	if d.dev == nil {
		return dst, d.noHandle()
	}
	ps := &d.procs
	s := d.src
	if ps.byPID == nil {
		ps.byPID = make(map[uint32]int)
		ps.names, ps.nextNames = make(map[uint32]string), make(map[uint32]string)
		ps.computeUnsupported = !s.hasAny("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetComputeRunningProcesses")
		ps.graphicsUnsupported = !s.hasAny("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses")
		ps.utilUnsupported = !s.has["nvmlDeviceGetProcessUtilization"] || d.mig
	}
	if ps.computeUnsupported && ps.graphicsUnsupported && ps.utilUnsupported {
		return dst, notSupported("list processes")
	}
	clear(ps.byPID)
	base := len(dst)
	add := func(pid uint32) *sampler.Process {
		if i, ok := ps.byPID[pid]; ok {
			return &dst[i]
		}
		ps.byPID[pid] = len(dst)
		dst = append(dst, sampler.Process{PID: pid})
		return &dst[len(dst)-1]
	}
	list := func(typ string, unsupported *bool, get func() ([]nvml.ProcessInfo, nvml.Return), op string) error {
		if *unsupported {
			return nil
		}
		start := now()
		infos, ret := get()
		d.account(op, 1, start)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
			*unsupported = true
			return nil
		default:
			return newError(op, ret)
		}
		for _, in := range infos {
			p := add(in.Pid)
			switch p.Type {
			case "":
				p.Type = typ
			case typ:
			default:
				p.Type = "C+G"
			}
			// NVML_VALUE_NOT_AVAILABLE (all ones) when the driver cannot
			// tell, e.g. without privilege or under some virtualization.
			if in.UsedGpuMemory != ^uint64(0) {
				p.UsedMemoryMiB += in.UsedGpuMemory >> 20
				p.HasMemory = true
			}
		}
		return nil
	}
	if err := list("C", &ps.computeUnsupported, d.dev.GetComputeRunningProcesses, "get compute running processes"); err != nil {
		return dst[:base], err
	}
	if err := list("G", &ps.graphicsUnsupported, d.dev.GetGraphicsRunningProcesses, "get graphics running processes"); err != nil {
		return dst[:base], err
	}
	// No process listed: no utilization to attribute, and one call less
	// per poll (unless the lists are unsupported and this is all there is).
	idle := len(dst) == base && !(ps.computeUnsupported && ps.graphicsUnsupported)
	if !ps.utilUnsupported && !idle {
		start := now()
		samples, ret := d.dev.GetProcessUtilization(q.Cursor)
		calls := 2
		if len(samples) == 0 {
			calls = 1 // go-nvml asks for the size first and stops there
		}
		d.account("GetProcessUtilization", calls, start)
		switch ret {
		case nvml.SUCCESS, nvml.ERROR_NOT_FOUND, nvml.ERROR_NO_DATA:
		case nvml.ERROR_INSUFFICIENT_SIZE:
			// go-nvml's size query said none (or the list grew between its
			// two calls): nothing this time, the cursor stays.
			samples = nil
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
			ps.utilUnsupported = true
		default:
			return dst[:base], newError("get process utilization", ret)
		}
		for _, u := range samples {
			if u.TimeStamp <= q.Cursor {
				continue // defensive: strictly newer than the cursor, once
			}
			p := add(u.Pid)
			if p.HasUtil && p.TimeUS >= u.TimeStamp {
				continue // keep each process's newest sample
			}
			p.HasUtil, p.TimeUS = true, u.TimeStamp
			p.SMUtil, p.MemUtil = float64(u.SmUtil), float64(u.MemUtil)
			p.EncUtil, p.DecUtil = float64(u.EncUtil), float64(u.DecUtil)
		}
	}
	if ps.computeUnsupported && ps.graphicsUnsupported && ps.utilUnsupported {
		return dst[:base], notSupported("list processes")
	}
	clear(ps.nextNames)
	for i := base; i < len(dst); i++ {
		p := &dst[i]
		name, ok := ps.names[p.PID]
		if !ok {
			name = d.processName(p.PID)
		}
		ps.nextNames[p.PID] = name
		p.Name = name
		if q.Cmdline {
			p.Cmdline = sampler.TruncateCmdline(procCmdline(p.PID, max(q.CmdlineMax, 1)), q.CmdlineMax)
		}
	}
	ps.names, ps.nextNames = ps.nextNames, ps.names
	return dst, nil
}

// processName asks the driver for a process's name, else /proc/PID/comm.
func (d *device) processName(pid uint32) string {
	if d.src.has["nvmlSystemGetProcessName"] {
		start := now()
		name, ret := d.src.lib.SystemGetProcessName(int(pid))
		d.account("SystemGetProcessName", 1, start)
		if ret == nvml.SUCCESS && name != "" {
			return name
		}
	}
	return procComm(pid)
}

var _ sampler.ProcessSource = (*device)(nil)
