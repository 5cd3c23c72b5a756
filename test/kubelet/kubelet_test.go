package kubelet

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	kubeapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/attribution"
	"github.com/gpusampler/gpusampler/internal/attribution/attributiontest"
	"github.com/gpusampler/gpusampler/internal/attribution/podresources"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/outputs/prometheus"
	"github.com/gpusampler/gpusampler/record"
)

// kubelet is the kubelet's own PodResourcesLister (the k8s.io/kubelet
// types and service registration) over a pod list the test edits.
type kubelet struct {
	kubeapi.UnimplementedPodResourcesListerServer
	attributiontest.Pods[*kubeapi.PodResources]
}

func (k *kubelet) List(context.Context, *kubeapi.ListPodResourcesRequest) (*kubeapi.ListPodResourcesResponse, error) {
	return &kubeapi.ListPodResourcesResponse{PodResources: k.All()}, nil
}

func (k *kubelet) Get(_ context.Context, in *kubeapi.GetPodResourcesRequest) (*kubeapi.GetPodResourcesResponse, error) {
	p, err := k.Find(in.PodName, in.PodNamespace)
	if err != nil {
		return nil, err
	}
	return &kubeapi.GetPodResourcesResponse{PodResources: p}, nil
}

// serve serves k on socket until the returned stop is called (or the test
// ends); stopping closes the listener, which removes the socket file.
func serve(t *testing.T, socket string, k *kubelet) (stop func()) {
	t.Helper()
	return attributiontest.ServeUnix(t, socket, func(s *grpc.Server) { kubeapi.RegisterPodResourcesListerServer(s, k) })
}

// gpuPod is a pod as a real kubelet reports it: besides the GPU, CPU IDs,
// memory, NUMA topology and a dynamic resource claim, all fields that
// gpusampler's reduced copy of the API skips.
func gpuPod(name, ns, container, resource string, ids ...string) *kubeapi.PodResources {
	numa := &kubeapi.TopologyInfo{Nodes: []*kubeapi.NUMANode{{ID: 1}}}
	return &kubeapi.PodResources{Name: name, Namespace: ns, Containers: []*kubeapi.ContainerResources{{
		Name:    container,
		Devices: []*kubeapi.ContainerDevices{{ResourceName: resource, DeviceIds: ids, Topology: numa}},
		CpuIds:  []int64{2, 3},
		Memory:  []*kubeapi.ContainerMemory{{MemoryType: "memory", Size: 1 << 30, Topology: numa}},
		DynamicResources: []*kubeapi.DynamicResource{{ClaimName: "claim", ClaimNamespace: ns,
			ClaimResources: []*kubeapi.ClaimResource{{DriverName: "dra.example.com", PoolName: "p", DeviceName: "d",
				CdiDevices: []*kubeapi.CDIDevice{{Name: "example.com/dev=0"}}}}}},
	}}}
}

// t0 is the resolvers' clock.
var t0 = attributiontest.T0

func newResolver(t *testing.T, socket string) (*attribution.Resolver, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	r, err := attribution.New(attribution.Config{PodResourcesSocket: socket, Log: slog.New(slog.NewTextHandler(&logs, nil)),
		Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, &logs
}

// The case against the real kubelet service: GPU 1 allocated to
// pod train-7 in namespace ml puts pod, namespace and container on GPU 1's
// /metrics series and line-protocol points only; after the pod ends, one
// refresh removes them.
func TestRealKubeletPodLabels(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	k := &kubelet{}
	k.Set(gpuPod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-bbbb"), gpuPod("web-1", "default", "nginx", "example.com/nic", "eth1"))
	serve(t, socket, k)
	r, _ := newResolver(t, socket)
	tgt := attributiontest.TwoGPUs()
	r.Refresh(context.Background(), tgt)
	want := map[int]record.Attribution{1: {Pod: "train-7", Namespace: "ml", Container: "trainer"}}
	if got := tgt.Attribution(); !maps.Equal(got, want) {
		t.Fatalf("attribution %v, want %v", got, want)
	}

	now := time.Unix(1_700_000_000, 0)
	o, err := prometheus.New(prometheus.Options{Listen: "127.0.0.1:0", Host: "node7", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	batch := func() *record.Batch {
		return &record.Batch{Devices: tgt.Devices(), Samples: []record.Sample{
			{TimeNS: now.UnixNano(), Value: 40, Device: 0, Metric: catalog.MetricUtilGPU},
			{TimeNS: now.UnixNano(), Value: 97, Device: 1, Metric: catalog.MetricUtilGPU}}}
	}
	if err := o.Write(context.Background(), batch()); err != nil {
		t.Fatal(err)
	}
	wantLines := []string{
		`DCGM_FI_DEV_GPU_UTIL{Hostname="node7",UUID="GPU-aaaa",device="nvidia0",gpu="0",modelName="NVIDIA H200",pci_bus_id=""} 40`,
		`DCGM_FI_DEV_GPU_UTIL{Hostname="node7",UUID="GPU-bbbb",container="trainer",device="nvidia1",gpu="1",modelName="NVIDIA H200",namespace="ml",pci_bus_id="",pod="train-7"} 97`,
	}
	if got := attributiontest.UtilLines(o); !slices.Equal(got, wantLines) {
		t.Fatalf("/metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
	enc := lineproto.New(lineproto.Options{Host: "node7"})
	enc.Encode(batch())
	wantLP := "nvidia_smi,host=node7,index=0,name=NVIDIA\\ H200,uuid=GPU-aaaa utilization_gpu=40i 1700000000000000000\n" +
		"nvidia_smi,container=trainer,host=node7,index=1,name=NVIDIA\\ H200,namespace=ml,pod=train-7,uuid=GPU-bbbb utilization_gpu=97i 1700000000000000000\n"
	if got := string(enc.Bytes()); got != wantLP {
		t.Fatalf("line protocol:\n%s\nwant:\n%s", got, wantLP)
	}

	k.Set(gpuPod("web-1", "default", "nginx", "example.com/nic", "eth1"))
	r.Refresh(context.Background(), tgt)
	if got := tgt.Attribution(); len(got) != 0 {
		t.Fatalf("attribution after the pod ended: %v", got)
	}
	now = now.Add(time.Second)
	if err := o.Write(context.Background(), batch()); err != nil {
		t.Fatal(err)
	}
	wantLines[1] = `DCGM_FI_DEV_GPU_UTIL{Hostname="node7",UUID="GPU-bbbb",device="nvidia1",gpu="1",modelName="NVIDIA H200",pci_bus_id=""} 97`
	if got := attributiontest.UtilLines(o); !slices.Equal(got, wantLines) {
		t.Fatalf("/metrics after the pod ended:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
}

// Pods come and go, an allocation names a device gpusampler does not
// sample, the socket disappears and comes back: each refresh's attribution
// and the resolver's counters are what the kubelet said.
func TestRealKubeletLifecycle(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	k := &kubelet{}
	stop := serve(t, socket, k)
	r, logs := newResolver(t, socket)
	tgt := attributiontest.TwoGPUs()
	trainer := record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer"}
	steps := []struct {
		name string
		pods []*kubeapi.PodResources
		down bool // stop the kubelet before this step
		up   bool // start it again before this step
		want map[int]record.Attribution
	}{
		{name: "no pods", want: map[int]record.Attribution{}},
		{name: "two pods by UUID and by index", pods: []*kubeapi.PodResources{
			gpuPod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-aaaa"), gpuPod("eval-2", "ml", "eval", "nvidia.com/gpu", "1")},
			want: map[int]record.Attribution{0: trainer, 1: {Pod: "eval-2", Namespace: "ml", Container: "eval"}}},
		{name: "eval ends, an unknown GPU appears", pods: []*kubeapi.PodResources{
			gpuPod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-aaaa"), gpuPod("x", "other", "c", "nvidia.com/gpu", "GPU-ffff")},
			want: map[int]record.Attribution{0: trainer}},
		{name: "socket gone", down: true, want: map[int]record.Attribution{}},
		{name: "still gone", want: map[int]record.Attribution{}},
		{name: "back", up: true, pods: []*kubeapi.PodResources{
			gpuPod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-bbbb")},
			want: map[int]record.Attribution{1: trainer}},
	}
	for _, s := range steps {
		if s.down {
			stop()
			if _, err := os.Stat(socket); !os.IsNotExist(err) {
				t.Fatalf("%s: the socket is still there (%v)", s.name, err)
			}
		}
		if s.up {
			stop = serve(t, socket, k)
		}
		k.Set(s.pods...)
		r.Refresh(context.Background(), tgt)
		if got := tgt.Attribution(); !maps.Equal(got, s.want) {
			t.Fatalf("%s: attribution %v, want %v", s.name, got, s.want)
		}
	}
	want := attribution.Stats{Refreshes: 6, Changes: 5, KubeErrors: 2, UnknownDevices: 1,
		Successes: 4, LastSuccess: t0, Since: t0}
	if got := r.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	for line, n := range map[string]int{"kubelet pod-resources unavailable": 1, "kubelet pod-resources answers again": 1, "GPU-ffff": 1} {
		if got := strings.Count(logs.String(), line); got != n {
			t.Fatalf("%q logged %d times, want %d:\n%s", line, got, n, logs)
		}
	}
}

// gpusampler's reduced messages read the real service's List and Get
// answers field for field (the kubelet-only fields skipped as unknown).
func TestReducedAPIReadsRealAnswers(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	k := &kubelet{}
	k.Set(gpuPod("train-7", "ml", "trainer", "nvidia.com/mig-1g.18gb", "MIG-cccc", "MIG-dddd"))
	serve(t, socket, k)
	conn, err := grpc.NewClient("unix:"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := podresources.NewClient(conn)
	wantPod := &podresources.PodResources{Name: "train-7", Namespace: "ml", Containers: []*podresources.ContainerResources{{
		Name: "trainer", Devices: []*podresources.ContainerDevices{{ResourceName: "nvidia.com/mig-1g.18gb", DeviceIds: []string{"MIG-cccc", "MIG-dddd"}}}}}}
	list, err := c.List(context.Background(), &podresources.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if want := (&podresources.ListPodResourcesResponse{PodResources: []*podresources.PodResources{wantPod}}); !equalKnown(list, want) {
		t.Fatalf("List: %v, want %v", list, want)
	}
	got, err := c.Get(context.Background(), &podresources.GetPodResourcesRequest{PodName: "train-7", PodNamespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (&podresources.GetPodResourcesResponse{PodResources: wantPod}); !equalKnown(got, want) {
		t.Fatalf("Get: %v, want %v", got, want)
	}
	if _, err := c.Get(context.Background(), &podresources.GetPodResourcesRequest{PodName: "gone", PodNamespace: "ml"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Get of a missing pod: %v, want NotFound", err)
	}
}

// equalKnown compares the known fields of two messages: the unknown fields
// carried from the kubelet's answer are dropped from a copy of got first.
func equalKnown(got, want proto.Message) bool {
	c := proto.Clone(got)
	dropUnknown(c.ProtoReflect())
	return proto.Equal(c, want)
}

func dropUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				dropUnknown(v.List().Get(i).Message())
			}
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			dropUnknown(v.Message())
		}
		return true
	})
}

// A GPU time-sliced between two pods by the real service's replica IDs:
// no pod labels on the device; each process gets its own pod's from its
// cgroup (fixture /proc) and the kubelet's container log links (fixture
// directory). When one pod ends, its process loses them at the next
// refresh.
func TestRealKubeletSharedGPU(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	k := &kubelet{}
	k.Set(gpuPod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-bbbb::0"), gpuPod("eval-2", "ml", "eval", "nvidia.com/gpu", "GPU-bbbb::1"))
	serve(t, socket, k)
	procRoot := t.TempDir()
	idA, idB := attributiontest.ContainerID('a'), attributiontest.ContainerID('b')
	attributiontest.WriteCgroup(t, procRoot, 100, attributiontest.SystemdContainerd(attributiontest.PodUIDA, idA))
	attributiontest.WriteCgroup(t, procRoot, 200, "12:memory:/kubepods/besteffort/pod"+attributiontest.PodUIDB+"/"+idB+"\n")
	evalLog := "eval-2_ml_eval-" + idB + ".log"
	logDir := attributiontest.LogLinks(t, "train-7_ml_trainer-"+idA+".log", evalLog)
	r, err := attribution.New(attribution.Config{PodResourcesSocket: socket, ContainerLogDir: logDir, ProcRoot: procRoot,
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tgt := &attributiontest.ProcessTarget{Target: attributiontest.TwoGPUs()}
	tgt.PIDs = map[int][]uint32{1: {100, 200}}
	r.Refresh(context.Background(), tgt)
	if got := tgt.Attribution(); len(got) != 0 {
		t.Fatalf("device attribution of the shared GPU: %v", got)
	}
	train := record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer"}
	eval := record.Attribution{Pod: "eval-2", Namespace: "ml", Container: "eval"}
	check := func(step string, want1 map[uint32]record.Attribution) {
		t.Helper()
		if len(tgt.Procs) != 2 || len(tgt.Procs[0]) != 0 || !maps.Equal(tgt.Procs[1], want1) {
			t.Fatalf("%s: process attribution %v, want GPU 1 %v and none on GPU 0", step, tgt.Procs, want1)
		}
	}
	check("both pods", map[uint32]record.Attribution{100: train, 200: eval})

	// eval-2 ends: the kubelet drops it and removes its container's link.
	k.Set(gpuPod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-bbbb::0"))
	if err := os.Remove(filepath.Join(logDir, evalLog)); err != nil {
		t.Fatal(err)
	}
	r.Refresh(context.Background(), tgt)
	check("eval-2 ended", map[uint32]record.Attribution{100: train})
	// Only one holder left: the device has its labels again.
	if got := tgt.Attribution(); !maps.Equal(got, map[int]record.Attribution{1: train}) {
		t.Fatalf("device attribution with one holder: %v", got)
	}
	want := attribution.Stats{Refreshes: 2, Changes: 1, SharedDevices: 1, Successes: 2, LastSuccess: t0, Since: t0}
	if got := r.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
}
