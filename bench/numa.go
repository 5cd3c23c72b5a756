package bench

import (
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/internal/diagnose"
	"github.com/gpusampler/gpusampler/record"
)

// FindingNUMA names the NUMA-placement diagnosis: the benchmarked process
// ran on CPUs none of which is close to the GPU (the same name as the live
// finding of `run --diagnose`).
const FindingNUMA = diagnose.FindingNUMA

// affinityPoll is how often a running command's CPU affinity is read: a
// launcher such as taskset or numactl sets it just before it executes the
// program, so the last reading is the program's.
const affinityPoll = 25 * time.Millisecond

// watchAffinity reads pid's CPU affinity until the returned function is
// called, which returns the last successful reading (nil when none).
func watchAffinity(pid int) func() []int {
	var mu sync.Mutex
	var last []int
	read := func() {
		if cpus, err := diagnose.ProcessCPUs(pid); err == nil && len(cpus) > 0 {
			mu.Lock()
			last = cpus
			mu.Unlock()
		}
	}
	read()
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(affinityPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() []int {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// numaPlacement returns one diagnosis per device for the runs of command
// ci whose process could run only on CPUs outside the device's CPU
// affinity (gpuCPUs, from the backend): every copy and kernel launch then
// crosses the socket interconnect. A process allowed on some of the GPU's
// CPUs is not flagged (the scheduler may place it well); devices or runs
// whose affinity is unknown are skipped.
func numaPlacement(execs []execution, ci int, devs []record.Device, gpuCPUs map[int][]int) []Diagnosis {
	var out []Diagnosis
	byDev := map[int]int{}
	for _, ex := range execs {
		if ex.cmd != ci || len(ex.cpus) == 0 {
			continue
		}
		for _, d := range devs {
			near := gpuCPUs[d.Index]
			if !diagnose.PlacedAway(ex.cpus, near) {
				continue
			}
			if i, ok := byDev[d.Index]; ok {
				out[i].Runs = append(out[i].Runs, ex.run+1)
				out[i].EndNS = ex.end.UnixNano()
				continue
			}
			pc, gc := diagnose.CPUList(ex.cpus), diagnose.CPUList(near)
			byDev[d.Index] = len(out)
			out = append(out, Diagnosis{Finding: FindingNUMA, Kind: "NUMA placement", Device: d.Index,
				StartNS: ex.start.UnixNano(), EndNS: ex.end.UnixNano(),
				Message:  diagnose.NUMAMessage("the command ran", ex.cpus, d.Index, near),
				Evidence: map[string]string{"process_cpus": pc, "gpu_cpus": gc}, Runs: []int{ex.run + 1}})
		}
	}
	return out
}

// commandDevices returns the devices on which a process of command ci was
// seen while one of its executions ran: a process event (the engine's
// process poll) of a PID that is the benchmark's (ours). It is nil when no
// such process was seen: process lists unavailable, PIDs that do not match
// ours (a container's PID namespace), simulated GPUs (their processes are
// made up), or runs shorter than a poll. The command's own diagnoses
// (fragmentation, NUMA placement) judge only these devices when known, so
// that a job on GPU 1 is not said to be misplaced for GPU 0, nor
// fragmented by another user's memory on it; else every sampled device.
func commandDevices(events []record.Event, ours func(int) bool, execs []execution, ci int) map[int]bool {
	var used map[int]bool
	for _, e := range events {
		if e.Kind != record.EventProcess {
			continue
		}
		pid := -1
		for _, f := range e.Fields {
			if f.Key == record.ProcessFieldPID {
				pid = int(f.Value)
			}
		}
		if pid < 0 || !ours(pid) {
			continue
		}
		for _, ex := range execs {
			if ex.cmd == ci && e.StartNS >= ex.start.UnixNano() && e.StartNS <= ex.end.UnixNano() {
				if used == nil {
					used = map[int]bool{}
				}
				used[e.Device] = true
				break
			}
		}
	}
	return used
}
