package bench

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

func TestProcOwner(t *testing.T) {
	o := newProcOwner()
	// Real /proc: a child of ours is ours, our parent is not.
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		if !o.Ours(cmd.Process.Pid) {
			t.Errorf("child %d not ours", cmd.Process.Pid)
		}
		if o.Ours(os.Getppid()) {
			t.Errorf("parent %d ours", os.Getppid())
		}
	}
	// A grandchild of a started command, whatever its ancestry beyond.
	o = newProcOwner()
	o.self = -1
	o.parent = func(pid int) int { return map[int]int{300: 200, 200: 100, 900: 1}[pid] }
	o.Started(100)
	if !o.Ours(300) || o.Ours(900) {
		t.Fatal("ancestry misread")
	}
	// Decided at first sight: the answer stays when the process is gone.
	o.parent = func(int) int { return 0 }
	if !o.Ours(300) {
		t.Fatal("answer not kept")
	}
}

func TestHygieneModesAndForeignProcesses(t *testing.T) {
	t0 := time.Unix(100, 0)
	execs := []execution{
		{cmd: 0, run: 0, start: t0.Add(2 * time.Second), end: t0.Add(3 * time.Second)},
		{cmd: 0, run: 1, start: t0.Add(3 * time.Second), end: t0.Add(4 * time.Second)},
	}
	proc := func(dev, pid int, at time.Duration, memMiB float64) record.Event {
		ns := t0.Add(at).UnixNano()
		return record.Event{Kind: record.EventProcess, Device: dev, StartNS: ns, EndNS: ns,
			Fields: []record.Field{{Key: record.ProcessFieldPID, Value: float64(pid), Int: true},
				{Key: record.ProcessFieldUsedMemory, Value: memMiB, Int: true}},
			Attrs: []record.Attr{{Key: record.ProcessAttrName, Value: map[int]string{1234: "python3", 77: "bench-child"}[pid]},
				{Key: record.ProcessAttrType, Value: "C"}}}
	}
	events := []record.Event{
		proc(0, 1234, 500*time.Millisecond, 12288), // baseline
		proc(0, 77, 2500*time.Millisecond, 30000),  // ours
		proc(0, 1234, 3500*time.Millisecond, 10000),
		proc(1, 1234, 3500*time.Millisecond, 100),
		proc(0, 1234, 9*time.Second, 99999), // after the runs: not counted
	}
	ours := func(pid int) bool { return pid == 77 }
	from, to := t0.UnixNano(), t0.Add(4*time.Second).UnixNano()
	foreign := foreignProcesses(events, map[int]bool{0: true, 1: true}, ours, from, to, from, t0.Add(time.Second).UnixNano(), execs, []string{"A"})
	if len(foreign) != 2 || foreign[0].dev != 0 || foreign[0].pid != 1234 || foreign[0].memMiB != 12288 || foreign[1].dev != 1 {
		t.Fatalf("foreign %+v", foreign)
	}
	devs := []record.Device{
		{Index: 0, PersistenceMode: record.ModeDisabled, ECCMode: record.ModeEnabled, MIGMode: record.ModeDisabled},
		{Index: 1, PersistenceMode: record.ModeEnabled, ECCMode: record.ModeDisabled, MIGMode: record.ModeEnabled},
		{Index: 2},
	}
	windows := map[int]*deviceWindow{}
	for _, d := range devs {
		windows[d.Index] = newDeviceWindow(catalog.Default(), nil)
	}
	h := hygiene(devs, windows, from, t0.Add(time.Second).UnixNano(), execs[0].start.UnixNano(), Baseline{}, foreign,
		map[int]bool{0: true, 1: true, 2: false})
	items := map[string]string{}
	for _, it := range h.Items {
		items[strconv.Itoa(it.Device)+"/"+it.Name] = it.Value
	}
	for k, want := range map[string]string{
		"0/persistence_mode": "disabled", "1/persistence_mode": "enabled", "2/persistence_mode": "unknown",
		"0/ecc_mode": "enabled", "1/ecc_mode": "disabled", "2/ecc_mode": "unknown",
		"0/mig_mode": "disabled", "1/mig_mode": "enabled", "2/mig_mode": "unknown",
		"0/other_processes": "pid 1234 python3 (12.0 GiB)", "1/other_processes": "pid 1234 python3 (100 MiB)",
		"2/other_processes": "unknown",
	} {
		if items[k] != want {
			t.Errorf("%s = %q, want %q", k, items[k], want)
		}
	}
	all := strings.Join(h.Warnings, "\n")
	for _, want := range []string{
		"GPU 0: persistence mode is disabled",
		"GPU 1: MIG mode is enabled",
		"ECC mode differs across the GPUs (enabled on GPU 0; disabled on GPU 1)",
		"pid 1234 python3 used 12.0 GiB on GPU 0 during the idle baseline, run 2: another process",
		"pid 1234 python3 used 100 MiB on GPU 1 during run 2",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no warning %q in:\n%s", want, all)
		}
	}
	if strings.Contains(all, "GPU 2: persistence") || strings.Contains(all, "pid 77") {
		t.Errorf("unexpected warning:\n%s", all)
	}
}
