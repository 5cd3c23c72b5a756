package sampler_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

func TestCursorFileRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	f, ignored, err := sampler.OpenCursorFile(dir)
	if err != nil || ignored {
		t.Fatalf("open: %v, ignored %v", err, ignored)
	}
	if got := f.Load("GPU-a"); got != nil {
		t.Fatalf("empty store loads %v", got)
	}
	a := map[catalog.BufferType]uint64{catalog.BufferTotalPower: 100, catalog.BufferGPUUtil: 90}
	if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-a": a}); err != nil {
		t.Fatal(err)
	}
	// A later save without GPU-a keeps it; one with it moves its cursors.
	b := map[catalog.BufferType]uint64{catalog.BufferSMClock: 7}
	if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-b": b}); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-a": {catalog.BufferTotalPower: 150}}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, ignored, err := sampler.OpenCursorFile(dir)
	if err != nil || ignored {
		t.Fatalf("reopen: %v, ignored %v", err, ignored)
	}
	defer g.Close()
	if got, want := g.Load("GPU-a"), map[catalog.BufferType]uint64{catalog.BufferTotalPower: 150, catalog.BufferGPUUtil: 90}; !reflect.DeepEqual(got, want) {
		t.Errorf("GPU-a cursors %v, want %v", got, want)
	}
	if got := g.Load("GPU-b"); !reflect.DeepEqual(got, b) {
		t.Errorf("GPU-b cursors %v, want %v", got, b)
	}
	// Only the file and the lock are left: no temporary files.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 || entries[0].Name() != sampler.CursorFileName || entries[1].Name() != sampler.LockFileName {
		t.Errorf("state dir holds %v", entries)
	}
}

func TestCursorFileBadInput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, sampler.CursorFileName)
	// A garbled file (what a power loss may leave) or one of an unknown
	// version is an empty store, said why, and the next save rewrites it:
	// later starts have cursors again.
	for _, bad := range []string{"{not json", `{"version":9,"gpus":{"GPU-a":{"total_power":5}}}`} {
		os.WriteFile(path, []byte(bad), 0o600)
		f, ignored, err := sampler.OpenCursorFile(dir)
		if err != nil || ignored || f.Discarded() == "" || f.Load("GPU-a") != nil {
			t.Fatalf("malformed file %q: err %v, ignored %v, discarded %q; want an empty store, discarded", bad, err, ignored, f.Discarded())
		}
		if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-a": {catalog.BufferTotalPower: 7}}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		g, _, err := sampler.OpenCursorFile(dir)
		if err != nil || g.Discarded() != "" || g.Load("GPU-a")[catalog.BufferTotalPower] != 7 {
			t.Fatalf("after rewriting %q: err %v, discarded %q, cursors %v", bad, err, g.Discarded(), g.Load("GPU-a"))
		}
		g.Close()
	}
	os.WriteFile(path, []byte(`{"version":1,"boot_id":"another boot","gpus":{"GPU-a":{"total_power":5}}}`), 0o600)
	f, ignored, err := sampler.OpenCursorFile(dir)
	if err != nil || !ignored || f.Load("GPU-a") != nil {
		t.Fatalf("cursors of another boot: err %v, ignored %v; want them ignored", err, ignored)
	}
	f.Close()
}

// Cursors are keyed on the machine's boot, not on its name: a file saved
// under this boot by a host of another name (a container's hostname changes
// at every restart) or with another machine id (a container's own) is kept;
// one saved under another boot is ignored whole and its cursors counted
// (Ignored). A GPU's cursors never apply to another GPU.
func TestCursorFileMachineIdentity(t *testing.T) {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if len(boot) == 0 {
		t.Skip("no boot id here")
	}
	thisBoot := strings.TrimSpace(string(boot))
	for _, tc := range []struct {
		name, doc string
		ignored   bool
	}{
		{"hostname changed", `{"version":1,"boot_id":"` + thisBoot + `","host":"another-host","gpus":{"GPU-a":{"total_power":5,"gpu_util":4}}}`, false},
		{"machine id changed", `{"version":1,"boot_id":"` + thisBoot + `","machine_id":"0123456789abcdef","gpus":{"GPU-a":{"total_power":5,"gpu_util":4}}}`, false},
		{"boot changed", `{"version":1,"boot_id":"another-boot","host":"another-host","gpus":{"GPU-a":{"total_power":5,"gpu_util":4}}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, sampler.CursorFileName), []byte(tc.doc), 0o600)
			f, ignored, err := sampler.OpenCursorFile(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := f.Load("GPU-a")
			if tc.ignored {
				if !ignored || got != nil || f.Ignored("GPU-a") != 2 || f.Ignored("GPU-b") != 0 || !strings.Contains(f.IgnoredReason(), "another boot") {
					t.Errorf("ignored %v, loaded %v, counted %d, reason %q: want both cursors ignored and counted, naming the boot",
						ignored, got, f.Ignored("GPU-a"), f.IgnoredReason())
				}
				return
			}
			if ignored || got[catalog.BufferTotalPower] != 5 || got[catalog.BufferGPUUtil] != 4 || f.Ignored("GPU-a") != 0 {
				t.Errorf("ignored %v (%s), loaded %v: want the cursors kept", ignored, f.IgnoredReason(), got)
			}
			if g := f.Load("GPU-b"); g != nil {
				t.Errorf("GPU-b loads GPU-a's cursors: %v", g)
			}
		})
	}
	// A file saved under another boot is replaced by this boot's cursors.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, sampler.CursorFileName), []byte(`{"version":1,"boot_id":"another-boot","gpus":{"GPU-a":{"total_power":5}}}`), 0o600)
	f, _, err := sampler.OpenCursorFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-a": {catalog.BufferTotalPower: 7}}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g, ignored, err := sampler.OpenCursorFile(dir)
	if err != nil || ignored {
		t.Fatalf("reopen after a save under this boot: %v, ignored %v", err, ignored)
	}
	defer g.Close()
	if got := g.Load("GPU-a")[catalog.BufferTotalPower]; got != 7 {
		t.Errorf("GPU-a power cursor %d, want 7", got)
	}
}

// One process owns a state directory: a second opener, in another process,
// gets a StateDirInUseError naming the owner's PID; once the owner is gone
// (it exits, or closes the file) the directory can be had again.
func TestCursorFileOneOwner(t *testing.T) {
	if os.Getenv("GPUSAMPLER_TEST_HOLD_STATE") != "" {
		f, _, err := sampler.OpenCursorFile(os.Getenv("GPUSAMPLER_TEST_HOLD_STATE"))
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("holding\n")
		var b [1]byte
		os.Stdin.Read(b[:]) // until the parent closes our stdin
		f.Close()
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCursorFileOneOwner$")
	cmd.Env = append(os.Environ(), "GPUSAMPLER_TEST_HOLD_STATE="+dir)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "holding\n" {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("child said %q", line)
	}
	_, _, err := sampler.OpenCursorFile(dir)
	var inUse *sampler.StateDirInUseError
	if !errors.As(err, &inUse) || !errors.Is(err, sampler.ErrStateDirInUse) || inUse.PID != cmd.Process.Pid {
		t.Errorf("open while another process owns it: %v, want in use by PID %d", err, cmd.Process.Pid)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	f, _, err := sampler.OpenCursorFile(dir)
	if err != nil {
		t.Fatalf("open once the owner is gone: %v", err)
	}
	// Within one process too, a second opener is refused until Close.
	if _, _, err := sampler.OpenCursorFile(dir); !errors.Is(err, sampler.ErrStateDirInUse) {
		t.Errorf("second open in the same process: %v, want ErrStateDirInUse", err)
	}
	f.Close()
	g, _, err := sampler.OpenCursorFile(dir)
	if err != nil {
		t.Fatalf("open after Close: %v", err)
	}
	g.Close()
}

// Cursors are kept per output set: a run with other outputs (an operator's
// `run --config` while the service is down) neither loads nor moves the
// service's. A version 1 file (one set) is where a set starts from; a set
// that has not moved for a week is dropped at the next save.
func TestCursorFileScopes(t *testing.T) {
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	thisBoot := strings.TrimSpace(string(boot))
	dir := t.TempDir()
	power := func(scope string) (uint64, int) {
		t.Helper()
		f, ignored, err := sampler.OpenCursorFileScoped(dir, scope)
		if err != nil || ignored {
			t.Fatalf("open %q: %v, ignored %v", scope, err, ignored)
		}
		defer f.Close()
		return f.Load("GPU-a")[catalog.BufferTotalPower], f.OtherSets()
	}
	save := func(scope string, c uint64) {
		t.Helper()
		f, _, err := sampler.OpenCursorFileScoped(dir, scope)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-a": {catalog.BufferTotalPower: c}}); err != nil {
			t.Fatal(err)
		}
	}
	// Version 1, as an older gpusampler left it: the service starts from it.
	os.WriteFile(filepath.Join(dir, sampler.CursorFileName),
		[]byte(`{"version":1,"boot_id":"`+thisBoot+`","gpus":{"GPU-a":{"total_power":5}}}`), 0o600)
	if c, _ := power("service"); c != 5 {
		t.Fatalf("service starts from the version 1 cursor %d, want 5", c)
	}
	save("service", 100)
	if c, others := power("adhoc"); c != 0 || others != 1 {
		t.Errorf("another output set loads power cursor %d (others %d), want none of the service's", c, others)
	}
	save("adhoc", 500)
	if c, others := power("service"); c != 100 || others != 1 {
		t.Errorf("service power cursor %d after the other set saved 500 (others %d), want its own 100", c, others)
	}
	if c, _ := power("adhoc"); c != 500 {
		t.Errorf("adhoc power cursor %d, want 500", c)
	}
	// A set that has not moved for a week is dropped.
	b, _ := os.ReadFile(filepath.Join(dir, sampler.CursorFileName))
	b = bytes.Replace(b, []byte(`"adhoc":{"saved_at":`), []byte(`"adhoc":{"saved_at":1,"x":`), 1)
	os.WriteFile(filepath.Join(dir, sampler.CursorFileName), b, 0o600)
	save("service", 101)
	if c, others := power("service"); c != 101 || others != 0 {
		t.Errorf("service power cursor %d, other sets %d: want 101 and the stale set dropped", c, others)
	}
}

// A reload that changes the outputs moves the run's cursors to the new
// output set: a start with the new config resumes where the run is, a
// start with the old one where the run was at the reload.
func TestCursorFileRescope(t *testing.T) {
	dir := t.TempDir()
	cur := func(c uint64) map[string]map[catalog.BufferType]uint64 {
		return map[string]map[catalog.BufferType]uint64{"GPU-a": {catalog.BufferTotalPower: c}}
	}
	f, _, err := sampler.OpenCursorFileScoped(dir, "old")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Save(cur(100)); err != nil {
		t.Fatal(err)
	}
	f.Rescope("new")
	if err := f.Save(cur(100)); err != nil { // unchanged cursors still go out under the new set
		t.Fatal(err)
	}
	if err := f.Save(cur(200)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for scope, want := range map[string]uint64{"new": 200, "old": 100, "other": 0} {
		g, _, err := sampler.OpenCursorFileScoped(dir, scope)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Load("GPU-a")[catalog.BufferTotalPower]; got != want {
			t.Errorf("set %q: power cursor %d, want %d", scope, got, want)
		}
		g.Close()
	}
}
