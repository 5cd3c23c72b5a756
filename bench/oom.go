package bench

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// FindingFragmentation names the memory-fragmentation diagnosis: the
// command's stderr reports a failed GPU allocation while the GPU's memory
// was well below full.
const FindingFragmentation = "memory_fragmentation"

// FragmentationMaxUsedPct: an allocation that fails while less than this
// share of the GPU's memory is in use failed for want of a contiguous
// block, not for want of memory (the field guide's "enough memory, yet the
// allocation fails"). Above it, the GPU is simply full.
const FragmentationMaxUsedPct = 80

// fragmentationMinUsedMiB: a GPU with less memory in use than this holds
// none of the workload's buffers (a CUDA context alone takes a few hundred
// MiB): its out-of-memory error came from another GPU, or from the very
// first allocation, neither of which says anything about fragmentation.
const fragmentationMinUsedMiB = 1024

// oomPattern matches the CUDA runtime's and PyTorch's out-of-memory
// messages: "CUDA out of memory", "CUDA error: out of memory",
// "torch.OutOfMemoryError".
var oomPattern = regexp.MustCompile(`(?i)CUDA out of memory|CUDA error: out of memory|OutOfMemoryError`)

// oomRequest is PyTorch's "Tried to allocate 2.00 GiB"; oomGPU its "GPU 0
// has a total capacity of ...".
var (
	oomRequest = regexp.MustCompile(`Tried to allocate ([0-9.]+) ?([KMGT]i?B|bytes)`)
	oomGPU     = regexp.MustCompile(`GPU (\d+) has a total capacity`)
)

// oomEvent is the first out-of-memory line a command wrote to stderr.
type oomEvent struct {
	at   time.Time
	line string
	// requestMiB is the failed allocation's size (NaN when not stated);
	// gpu the CUDA device the message names (-1 when none).
	requestMiB float64
	gpu        int
}

// oomWatch scans a command's stderr, line by line as it is written, for
// the first out-of-memory message and notes when it came. Write may be
// called from the goroutine copying the command's stderr; first from any
// goroutine once the command has ended.
type oomWatch struct {
	mu      sync.Mutex
	now     func() time.Time
	partial []byte
	found   *oomEvent
}

func (w *oomWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.found != nil {
		return len(p), nil
	}
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(w.partial[:i])
		w.partial = w.partial[i+1:]
		if w.found != nil {
			w.partial = nil
			return len(p), nil
		}
	}
	if len(w.partial) > 64<<10 {
		// a very long line without a newline: judge what is there
		w.line(w.partial)
		w.partial = w.partial[:0]
	}
	return len(p), nil
}

// line checks one line (the lock held).
func (w *oomWatch) line(b []byte) {
	if !oomPattern.Match(b) {
		return
	}
	now := time.Now
	if w.now != nil {
		now = w.now
	}
	ev := parseOOM(string(b))
	ev.at = now()
	w.found = &ev
}

// first returns the out-of-memory message seen, judging an unterminated
// last line too; nil when none.
func (w *oomWatch) first() *oomEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.found == nil && len(w.partial) > 0 {
		w.line(w.partial)
		w.partial = nil
	}
	return w.found
}

// parseOOM reads the request size and device from an out-of-memory line.
func parseOOM(line string) oomEvent {
	ev := oomEvent{line: line, requestMiB: math.NaN(), gpu: -1}
	if len(ev.line) > 300 {
		ev.line = ev.line[:300] + "…"
	}
	if m := oomRequest.FindStringSubmatch(line); m != nil {
		if v, err := strconv.ParseFloat(m[1], 64); err == nil {
			scale := map[string]float64{"bytes": 1.0 / (1 << 20), "KiB": 1.0 / 1024, "KB": 1.0 / 1024, "MiB": 1, "MB": 1,
				"GiB": 1024, "GB": 1024, "TiB": 1 << 20, "TB": 1 << 20}[m[2]]
			if scale > 0 {
				ev.requestMiB = v * scale
			}
		}
	}
	if m := oomGPU.FindStringSubmatch(line); m != nil {
		ev.gpu, _ = strconv.Atoi(m[1])
	}
	return ev
}

// fragmentation returns one diagnosis per device for the runs of command
// ci whose stderr reported an out-of-memory error while the device's memory
// was below FragmentationMaxUsedPct of its total yet held some of the
// workload's (fragmentationMinUsedMiB) (and, when the message
// states the request's size, while the request would have fit in the free
// memory). Memory use is the highest reading from a second before the
// message to half a second after it (slow state is read once a second).
// When the message names a GPU (PyTorch's "GPU 0 has a total capacity")
// only that index is judged; CUDA_VISIBLE_DEVICES may renumber, so a name
// that matches no sampled device judges them all.
func fragmentation(execs []execution, ci int, devs []record.Device, windows map[int]*deviceWindow) []Diagnosis {
	var out []Diagnosis
	byDev := map[int]int{} // device → index in out
	for _, ex := range execs {
		if ex.cmd != ci || ex.oom == nil {
			continue
		}
		ev := ex.oom
		named := slices.ContainsFunc(devs, func(d record.Device) bool { return d.Index == ev.gpu })
		for _, d := range devs {
			if named && d.Index != ev.gpu {
				continue
			}
			w := windows[d.Index]
			t := ev.at.UnixNano()
			used := pick(w.samples, catalog.MetricMemoryUsed).withPrior(t-int64(time.Second), t+int64(500*time.Millisecond)).max()
			total := pick(w.samples, catalog.MetricMemoryTotal).withPrior(t-int64(time.Second), t).max()
			if math.IsNaN(total) || total <= 0 {
				total = float64(d.MemoryTotalMiB)
			}
			if math.IsNaN(used) || total <= 0 || used < fragmentationMinUsedMiB {
				continue // nothing to judge by, or none of the workload's memory
			}
			pct, free := 100*used/total, total-used
			if pct >= FragmentationMaxUsedPct || (!math.IsNaN(ev.requestMiB) && ev.requestMiB > free) {
				continue // memory really was short
			}
			if i, ok := byDev[d.Index]; ok {
				out[i].Runs = append(out[i].Runs, ex.run+1)
				out[i].EndNS = t
				continue
			}
			evd := map[string]string{"memory_used_mib": ftoa0(used), "memory_total_mib": ftoa0(total),
				"memory_used_pct": strconv.FormatFloat(math.Round(pct*10)/10, 'f', -1, 64), "memory_free_mib": ftoa0(free),
				"threshold_pct": strconv.Itoa(FragmentationMaxUsedPct), "stderr": ev.line}
			if !math.IsNaN(ev.requestMiB) {
				evd["requested_mib"] = ftoa0(ev.requestMiB)
			}
			byDev[d.Index] = len(out)
			out = append(out, Diagnosis{Finding: FindingFragmentation, Kind: "memory fragmentation", Device: d.Index, StartNS: t, EndNS: t,
				Message: fmt.Sprintf("an allocation failed (out of memory) with %.0f%% of the GPU's memory in use: "+
					"enough memory, yet no block large enough (fragmentation). Check with `nvidia-smi -q -d MEMORY`; "+
					"optimize the allocation strategy (allocate the largest buffers first and reuse them; PyTorch: "+
					"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), or size the batch dynamically: halve it on an "+
					"out-of-memory error and grow it back while it fits", pct),
				Evidence: evd, Runs: []int{ex.run + 1}})
		}
	}
	return out
}

func ftoa0(v float64) string { return strconv.FormatFloat(math.Round(v), 'f', -1, 64) }
