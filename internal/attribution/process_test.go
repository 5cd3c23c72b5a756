package attribution

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/internal/attribution/attributiontest"
	"github.com/gpusampler/gpusampler/internal/encoding/jsonl"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/record"
)

const (
	uidA = attributiontest.PodUIDA
	uidB = attributiontest.PodUIDB
)

var cid = attributiontest.ContainerID

// The container of a process, from its cgroup, under each cgroup driver
// and runtime; none for host and Slurm processes.
func TestKubeContainer(t *testing.T) {
	root := t.TempDir()
	under := strings.ReplaceAll(uidA, "-", "_")
	cases := []struct {
		name, cgroup, uid, id string
	}{
		{"v1 cgroupfs", "12:memory:/kubepods/burstable/pod" + uidA + "/" + cid('a') + "\n11:cpu,cpuacct:/kubepods/burstable/pod" + uidA + "/" + cid('a') + "\n", uidA, cid('a')},
		{"v1 cgroupfs guaranteed", "4:devices:/kubepods/pod" + uidA + "/" + cid('b') + "\n", uidA, cid('b')},
		{"v2 systemd containerd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + under + ".slice/cri-containerd-" + cid('c') + ".scope\n", uidA, cid('c')},
		{"v2 systemd cri-o", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + under + ".slice/crio-" + cid('d') + ".scope\n", uidA, cid('d')},
		{"v1 systemd docker", "3:pids:/kubepods.slice/kubepods-pod" + under + ".slice/docker-" + cid('e') + ".scope\n", uidA, cid('e')},
		{"host", "0::/user.slice/user-1000.slice/session-3.scope\n", "", ""},
		{"slurm", "0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n", "", ""},
		{"docker outside kubernetes", "0::/system.slice/docker-" + cid('f') + ".scope\n", "", ""},
	}
	for i, c := range cases {
		pid := uint32(100 + i)
		attributiontest.WriteCgroup(t, root, pid, c.cgroup)
		uid, id, err := KubeContainer(root, pid)
		if err != nil || uid != c.uid || id != c.id {
			t.Errorf("%s: (%q, %q, %v), want (%q, %q, nil)", c.name, uid, id, err, c.uid, c.id)
		}
	}
	if _, _, err := KubeContainer(root, 99); !os.IsNotExist(err) {
		t.Errorf("ended process: %v, want not-exist", err)
	}
}

func TestReadContainerLogDir(t *testing.T) {
	dir := attributiontest.LogLinks(t,
		"train-7_ml_trainer-"+cid('a')+".log",
		"eval-2_ml_eval-sidecar-"+cid('b')+".log",
		"not-a-container.log", "x_y_z-123.log")
	got, err := ReadContainerLogDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]record.Attribution{
		cid('a'): {Pod: "train-7", Namespace: "ml", Container: "trainer"},
		cid('b'): {Pod: "eval-2", Namespace: "ml", Container: "eval-sidecar"},
	}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := ReadContainerLogDir(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Fatalf("missing dir: %v", err)
	}
}

// Time-slicing: the kubelet hands replicas of GPU 1 to two pods. The
// device carries no pod labels; each process carries its own pod's, from
// its cgroup and the container log links; a host process and a process of
// a container the kubelet no longer lists carry none. Encoded, the
// process records carry the process's attribution, the device records none.
func TestSharedGPUProcessAttribution(t *testing.T) {
	k := &kubelet{}
	k.Set(pod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-bbbb::0"),
		pod("eval-2", "ml", "eval", "nvidia.com/gpu", "GPU-bbbb::1"))
	socket, _ := startKubelet(t, k)
	procRoot := t.TempDir()
	attributiontest.WriteCgroup(t, procRoot, 100, attributiontest.SystemdContainerd(uidA, cid('a')))
	attributiontest.WriteCgroup(t, procRoot, 200, attributiontest.SystemdContainerd(uidB, cid('b')))
	attributiontest.WriteCgroup(t, procRoot, 300, "0::/user.slice/user-1000.slice/session-3.scope\n")
	attributiontest.WriteCgroup(t, procRoot, 400, attributiontest.SystemdContainerd(uidB, cid('c')))
	logDir := attributiontest.LogLinks(t, "train-7_ml_trainer-"+cid('a')+".log", "eval-2_ml_eval-"+cid('b')+".log")
	r, _ := newResolver(t, Config{PodResourcesSocket: socket, ContainerLogDir: logDir, ProcRoot: procRoot})
	ft := attributiontest.TwoGPUs()
	ft.PIDs = map[int][]uint32{1: {100, 200, 300, 400, 500}} // 500 ended since the poll
	tgt := &attributiontest.ProcessTarget{Target: ft}
	r.Refresh(context.Background(), tgt)
	if got := ft.Attribution(); len(got) != 0 {
		t.Fatalf("device attribution of a shared GPU: %v", got)
	}
	train := record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer"}
	eval := record.Attribution{Pod: "eval-2", Namespace: "ml", Container: "eval"}
	want := map[int]map[uint32]record.Attribution{0: {}, 1: {100: train, 200: eval}}
	if len(tgt.Procs) != len(want) || !maps.Equal(tgt.Procs[0], want[0]) || !maps.Equal(tgt.Procs[1], want[1]) {
		t.Fatalf("process attribution %v, want %v", tgt.Procs, want)
	}
	if st, want := r.Stats(), (Stats{Refreshes: 1, SharedDevices: 1, Successes: 1, LastSuccess: t0, Since: t0}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}

	// Process events as the engine makes them (its own attribution after
	// name and type), through the line protocol and JSON.
	proc := func(pid uint32, a record.Attribution) record.Event {
		return record.Event{Kind: record.EventProcess, Device: 1, StartNS: t0.UnixNano(), EndNS: t0.UnixNano(),
			Fields: []record.Field{{Key: record.ProcessFieldPID, Value: float64(pid), Int: true}},
			Attrs:  append([]record.Attr{{Key: record.ProcessAttrName, Value: "python3"}, {Key: record.ProcessAttrType, Value: "C"}}, a.Attrs()...)}
	}
	b := &record.Batch{Devices: ft.Devices(), Events: []record.Event{proc(100, train), proc(200, eval), proc(300, record.Attribution{})}}
	enc := lineproto.New(lineproto.Options{Host: "node7"})
	enc.Encode(b)
	wantLP := "nvidia_smi_process,container=trainer,host=node7,index=1,name=python3,namespace=ml,pod=train-7,type=C,uuid=GPU-bbbb pid=100i 1700000000000000000\n" +
		"nvidia_smi_process,container=eval,host=node7,index=1,name=python3,namespace=ml,pod=eval-2,type=C,uuid=GPU-bbbb pid=200i 1700000000000000000\n" +
		"nvidia_smi_process,host=node7,index=1,name=python3,type=C,uuid=GPU-bbbb pid=300i 1700000000000000000\n"
	if got := string(enc.Bytes()); !strings.HasSuffix(got, wantLP) {
		t.Fatalf("line protocol:\n%s\nwant it to end with:\n%s", got, wantLP)
	}
	j := jsonl.New(jsonl.Options{Host: "node7"})
	j.Encode(b)
	var procLines []string
	for _, l := range strings.Split(string(j.Bytes()), "\n") {
		if strings.HasPrefix(l, `{"type":"process"`) {
			procLines = append(procLines, l)
		}
	}
	wantJSON := []string{
		`{"type":"process","time":1700000000000000000,"host":"node7","gpu":1,"uuid":"GPU-bbbb","pod":"train-7","namespace":"ml","container":"trainer","pid":100,"name":"python3","process_type":"C"}`,
		`{"type":"process","time":1700000000000000000,"host":"node7","gpu":1,"uuid":"GPU-bbbb","pod":"eval-2","namespace":"ml","container":"eval","pid":200,"name":"python3","process_type":"C"}`,
		`{"type":"process","time":1700000000000000000,"host":"node7","gpu":1,"uuid":"GPU-bbbb","pid":300,"name":"python3","process_type":"C"}`,
	}
	if strings.Join(procLines, "\n") != strings.Join(wantJSON, "\n") {
		t.Fatalf("JSON:\n%s\nwant:\n%s", strings.Join(procLines, "\n"), strings.Join(wantJSON, "\n"))
	}
}

// The container log directory unreadable: one warning, counted, no
// per-process labels; the refresh is not a success.
func TestContainerLogDirMissing(t *testing.T) {
	procRoot := t.TempDir()
	attributiontest.WriteCgroup(t, procRoot, 100, "0::/kubepods/pod"+uidA+"/"+cid('a')+"\n")
	r, logs := newResolver(t, Config{ContainerLogDir: filepath.Join(t.TempDir(), "none"), ProcRoot: procRoot})
	ft := attributiontest.TwoGPUs()
	ft.PIDs = map[int][]uint32{0: {100}}
	tgt := &attributiontest.ProcessTarget{Target: ft}
	r.Refresh(context.Background(), tgt)
	r.Refresh(context.Background(), tgt)
	if len(tgt.Procs[0]) != 0 || len(tgt.Procs[1]) != 0 {
		t.Fatalf("process attribution %v", tgt.Procs)
	}
	if st, want := r.Stats(), (Stats{Refreshes: 2, ContainerLogErrors: 2, Since: t0}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if n := strings.Count(logs.String(), "container log directory unreadable"); n != 1 {
		t.Fatalf("%d warnings:\n%s", n, logs)
	}
}
