//go:build cgo

package nvml

import (
	"errors"
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusampler/gpusampler/sampler"
)

// The GPU's CPU affinity comes from nvmlDeviceGetCpuAffinity's mask: GPU 2
// of the mock sits on CPUs 1, 3 and 64–65 (the second mask word).
func TestMockCPUAffinity(t *testing.T) {
	s := mockServer(t, "")
	var asked int
	d := s.Devices[2].(*server.Device)
	d.GetCpuAffinityFunc = func(n int) ([]uint, nvml.Return) {
		asked = n
		return []uint{0b1010, 0b11}, nvml.SUCCESS
	}
	s.Devices[5].(*server.Device).GetCpuAffinityFunc = func(int) ([]uint, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	_, devs := openMock(t, s)
	got, err := devs[2].(sampler.CPUAffinityReporter).CPUAffinity()
	if err != nil || !slices.Equal(got, []int{1, 3, 64, 65}) || asked != affinityCPUs {
		t.Fatalf("CPUAffinity = %v, %v (asked for %d CPUs)", got, err, asked)
	}
	if _, err := devs[5].(sampler.CPUAffinityReporter).CPUAffinity(); !errors.Is(err, sampler.ErrNotSupported) {
		t.Fatalf("unsupported affinity: %v", err)
	}
}
