package bench

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpusampler/gpusampler/record"
)

// Other processes on the GPUs. The engine polls each device's process list
// (record.EventProcess events, once a second). A process belongs to the
// benchmark when it is one of the commands the runner started or a
// descendant of this process (read from /proc while it runs); every other
// process shares the GPU and contaminates the measurement. NVML reports
// host PIDs: inside a container with its own PID namespace they do not
// match ours, and the benchmark's own processes are then reported as
// others too.

// procOwner tells the benchmark's processes from others. Safe for
// concurrent use.
type procOwner struct {
	self    int
	mu      sync.Mutex
	started map[int]bool
	known   map[int]bool // PID → ours, decided at first sight
	// parent returns a process's parent PID (0 when unknown); /proc by
	// default.
	parent func(pid int) int
}

func newProcOwner() *procOwner {
	return &procOwner{self: os.Getpid(), started: map[int]bool{}, known: map[int]bool{}, parent: procParent}
}

// Started records a command the runner started.
func (o *procOwner) Started(pid int) {
	o.mu.Lock()
	o.started[pid] = true
	o.known[pid] = true
	o.mu.Unlock()
}

// Ours reports whether pid is the benchmark's. The answer is decided at
// the first question and kept (a PID's ancestry is readable only while it
// lives).
func (o *procOwner) Ours(pid int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if v, ok := o.known[pid]; ok {
		return v
	}
	ours := false
	for p, n := pid, 0; p > 1 && n < 64; p, n = o.parent(p), n+1 {
		if p == o.self || o.started[p] {
			ours = true
			break
		}
	}
	o.known[pid] = ours
	return ours
}

// procParent reads the parent PID from /proc/PID/stat (0 when unreadable).
func procParent(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// foreignProc is one other process on one GPU, over the whole benchmark.
type foreignProc struct {
	dev, pid  int
	name      string
	memMiB    float64 // peak used memory; NaN-free: 0 when never known
	hasMem    bool
	smUtil    float64 // peak SM utilization, %
	hasUtil   bool
	during    []string // "the idle baseline", "run A3", in order
	firstSeen int64
}

// phase names the part of the benchmark at t: the idle baseline, a
// measured run ("run 3", "run A3" with two commands), or "" between them.
func phase(t, baseFrom, baseTo int64, execs []execution, names []string) string {
	if baseTo != 0 && t >= baseFrom && t <= baseTo {
		return "the idle baseline"
	}
	for _, ex := range execs {
		if t >= ex.start.UnixNano() && t <= ex.end.UnixNano() {
			return runPhase(ex, names)
		}
	}
	return ""
}

// runPhase names a measured run as phase does: "run 3", or "run A3" with
// two commands.
func runPhase(ex execution, names []string) string {
	if len(names) > 1 {
		return fmt.Sprintf("run %s%d", names[ex.cmd], ex.run+1)
	}
	return fmt.Sprintf("run %d", ex.run+1)
}

// foreignProcesses collects the process events of devices in devs between
// the baseline's start and the last run's end whose PID is not ours,
// grouped by device and PID.
func foreignProcesses(events []record.Event, devs map[int]bool, ours func(int) bool, from, to, baseFrom, baseTo int64,
	execs []execution, names []string) []foreignProc {
	byKey := map[[2]int]*foreignProc{}
	var out []*foreignProc
	for _, e := range events {
		if e.Kind != record.EventProcess || !devs[e.Device] || e.StartNS < from || e.StartNS > to {
			continue
		}
		var pid int
		var mem, sm float64
		var hasPID, hasMem, hasUtil bool
		for _, f := range e.Fields {
			switch f.Key {
			case record.ProcessFieldPID:
				pid, hasPID = int(f.Value), true
			case record.ProcessFieldUsedMemory:
				mem, hasMem = f.Value, true
			case record.ProcessFieldSMUtil:
				sm, hasUtil = f.Value, true
			}
		}
		if !hasPID || ours(pid) {
			continue
		}
		k := [2]int{e.Device, pid}
		p := byKey[k]
		if p == nil {
			p = &foreignProc{dev: e.Device, pid: pid, name: attr(e, record.ProcessAttrName), firstSeen: e.StartNS}
			byKey[k] = p
			out = append(out, p)
		}
		if hasMem {
			p.memMiB, p.hasMem = max(p.memMiB, mem), true
		}
		if hasUtil {
			p.smUtil, p.hasUtil = max(p.smUtil, sm), true
		}
		if ph := phase(e.StartNS, baseFrom, baseTo, execs, names); ph != "" && !slices.Contains(p.during, ph) {
			p.during = append(p.during, ph)
		}
	}
	res := make([]foreignProc, len(out))
	for i, p := range out {
		res[i] = *p
	}
	slices.SortStableFunc(res, func(a, b foreignProc) int {
		if a.dev != b.dev {
			return a.dev - b.dev
		}
		return a.pid - b.pid
	})
	return res
}

// mib formats a memory size ("900 MiB", "12 GiB").
func mib(v float64) string {
	if v >= 1024 {
		return strconv.FormatFloat(v/1024, 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " MiB"
}

// item is the process's hygiene value ("pid 1234 python3 (12.0 GiB)").
func (p *foreignProc) item() string {
	s := fmt.Sprintf("pid %d %s", p.pid, p.name)
	if p.hasMem {
		s += " (" + mib(p.memMiB) + ")"
	}
	return s
}

// warning says what the process did on which GPU and when.
func (p *foreignProc) warning() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d %s ", p.pid, p.name)
	if p.hasMem {
		fmt.Fprintf(&b, "used %s on GPU %d", mib(p.memMiB), p.dev)
	} else {
		fmt.Fprintf(&b, "was on GPU %d", p.dev)
	}
	if p.hasUtil && p.smUtil > 0 {
		fmt.Fprintf(&b, " (up to %.0f%% SM)", p.smUtil)
	}
	if len(p.during) > 0 {
		during := p.during
		more := 0
		if len(during) > 4 {
			during, more = during[:3], len(during)-3
		}
		b.WriteString(" during " + strings.Join(during, ", "))
		if more > 0 {
			fmt.Fprintf(&b, " and %d more", more)
		}
	}
	b.WriteString(": another process shares the GPU and contaminates the measurement")
	return b.String()
}
