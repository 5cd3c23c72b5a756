package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// unsupportedHere reports whether err means "this runtime cannot", not a
// defect: not supported, or no permission.
func unsupportedHere(err error) bool {
	return errors.Is(err, sampler.ErrNotSupported) || errors.Is(err, sampler.ErrNoPermission)
}

// checkProcesses lists the device's processes twice through the backend's
// ProcessSource: the second poll passes the first's newest utilization
// timestamp as its cursor, and must return no utilization sample at or
// before it (drained once). wantPID, when non-zero, is a process that
// should be listed (the load); not finding it is noted, not failed: in a
// container without the host PID namespace the PIDs differ.
func checkProcesses(r *report, d sampler.DeviceSource, gpu int, phase string, wantPID int) {
	ps, ok := d.(sampler.ProcessSource)
	if !ok {
		r.Unsupported = append(r.Unsupported, fmt.Sprintf("gpu%d processes: backend cannot list processes", gpu))
		return
	}
	q := sampler.ProcessQuery{Cmdline: true, CmdlineMax: 64}
	procs, err := ps.Processes(q, nil)
	switch {
	case unsupportedHere(err):
		r.Unsupported = append(r.Unsupported, fmt.Sprintf("gpu%d processes (%s): %v", gpu, phase, err))
		return
	case err != nil:
		r.Failures = append(r.Failures, fmt.Sprintf("gpu%d processes (%s): %v", gpu, phase, err))
		return
	}
	var cursor uint64
	var desc []string
	found := false
	for _, p := range procs {
		found = found || int(p.PID) == wantPID
		util := "no utilization sample"
		if p.HasUtil {
			cursor = max(cursor, p.TimeUS)
			util = fmt.Sprintf("sm %.0f%% mem %.0f%% enc %.0f%% dec %.0f%%", p.SMUtil, p.MemUtil, p.EncUtil, p.DecUtil)
		}
		desc = append(desc, fmt.Sprintf("pid %d %q type %s used %d MiB, %s", p.PID, p.Name, p.Type, p.UsedMemoryMiB, util))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("gpu%d processes (%s): %d: %s", gpu, phase, len(procs), strings.Join(desc, "; ")))
	if wantPID != 0 && !found {
		r.Notes = append(r.Notes, fmt.Sprintf("gpu%d processes (%s): load pid %d not listed (container without the host PID namespace, or another GPU)", gpu, phase, wantPID))
	}
	if cursor == 0 {
		return
	}
	q.Cursor = cursor
	again, err := ps.Processes(q, nil)
	if err != nil && !unsupportedHere(err) {
		r.Failures = append(r.Failures, fmt.Sprintf("gpu%d processes (%s, second poll): %v", gpu, phase, err))
	}
	for _, p := range again {
		if p.HasUtil && p.TimeUS <= cursor {
			r.Failures = append(r.Failures, fmt.Sprintf("gpu%d processes (%s): pid %d utilization sample %d returned again past cursor %d", gpu, phase, p.PID, p.TimeUS, cursor))
		}
	}
}

// checkEvents registers for the device's driver events and waits for a
// short while: registration refused (not supported, no permission, MIG)
// is "unsupported here"; any other error is a failure. Events seen are
// noted (normally none).
func checkEvents(r *report, d sampler.DeviceSource, gpu int, wait time.Duration) {
	w, ok := d.(sampler.EventWatcher)
	if !ok {
		r.Unsupported = append(r.Unsupported, fmt.Sprintf("gpu%d events: backend cannot watch driver events", gpu))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var events []string
	err := w.WatchEvents(ctx, func(ev record.Event) { events = append(events, string(ev.Kind)+": "+ev.Message) })
	switch {
	case ctx.Err() != nil && (err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		r.Notes = append(r.Notes, fmt.Sprintf("gpu%d events: registered; %d in %v %v", gpu, len(events), wait, events))
	case unsupportedHere(err):
		r.Unsupported = append(r.Unsupported, fmt.Sprintf("gpu%d events: %v", gpu, err))
	case err != nil:
		r.Failures = append(r.Failures, fmt.Sprintf("gpu%d events: %v", gpu, err))
	default:
		r.Failures = append(r.Failures, fmt.Sprintf("gpu%d events: watch returned before its context ended without an error", gpu))
	}
}
