// Package attributiontest holds the fixtures of the attribution tests,
// shared by the resolver's own tests (against gpusampler's reduced copy of
// the kubelet's pod-resources API) and the tests against the kubelet's own
// types (the nested module test/kubelet): a set of devices the resolver
// attributes, a gRPC server on a Unix socket, fixture /proc cgroup files
// and container log links, and the /metrics lines that show attribution.
//
// It does not import the resolver, so the resolver's in-package tests can
// use it. Nothing in it is safe for concurrent use unless said.
package attributiontest

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpusampler/gpusampler/internal/attribution/podresources"
	"github.com/gpusampler/gpusampler/outputs/prometheus"
	"github.com/gpusampler/gpusampler/record"
)

// T0 is the resolvers' clock in the tests.
var T0 = time.Unix(1_700_000_000, 0)

// Target is a set of devices whose attribution a resolver sets, with the
// host PIDs of each device's processes (by device index).
type Target struct {
	Devs []record.Device
	PIDs map[int][]uint32
}

// TwoGPUs returns a Target of two H200s, GPU-aaaa (index 0) and GPU-bbbb
// (index 1), at generation 1 and without attribution.
func TwoGPUs() *Target {
	return &Target{Devs: []record.Device{
		{Index: 0, UUID: "GPU-aaaa", Name: "NVIDIA H200", Generation: 1},
		{Index: 1, UUID: "GPU-bbbb", Name: "NVIDIA H200", Generation: 1},
	}}
}

// Devices returns a copy of the devices.
func (f *Target) Devices() []record.Device { return append([]record.Device(nil), f.Devs...) }

// ProcessPIDs returns the PIDs of device i's processes.
func (f *Target) ProcessPIDs(i int) []uint32 { return f.PIDs[i] }

// SetAttribution sets device i's attribution; a change bumps its
// generation and returns true.
func (f *Target) SetAttribution(i int, a record.Attribution) bool {
	for k := range f.Devs {
		if f.Devs[k].Index == i && f.Devs[k].Attribution != a {
			f.Devs[k].Attribution = a
			f.Devs[k].Generation++
			return true
		}
	}
	return false
}

// Attribution returns the attribution of each device that has one, by
// index.
func (f *Target) Attribution() map[int]record.Attribution {
	out := map[int]record.Attribution{}
	for _, d := range f.Devs {
		if !d.IsZero() {
			out[d.Index] = d.Attribution
		}
	}
	return out
}

// ProcessTarget is a Target that also keeps the per-process attribution a
// resolver sets (its ProcessTarget interface).
type ProcessTarget struct {
	*Target
	// Procs is the last map set for each device index.
	Procs map[int]map[uint32]record.Attribution
}

// SetProcessAttribution keeps byPID as device i's process attribution.
func (p *ProcessTarget) SetProcessAttribution(i int, byPID map[uint32]record.Attribution) {
	if p.Procs == nil {
		p.Procs = map[int]map[uint32]record.Attribution{}
	}
	p.Procs[i] = byPID
}

// Pod is a pod-resources message of either copy of the API: gpusampler's
// reduced one or the kubelet's own.
type Pod interface {
	GetName() string
	GetNamespace() string
}

// Pods is the pod list of a fake kubelet, which the test edits while the
// server answers from it. Safe for concurrent use.
type Pods[P Pod] struct {
	mu   sync.Mutex
	pods []P
}

// Set replaces the list.
func (k *Pods[P]) Set(pods ...P) {
	k.mu.Lock()
	k.pods = pods
	k.mu.Unlock()
}

// All returns the list (a List answer).
func (k *Pods[P]) All() []P {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pods
}

// Find returns the pod named name in namespace ns (a Get answer), or the
// kubelet's NotFound status.
func (k *Pods[P]) Find(name, ns string) (P, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.pods {
		if p.GetName() == name && p.GetNamespace() == ns {
			return p, nil
		}
	}
	var zero P
	return zero, status.Errorf(codes.NotFound, "pod %s/%s not found", ns, name)
}

// Kubelet serves gpusampler's reduced copy of the pod-resources v1 API
// (package podresources) from a pod list the test edits; register it with
// podresources.Register.
type Kubelet struct {
	Pods[*podresources.PodResources]
}

// List answers the whole pod list.
func (k *Kubelet) List(context.Context, *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	return &podresources.ListPodResourcesResponse{PodResources: k.All()}, nil
}

// Get answers one pod, or the kubelet's NotFound status.
func (k *Kubelet) Get(_ context.Context, in *podresources.GetPodResourcesRequest) (*podresources.GetPodResourcesResponse, error) {
	p, err := k.Find(in.PodName, in.PodNamespace)
	if err != nil {
		return nil, err
	}
	return &podresources.GetPodResourcesResponse{PodResources: p}, nil
}

// ServeUnix serves a gRPC server, with the services register adds, on a
// Unix socket at path until stop is called or the test ends. Stopping
// closes the listener, which removes the socket file.
func ServeUnix(t *testing.T, path string, register func(*grpc.Server)) (stop func()) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ln) }()
	var once sync.Once
	stop = func() { once.Do(func() { s.Stop(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// Pod UIDs and container IDs of the fixtures.
const (
	PodUIDA = "1f3a9c2e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"
	PodUIDB = "7e6d5c4b-3a29-4180-8f7e-6d5c4b3a2918"
)

// ContainerID returns a container ID of 64 c's.
func ContainerID(c byte) string { return strings.Repeat(string(c), 64) }

// SystemdContainerd returns the /proc/PID/cgroup of a process in container
// id of pod uid, as cgroup v2 with the systemd driver and containerd
// write it (a burstable pod).
func SystemdContainerd(uid, id string) string {
	return "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") +
		".slice/cri-containerd-" + id + ".scope\n"
}

// WriteCgroup writes root/PID/cgroup, a fixture /proc.
func WriteCgroup(t *testing.T, root string, pid uint32, cgroup string) {
	t.Helper()
	dir := filepath.Join(root, strconv.FormatUint(uint64(pid), 10))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		t.Fatal(err)
	}
}

// LogLinks returns a new directory of the kubelet's container log links
// (POD_NAMESPACE_CONTAINER-ID.log), one per name.
func LogLinks(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.Symlink("/var/log/pods/x/"+n, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// UtilLines returns the DCGM_FI_DEV_GPU_UTIL sample lines of a scrape of
// o, sorted.
func UtilLines(o *prometheus.Output) []string {
	rec := httptest.NewRecorder()
	o.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var out []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "DCGM_FI_DEV_GPU_UTIL{") {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}
