//go:build cgo

package nvml

import (
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// fakeOtherPIDs returns the processes the fake reports besides the test's
// own (whose name the fake does not know, so it comes from /proc), as the
// FAKENVML_PROCS list and as numbers. They must not exist on this machine
// (the test asserts they have no /proc entry), so they are taken at or
// above the kernel's PID_MAX_LIMIT (4194304 on 64-bit Linux, the most
// kernel.pid_max can be), or above pid_max if that is higher, skipping any
// that /proc knows all the same.
func fakeOtherPIDs(t *testing.T) (string, []uint32) {
	first := uint64(1 << 22)
	if b, err := os.ReadFile("/proc/sys/kernel/pid_max"); err == nil {
		if m, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil {
			first = max(first, m)
		}
	}
	var pids []uint32
	var list []string
	for p := first; len(pids) < 2 && p < first+1000; p++ {
		if _, err := os.Stat("/proc/" + strconv.FormatUint(p, 10)); err == nil {
			continue
		}
		pids = append(pids, uint32(p))
		list = append(list, strconv.FormatUint(p, 10))
	}
	if len(pids) < 2 {
		t.Fatalf("no two absent PIDs from %d on", first)
	}
	return strings.Join(list, ","), pids
}

func TestFakeDriverProcesses(t *testing.T) {
	// The child's own PID is only known in the child: it appends itself.
	runScenario(t, "processes", false, "FAKENVML_DEVICES=1")
}

func TestFakeDriverProcessesOldDriver(t *testing.T) {
	runScenario(t, "processes", true, "FAKENVML_DEVICES=1", "FAKENVML_VERSION=12.535.183.01")
}

// TestFakeDriverNoProcesses: with no process on the GPU, a poll lists the
// compute and graphics processes and does not ask for per-process
// utilization (one NVML call less per poll).
func TestFakeDriverNoProcesses(t *testing.T) {
	runScenario(t, "processes-none", false)
}

func childNoProcesses(t *testing.T, src *Source) {
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]int{}
	src.opts.CallHook = func(op string, _ time.Duration) { ops[op]++ }
	for range 3 {
		procs, err := devs[0].(sampler.ProcessSource).Processes(sampler.ProcessQuery{}, nil)
		if err != nil || len(procs) != 0 {
			t.Fatalf("processes %+v, %v; want none", procs, err)
		}
	}
	want := map[string]int{"get compute running processes": 3, "get graphics running processes": 3}
	if !maps.Equal(ops, want) {
		t.Errorf("calls %v, want %v", ops, want)
	}
}

func TestFakeDriverProcessesNotSupported(t *testing.T) {
	others, _ := fakeOtherPIDs(t)
	runScenario(t, "processes-ns", false, "FAKENVML_PROCS="+others)
}

// fakeProcUtil mirrors testdata/fakenvml.c: process i's utilization
// sample at timestamp ts.
func fakeProcUtil(i int, ts uint64) (sm, mem, enc, dec float64) {
	k := ts / 50000
	return float64((k*7 + uint64(i)) % 101), float64(k % 50), float64(i), 1
}

func childProcesses(t *testing.T, src *Source) {
	self := os.Getpid()
	// The library reads FAKENVML_PROCS at its first process call.
	others, pids := fakeOtherPIDs(t)
	os.Setenv("FAKENVML_PROCS", others+","+strconv.Itoa(self))
	pids = append(pids, uint32(self))
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0].(*device)
	comm := procComm(uint32(self))
	if comm == "" {
		t.Fatal("cannot read /proc/self/comm")
	}
	// Drain at random intervals; every utilization sample is newer than
	// the cursor, each (pid, timestamp) at most once, each value right.
	var cursor uint64
	seen := map[[2]uint64]bool{}
	var buf []sampler.Process
	utilPolls := 0
	for range 40 {
		buf, err = d.Processes(sampler.ProcessQuery{Cursor: cursor, Cmdline: true, CmdlineMax: 24}, buf[:0])
		if err != nil {
			t.Fatal(err)
		}
		if len(buf) != 3 {
			t.Fatalf("%d processes, want 3: %+v", len(buf), buf)
		}
		newest := cursor
		for _, p := range buf {
			i := indexOf(pids, p.PID)
			if i < 0 {
				t.Fatalf("unknown pid %d", p.PID)
			}
			wantName, wantType, wantMem := "fake-"+strconv.Itoa(int(p.PID)), "C", uint64(i+1)*1024
			if p.PID == uint32(self) {
				wantName = comm // the driver does not know it: /proc/PID/comm
			}
			if i == 1 {
				wantType, wantMem = "C+G", wantMem+512
			}
			if p.Name != wantName || p.Type != wantType || !p.HasMemory || p.UsedMemoryMiB != wantMem {
				t.Fatalf("pid %d: %+v; want name %q type %s memory %d MiB", p.PID, p, wantName, wantType, wantMem)
			}
			if p.PID == uint32(self) {
				if want := strings.Join(os.Args, " "); !strings.HasPrefix(want, p.Cmdline) || len(p.Cmdline) == 0 || len(p.Cmdline) > 24 {
					t.Fatalf("cmdline %q: want a prefix of %q of at most 24 bytes", p.Cmdline, want)
				}
			} else if p.Cmdline != "" {
				t.Fatalf("pid %d has no /proc entry but cmdline %q", p.PID, p.Cmdline)
			}
			if !p.HasUtil {
				continue
			}
			utilPolls++
			if p.TimeUS <= cursor {
				t.Fatalf("pid %d: sample %d not newer than cursor %d", p.PID, p.TimeUS, cursor)
			}
			key := [2]uint64{uint64(p.PID), p.TimeUS}
			if seen[key] {
				t.Fatalf("pid %d: sample %d delivered twice", p.PID, p.TimeUS)
			}
			seen[key] = true
			if sm, mem, enc, dec := fakeProcUtil(i, p.TimeUS); p.SMUtil != sm || p.MemUtil != mem || p.EncUtil != enc || p.DecUtil != dec {
				t.Fatalf("pid %d sample %d: %v/%v/%v/%v, want %v/%v/%v/%v", p.PID, p.TimeUS, p.SMUtil, p.MemUtil, p.EncUtil, p.DecUtil, sm, mem, enc, dec)
			}
			newest = max(newest, p.TimeUS)
		}
		cursor = newest
		time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
	}
	if utilPolls < 20 {
		t.Fatalf("only %d process utilization samples in 40 polls", utilPolls)
	}
	// Right after a poll, nothing new: processes listed without utilization.
	buf, _ = d.Processes(sampler.ProcessQuery{Cursor: ^uint64(0) >> 1}, buf[:0])
	for _, p := range buf {
		if p.HasUtil || p.Cmdline != "" {
			t.Fatalf("pid %d: utilization or cmdline past the cursor / without opt-in: %+v", p.PID, p)
		}
	}

	// Through the engine: events at 1 Hz, PID a field.
	eng, col := runEngine(t, src, sampler.Config{}, 1500*time.Millisecond)
	var procEvents int
	for _, e := range col.events {
		if e.Kind != record.EventProcess {
			continue
		}
		procEvents++
		if e.Fields[0].Key != record.ProcessFieldPID || !e.Fields[0].Int {
			t.Fatalf("event %+v: pid must be the first (integer) field", e)
		}
		for _, a := range e.Attrs {
			if a.Key == "pid" || a.Key == record.ProcessAttrCmdline {
				t.Fatalf("event %+v: no pid attribute, no cmdline without opt-in", e)
			}
		}
	}
	if polls := eng.Stats().Devices[0].ProcessPolls; procEvents != 3*int(polls) || polls < 1 || polls > 2 {
		t.Fatalf("%d process events from %d polls in 1.5 s; want 3 per poll at 1 Hz", procEvents, polls)
	}
}

func indexOf(pids []uint32, pid uint32) int {
	for i, p := range pids {
		if p == pid {
			return i
		}
	}
	return -1
}

func childProcessesNotSupported(t *testing.T, src *Source) {
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0].(*device)
	// Utilization unsupported (as under MIG): processes without it.
	os.Setenv("FAKENVML_PROC_NS", "util")
	ps, err := d.Processes(sampler.ProcessQuery{}, nil)
	if err != nil || len(ps) != 2 {
		t.Fatalf("util unsupported: %d processes, %v; want 2 and no error", len(ps), err)
	}
	for _, p := range ps {
		if p.HasUtil || !p.HasMemory {
			t.Fatalf("%+v: want memory without utilization", p)
		}
	}
	calls := d.CallStats().Calls
	ps, _ = d.Processes(sampler.ProcessQuery{}, ps[:0])
	if got := d.CallStats().Calls - calls; got != 2 {
		t.Fatalf("second poll made %d calls; want 2 (the lists; utilization not asked again)", got)
	}
	// Nothing supported: ErrNotSupported, and no call after that.
	os.Setenv("FAKENVML_PROC_NS", "all")
	if _, err := d.Processes(sampler.ProcessQuery{}, ps[:0]); !errors.Is(err, sampler.ErrNotSupported) {
		t.Fatalf("all unsupported: err %v, want ErrNotSupported", err)
	}
	calls = d.CallStats().Calls
	if _, err := d.Processes(sampler.ProcessQuery{}, ps[:0]); !errors.Is(err, sampler.ErrNotSupported) || d.CallStats().Calls != calls {
		t.Fatalf("after unsupported: err %v, %d more calls; want ErrNotSupported without calls", err, d.CallStats().Calls-calls)
	}
	// The engine stops asking a device that cannot list processes.
	eng, col := runEngine(t, src, sampler.Config{}, 300*time.Millisecond)
	for _, e := range col.events {
		if e.Kind == record.EventProcess {
			t.Fatalf("process event from an unsupported device: %+v", e)
		}
	}
	if p := eng.Stats().Devices[0].ProcessPolls; p != 0 {
		t.Fatalf("%d process polls counted on an unsupported device", p)
	}
}
