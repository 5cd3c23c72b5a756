package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// FindingNUMA names the NUMA-placement diagnosis: the benchmarked process
// ran on CPUs none of which is close to the GPU.
const FindingNUMA = "numa_placement"

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
		if cpus, err := processCPUs(pid); err == nil && len(cpus) > 0 {
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

// cpuList writes CPU numbers as ranges: "0-7,16-23".
func cpuList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
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
			if len(near) == 0 || slices.ContainsFunc(ex.cpus, func(c int) bool { _, ok := slices.BinarySearch(near, c); return ok }) {
				continue
			}
			if i, ok := byDev[d.Index]; ok {
				out[i].Runs = append(out[i].Runs, ex.run+1)
				out[i].EndNS = ex.end.UnixNano()
				continue
			}
			pc, gc := cpuList(ex.cpus), cpuList(near)
			byDev[d.Index] = len(out)
			out = append(out, Diagnosis{Finding: FindingNUMA, Kind: "NUMA placement", Device: d.Index,
				StartNS: ex.start.UnixNano(), EndNS: ex.end.UnixNano(),
				Message: fmt.Sprintf("the command ran on CPUs %s, none of them close to GPU %d (its CPUs: %s): every copy and "+
					"kernel launch crosses the socket interconnect. Bind it to the GPU's CPUs, as the field guide does: "+
					"CUDA_VISIBLE_DEVICES=%d numactl -C %s CMD (or taskset -c %s CMD)", pc, d.Index, gc, d.Index, gc, gc),
				Evidence: map[string]string{"process_cpus": pc, "gpu_cpus": gc}, Runs: []int{ex.run + 1}})
		}
	}
	return out
}
