//go:build cgo

package nvml

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// migInstance returns a mocked MIG device handle. Methods it lacks panic
// when called (the mock's nil Func): GetSamples and GetProcessUtilization
// must never be asked of a MIG instance.
func migInstance(gi int, uuid string) *mock.Device {
	return &mock.Device{
		GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc:              func() (string, nvml.Return) { return "NVIDIA H200 MIG 1g.18gb", nvml.SUCCESS },
		GetPciInfoFunc:           func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS },
		GetSerialFunc:            func() (string, nvml.Return) { return "", nvml.ERROR_NOT_SUPPORTED },
		GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return gi, nvml.SUCCESS },
		GetComputeInstanceIdFunc: func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 16384 << 20, Used: 1024 << 20, Free: 15360 << 20}, nvml.SUCCESS
		},
		GetTemperatureThresholdFunc: func(nvml.TemperatureThresholds) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 777, UsedGpuMemory: 900 << 20, GpuInstanceId: uint32(gi)}}, nvml.SUCCESS
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED },
	}
}

func TestMockMIGInstancesAsDevices(t *testing.T) {
	s := mockServer(t, "")
	gpu1 := s.Devices[1].(*server.Device)
	gpu1.MigMode = nvml.DEVICE_MIG_ENABLE
	instances := []*mock.Device{migInstance(7, "MIG-aaaa"), migInstance(9, "MIG-bbbb")}
	gpu1.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	gpu1.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < len(instances) {
			return instances[i], nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	s.SystemGetProcessNameFunc = func(pid int) (string, nvml.Return) { return "python3", nvml.SUCCESS }
	_, devs := openMock(t, s)
	if len(devs) != 10 {
		t.Fatalf("%d devices, want 8 GPUs + 2 MIG instances", len(devs))
	}
	for i, ds := range devs {
		id, err := ds.Identity()
		if err != nil {
			t.Fatal(err)
		}
		if id.Index != i || id.MIG != (i >= 8) {
			t.Fatalf("device %d: index %d mig %v", i, id.Index, id.MIG)
		}
	}
	m := devs[9]
	id, _ := m.Identity()
	want := record.Device{Index: 9, UUID: "MIG-bbbb", Name: "NVIDIA H200 MIG 1g.18gb", MemoryTotalMiB: 16384, Backend: "nvml",
		DriverVersion: id.DriverVersion, CUDAVersion: "12.4", VBIOSVersion: "96.00.74.00.02", // the parent GPU's board
		MIG: true, Parent: 1, GPUInstanceID: 9, ComputeInstanceID: 0, MIGProfile: "1g.18gb",
		PersistenceMode: record.ModeEnabled, ECCMode: record.ModeEnabled, // the parent's; no MIG mode on an instance
		Architecture: "Hopper", ComputeMode: "Default"}
	if id != want {
		t.Fatalf("MIG identity\n got %+v\nwant %+v", id, want)
	}
	for i, want := range map[int]string{0: record.ModeDisabled, 1: record.ModeEnabled} {
		if id, _ := devs[i].Identity(); id.MIGMode != want || id.PersistenceMode != record.ModeEnabled || id.ECCMode != record.ModeEnabled {
			t.Fatalf("GPU %d modes %q/%q/%q, want MIG mode %q", i, id.PersistenceMode, id.ECCMode, id.MIGMode, want)
		}
	}
	// No utilization buffers under MIG, said plainly; no driver call made.
	_, err := m.Drain(catalog.BufferGPUUtil, 0, nil)
	if !errors.Is(err, sampler.ErrNotSupported) || !strings.Contains(err.Error(), "not available under MIG") {
		t.Fatalf("drain on MIG: %v", err)
	}
	// Processes: memory without utilization (GetProcessUtilization would panic).
	ps, err := m.(sampler.ProcessSource).Processes(sampler.ProcessQuery{}, nil)
	if err != nil || len(ps) != 1 || ps[0].PID != 777 || ps[0].HasUtil || ps[0].UsedMemoryMiB != 900 || ps[0].Name != "python3" || ps[0].Type != "C" {
		t.Fatalf("MIG processes %+v, %v", ps, err)
	}
	if err := m.(sampler.EventWatcher).WatchEvents(context.Background(), func(record.Event) {}); !errors.Is(err, sampler.ErrNotSupported) {
		t.Fatalf("events on a MIG instance: %v, want ErrNotSupported (the GPU's events cover it)", err)
	}
}

func TestMigProfile(t *testing.T) {
	for name, want := range map[string]string{
		"NVIDIA H200 MIG 1g.18gb":           "1g.18gb",
		"NVIDIA A100-SXM4-40GB MIG 3g.20gb": "3g.20gb",
		"NVIDIA H200":                       "",
	} {
		if got := migProfile(name); got != want {
			t.Errorf("migProfile(%q) = %q, want %q", name, got, want)
		}
	}
}
