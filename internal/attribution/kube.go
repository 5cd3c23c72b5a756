package attribution

import (
	"context"
	"strconv"
	"strings"

	"github.com/gpusampler/gpusampler/internal/attribution/podresources"
	"github.com/gpusampler/gpusampler/record"
)

// DefaultPodResourcesSocket is the kubelet's pod-resources socket.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// gpuResource reports whether a pod-resources resource name is an NVIDIA
// GPU: whole GPUs (nvidia.com/gpu, and nvidia.com/gpu.shared under the
// device plugin's renamed time-slicing) and MIG instances (nvidia.com/mig-*).
func gpuResource(name string) bool {
	return name == "nvidia.com/gpu" || name == "nvidia.com/gpu.shared" || strings.HasPrefix(name, "nvidia.com/mig-")
}

// holder is one container holding a device.
type holder struct{ pod, namespace, container string }

// matchDevice returns the index of the device a device-plugin device ID
// names: a GPU or MIG UUID, with the time-slicing replica suffix "::N"
// stripped; the legacy MIG form MIG-GPU-<uuid>/<gi>/<ci>; or, for whole
// GPUs, the index (the plugin's device-id-strategy=index). ok is false for
// a device gpusampler does not sample.
func matchDevice(devs []record.Device, resource, id string) (index int, shared, ok bool) {
	if base, _, cut := strings.Cut(id, "::"); cut {
		id, shared = base, true
	}
	for _, d := range devs {
		if d.UUID != "" && d.UUID == id {
			return d.Index, shared, true
		}
	}
	if rest, ok := strings.CutPrefix(id, "MIG-GPU-"); ok {
		if parts := strings.Split(rest, "/"); len(parts) == 3 {
			for _, d := range devs {
				if !d.MIG || strconv.Itoa(d.GPUInstanceID) != parts[1] || strconv.Itoa(d.ComputeInstanceID) != parts[2] {
					continue
				}
				for _, p := range devs {
					if p.Index == d.Parent && !p.MIG && p.UUID == "GPU-"+parts[0] {
						return d.Index, shared, true
					}
				}
			}
		}
	}
	if !strings.HasPrefix(resource, "nvidia.com/mig-") {
		if n, err := strconv.Atoi(id); err == nil {
			for _, d := range devs {
				if !d.MIG && d.Index == n {
					return d.Index, shared, true
				}
			}
		}
	}
	return 0, false, false
}

// kubeHolders lists the pods on the node and returns, by device index, the
// containers holding each device; shared marks devices handed out as
// time-slicing replicas or to several containers. unknown lists GPU device
// IDs that name no sampled device.
func kubeHolders(ctx context.Context, c *podresources.Client, devs []record.Device) (held map[int][]holder, shared map[int]bool, unknown []string, err error) {
	resp, err := c.List(ctx, &podresources.ListPodResourcesRequest{})
	if err != nil {
		return nil, nil, nil, err
	}
	held, shared = map[int][]holder{}, map[int]bool{}
	for _, p := range resp.GetPodResources() {
		for _, ct := range p.GetContainers() {
			for _, cd := range ct.GetDevices() {
				if !gpuResource(cd.GetResourceName()) {
					continue
				}
				for _, id := range cd.GetDeviceIds() {
					idx, sh, ok := matchDevice(devs, cd.GetResourceName(), id)
					if !ok {
						unknown = append(unknown, cd.GetResourceName()+"="+id)
						continue
					}
					h := holder{p.GetName(), p.GetNamespace(), ct.GetName()}
					if !containsHolder(held[idx], h) {
						held[idx] = append(held[idx], h)
					}
					if sh {
						shared[idx] = true
					}
				}
			}
		}
	}
	for idx, hs := range held {
		if len(hs) > 1 {
			shared[idx] = true
		}
	}
	return held, shared, unknown, nil
}

func containsHolder(hs []holder, h holder) bool {
	for _, x := range hs {
		if x == h {
			return true
		}
	}
	return false
}
