package attribution

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/internal/attribution/attributiontest"
	"github.com/gpusampler/gpusampler/record"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// dcgm-exporter's job-mapping directory: the file named by the GPU index
// (or index.gi for a MIG instance) lists the jobs on it.
func TestJobMappingDir(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"1": "4711\n", "0.7": "815\n90\n", "2": "", "README": "not a GPU"})
	tgt := &attributiontest.Target{Devs: []record.Device{
		{Index: 0, UUID: "GPU-aaaa"}, {Index: 1, UUID: "GPU-bbbb"},
		{Index: 2, UUID: "MIG-cccc", MIG: true, Parent: 0, GPUInstanceID: 7}}}
	r, _ := newResolver(t, Config{HPCJobMappingDir: dir})
	r.Refresh(context.Background(), tgt)
	want := map[int]record.Attribution{1: {HPCJob: "4711"}, 2: {HPCJob: "815,90"}}
	if got := tgt.Attribution(); !maps.Equal(got, want) {
		t.Fatalf("attribution %v, want %v", got, want)
	}
	// The job ends: the prolog's epilog empties the file.
	writeFiles(t, dir, map[string]string{"1": ""})
	r.Refresh(context.Background(), tgt)
	delete(want, 1)
	if got := tgt.Attribution(); !maps.Equal(got, want) {
		t.Fatalf("after the job ended: attribution %v, want %v", got, want)
	}
	// A missing directory: one log line, no labels.
	r2, logs := newResolver(t, Config{HPCJobMappingDir: filepath.Join(dir, "gone")})
	r2.Refresh(context.Background(), tgt)
	r2.Refresh(context.Background(), tgt)
	if got := tgt.Attribution(); len(got) != 0 {
		t.Fatalf("attribution %v with the directory missing", got)
	}
	if n := strings.Count(logs.String(), "HPC job mapping unreadable"); n != 1 || r2.Stats().MappingErrors != 2 {
		t.Fatalf("%d log lines, stats %+v:\n%s", n, r2.Stats(), logs)
	}
}

// With no prolog, the job comes from the Slurm cgroup of the GPU's
// processes (cgroup v1 and v2 layouts); processes outside Slurm and ended
// processes add nothing.
func TestSlurmCgroups(t *testing.T) {
	proc := t.TempDir()
	writeFiles(t, proc, map[string]string{
		"100/cgroup": "12:devices:/slurm/uid_1000/job_4711/step_0\n11:memory:/slurm/uid_1000/job_4711/step_0\n",
		"200/cgroup": "0::/system.slice/slurmstepd.scope/job_815/step_batch/user/task_0\n",
		"300/cgroup": "0::/user.slice/user-1000.slice/session-3.scope\n",
	})
	tgt := &attributiontest.Target{Devs: []record.Device{{Index: 0, UUID: "GPU-aaaa"}, {Index: 1, UUID: "GPU-bbbb"}, {Index: 2, UUID: "GPU-cccc"}},
		PIDs: map[int][]uint32{0: {300, 999}, 1: {100}, 2: {200, 100}}}
	r, _ := newResolver(t, Config{SlurmCgroups: true, ProcRoot: proc})
	r.Refresh(context.Background(), tgt)
	want := map[int]record.Attribution{1: {HPCJob: "4711"}, 2: {HPCJob: "4711,815"}}
	if got := tgt.Attribution(); !maps.Equal(got, want) {
		t.Fatalf("attribution %v, want %v", got, want)
	}
	// The mapping directory, when it names a GPU, wins over cgroups.
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"1": "5000\n"})
	r2, _ := newResolver(t, Config{SlurmCgroups: true, ProcRoot: proc, HPCJobMappingDir: dir})
	r2.Refresh(context.Background(), tgt)
	want[1] = record.Attribution{HPCJob: "5000"}
	if got := tgt.Attribution(); !maps.Equal(got, want) {
		t.Fatalf("attribution %v, want %v", got, want)
	}
}
