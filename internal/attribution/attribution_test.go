package attribution

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/attribution/attributiontest"
	"github.com/gpusampler/gpusampler/internal/attribution/podresources"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/outputs/prometheus"
	"github.com/gpusampler/gpusampler/record"
)

// kubelet serves the real pod-resources v1 service from a pod list the
// test edits.
type kubelet = attributiontest.Kubelet

// startKubelet serves k on a Unix socket; stop ends the server and removes
// the socket.
func startKubelet(t *testing.T, k *kubelet) (socket string, stop func()) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "kubelet.sock")
	return socket, attributiontest.ServeUnix(t, socket, func(s *grpc.Server) { podresources.Register(s, k) })
}

func pod(name, ns, container, resource string, ids ...string) *podresources.PodResources {
	return &podresources.PodResources{Name: name, Namespace: ns, Containers: []*podresources.ContainerResources{{
		Name: container, Devices: []*podresources.ContainerDevices{{ResourceName: resource, DeviceIds: ids}}}}}
}

// t0 is the resolvers' clock unless a test sets its own.
var t0 = attributiontest.T0

func newResolver(t *testing.T, cfg Config) (*Resolver, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	cfg.Log = slog.New(slog.NewTextHandler(&logs, nil))
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return t0 }
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r, &logs
}

// The case: the kubelet allocates GPU 1 to pod train-7 in
// namespace ml. /metrics and the line protocol carry pod, namespace and
// container on GPU 1 only; after the pod ends, the next refresh removes them.
func TestKubernetesPodLabels(t *testing.T) {
	k := &kubelet{}
	k.Set(pod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-bbbb"),
		pod("web-1", "default", "nginx", "cpu", "0"))
	socket, _ := startKubelet(t, k)
	r, _ := newResolver(t, Config{PodResourcesSocket: socket})
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
	write := func() {
		t.Helper()
		b := &record.Batch{Devices: tgt.Devices(), Samples: []record.Sample{
			{TimeNS: now.UnixNano(), Value: 40, Device: 0, Metric: catalog.MetricUtilGPU},
			{TimeNS: now.UnixNano(), Value: 97, Device: 1, Metric: catalog.MetricUtilGPU}}}
		if err := o.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	write()
	wantLines := []string{
		`DCGM_FI_DEV_GPU_UTIL{Hostname="node7",UUID="GPU-aaaa",device="nvidia0",gpu="0",modelName="NVIDIA H200",pci_bus_id=""} 40`,
		`DCGM_FI_DEV_GPU_UTIL{Hostname="node7",UUID="GPU-bbbb",container="trainer",device="nvidia1",gpu="1",modelName="NVIDIA H200",namespace="ml",pci_bus_id="",pod="train-7"} 97`,
	}
	if got := attributiontest.UtilLines(o); !slices.Equal(got, wantLines) {
		t.Fatalf("/metrics:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}

	enc := lineproto.New(lineproto.Options{Host: "node7"})
	enc.Encode(&record.Batch{Devices: tgt.Devices(), Samples: []record.Sample{
		{TimeNS: now.UnixNano(), Value: 40, Device: 0, Metric: catalog.MetricUtilGPU},
		{TimeNS: now.UnixNano(), Value: 97, Device: 1, Metric: catalog.MetricUtilGPU}}})
	wantLP := "nvidia_smi,host=node7,index=0,name=NVIDIA\\ H200,uuid=GPU-aaaa utilization_gpu=40i 1700000000000000000\n" +
		"nvidia_smi,container=trainer,host=node7,index=1,name=NVIDIA\\ H200,namespace=ml,pod=train-7,uuid=GPU-bbbb utilization_gpu=97i 1700000000000000000\n"
	if got := string(enc.Bytes()); got != wantLP {
		t.Fatalf("line protocol:\n%s\nwant:\n%s", got, wantLP)
	}

	// The pod ends; one refresh later the labels are gone.
	k.Set(pod("web-1", "default", "nginx", "cpu", "0"))
	r.Refresh(context.Background(), tgt)
	if got := tgt.Attribution(); len(got) != 0 {
		t.Fatalf("attribution after the pod ended: %v", got)
	}
	now = now.Add(time.Second)
	write()
	wantLines[1] = `DCGM_FI_DEV_GPU_UTIL{Hostname="node7",UUID="GPU-bbbb",device="nvidia1",gpu="1",modelName="NVIDIA H200",pci_bus_id=""} 97`
	if got := attributiontest.UtilLines(o); !slices.Equal(got, wantLines) {
		t.Fatalf("/metrics after the pod ended:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
	}
}

// Pods come and go; an allocation naming a device gpusampler does not
// sample is counted and logged once; a GPU held by two containers
// (time-slicing) gets no pod labels.
func TestKubernetesPodsComeAndGo(t *testing.T) {
	k := &kubelet{}
	socket, _ := startKubelet(t, k)
	r, logs := newResolver(t, Config{PodResourcesSocket: socket})
	tgt := attributiontest.TwoGPUs()
	steps := []struct {
		pods []*podresources.PodResources
		want map[int]record.Attribution
	}{
		{nil, map[int]record.Attribution{}},
		{[]*podresources.PodResources{pod("a", "ns1", "c", "nvidia.com/gpu", "GPU-aaaa"), pod("b", "ns2", "d", "nvidia.com/gpu", "1")},
			map[int]record.Attribution{0: {Pod: "a", Namespace: "ns1", Container: "c"}, 1: {Pod: "b", Namespace: "ns2", Container: "d"}}},
		{[]*podresources.PodResources{pod("b", "ns2", "d", "nvidia.com/gpu", "GPU-bbbb::0"), pod("x", "ns3", "e", "nvidia.com/gpu", "GPU-ffff")},
			map[int]record.Attribution{1: {Pod: "b", Namespace: "ns2", Container: "d"}}},
		{[]*podresources.PodResources{pod("b", "ns2", "d", "nvidia.com/gpu", "GPU-bbbb::0"), pod("c", "ns2", "d", "nvidia.com/gpu", "GPU-bbbb::1"),
			pod("x", "ns3", "e", "nvidia.com/gpu", "GPU-ffff")},
			map[int]record.Attribution{}},
	}
	for i, s := range steps {
		k.Set(s.pods...)
		r.Refresh(context.Background(), tgt)
		if got := tgt.Attribution(); !maps.Equal(got, s.want) {
			t.Fatalf("step %d: attribution %v, want %v", i, got, s.want)
		}
	}
	st := r.Stats()
	if want := (Stats{Refreshes: 4, Changes: 4, UnknownDevices: 2, SharedDevices: 1, Successes: 4, LastSuccess: t0, Since: t0}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if n := strings.Count(logs.String(), "GPU-ffff"); n != 1 {
		t.Fatalf("unknown device logged %d times:\n%s", n, logs)
	}
}

// The kubelet goes away: one log line, no labels, no crash; when it is
// back, labels return.
func TestKubernetesSocketDisappears(t *testing.T) {
	k := &kubelet{}
	k.Set(pod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-bbbb"))
	socket, stop := startKubelet(t, k)
	r, logs := newResolver(t, Config{PodResourcesSocket: socket})
	tgt := attributiontest.TwoGPUs()
	r.Refresh(context.Background(), tgt)
	if len(tgt.Attribution()) != 1 {
		t.Fatalf("attribution %v", tgt.Attribution())
	}
	stop()
	r.Refresh(context.Background(), tgt)
	r.Refresh(context.Background(), tgt)
	if got := tgt.Attribution(); len(got) != 0 {
		t.Fatalf("attribution with the kubelet gone: %v", got)
	}
	if n := strings.Count(logs.String(), "kubelet pod-resources unavailable"); n != 1 {
		t.Fatalf("%d unavailable lines:\n%s", n, logs)
	}
	if st, want := r.Stats(), (Stats{Refreshes: 3, Changes: 2, KubeErrors: 2, Successes: 1, LastSuccess: t0, Since: t0}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}

	// A missing socket from the start is the same.
	r2, logs2 := newResolver(t, Config{PodResourcesSocket: filepath.Join(t.TempDir(), "none.sock")})
	r2.Refresh(context.Background(), tgt)
	if !regexp.MustCompile(`level=WARN msg="kubelet pod-resources unavailable.*none\.sock`).MatchString(logs2.String()) {
		t.Fatalf("log:\n%s", logs2)
	}
}

// Device IDs: UUIDs, MIG UUIDs, the legacy MIG form, indexes, replicas.
func TestMatchDevice(t *testing.T) {
	devs := []record.Device{{Index: 0, UUID: "GPU-aaaa"},
		{Index: 1, UUID: "MIG-cccc", MIG: true, Parent: 0, GPUInstanceID: 7, ComputeInstanceID: 0}}
	for _, c := range []struct {
		resource, id string
		index        int
		shared, ok   bool
	}{
		{"nvidia.com/gpu", "GPU-aaaa", 0, false, true},
		{"nvidia.com/gpu", "GPU-aaaa::3", 0, true, true},
		{"nvidia.com/gpu", "0", 0, false, true},
		{"nvidia.com/mig-1g.18gb", "MIG-cccc", 1, false, true},
		{"nvidia.com/mig-1g.18gb", "MIG-GPU-aaaa/7/0", 1, false, true},
		{"nvidia.com/mig-1g.18gb", "MIG-GPU-aaaa/8/0", 0, false, false},
		{"nvidia.com/mig-1g.18gb", "1", 0, false, false},
		{"nvidia.com/gpu", "GPU-zzzz", 0, false, false},
	} {
		idx, sh, ok := matchDevice(devs, c.resource, c.id)
		if idx != c.index || sh != c.shared || ok != c.ok {
			t.Errorf("%s %s: (%d, %v, %v), want (%d, %v, %v)", c.resource, c.id, idx, sh, ok, c.index, c.shared, c.ok)
		}
	}
}

// The client's Get (kubelets from 1.27) asks for one pod over the same
// socket; an unknown pod is NotFound.
func TestPodResourcesGet(t *testing.T) {
	k := &kubelet{}
	want := pod("train-7", "ml", "trainer", "nvidia.com/gpu", "GPU-bbbb")
	k.Set(want)
	socket, _ := startKubelet(t, k)
	r, _ := newResolver(t, Config{PodResourcesSocket: socket})
	kube, err := r.kubeClient()
	if err != nil {
		t.Fatal(err)
	}
	got, err := kube.Get(context.Background(), &podresources.GetPodResourcesRequest{PodName: "train-7", PodNamespace: "ml"})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got.GetPodResources(), want) {
		t.Fatalf("Get: %v, want %v", got.GetPodResources(), want)
	}
	_, err = kube.Get(context.Background(), &podresources.GetPodResourcesRequest{PodName: "gone", PodNamespace: "ml"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Get of an unknown pod: %v", err)
	}
}

// Successes and the last success's age: a refresh in which every source on
// answered is a success; failures leave the time of the last one, from
// which the age grows; before any success the age counts from the start.
func TestLastSuccessAge(t *testing.T) {
	k := &kubelet{}
	socket, stop := startKubelet(t, k)
	dir := t.TempDir()
	now := t0
	r, _ := newResolver(t, Config{PodResourcesSocket: socket, HPCJobMappingDir: dir, Now: func() time.Time { return now }})
	tgt := attributiontest.TwoGPUs()
	now = now.Add(time.Second)
	r.Refresh(context.Background(), tgt)
	st := r.Stats()
	if want := (Stats{Refreshes: 1, Successes: 1, LastSuccess: t0.Add(time.Second), Since: t0}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if age := st.LastSuccessAge(now.Add(2 * time.Second)); age != 2*time.Second {
		t.Fatalf("age %v, want 2s", age)
	}
	// One source failing fails the refresh.
	stop()
	now = now.Add(10 * time.Second)
	r.Refresh(context.Background(), tgt)
	st = r.Stats()
	if want := (Stats{Refreshes: 2, KubeErrors: 1, Successes: 1, LastSuccess: t0.Add(time.Second), Since: t0}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if age := st.LastSuccessAge(now); age != 10*time.Second {
		t.Fatalf("age %v, want 10s", age)
	}

	// Never a success: the age is the resolver's.
	r2, _ := newResolver(t, Config{HPCJobMappingDir: filepath.Join(dir, "missing", "x"), Now: func() time.Time { return now }})
	r2.Refresh(context.Background(), tgt)
	st = r2.Stats()
	if want := (Stats{Refreshes: 1, MappingErrors: 1, Since: now}); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if age := st.LastSuccessAge(now.Add(time.Minute)); age != time.Minute {
		t.Fatalf("age %v, want 1m", age)
	}
}
