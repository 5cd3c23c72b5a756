package recordpb

import (
	"testing"

	"github.com/gpusampler/gpusampler/record"
)

func TestDeviceRoundTripMIG(t *testing.T) {
	d := record.Device{Index: 9, UUID: "MIG-abc", Name: "NVIDIA H200 MIG 1g.18gb", MemoryTotalMiB: 16384, Backend: "nvml",
		MIG: true, Parent: 1, GPUInstanceID: 7, ComputeInstanceID: 0, MIGProfile: "1g.18gb", Generation: 2}
	if got := FromDevice(&d).ToSampler(); got != d {
		t.Fatalf("round trip: %+v, want %+v", got, d)
	}
}

func TestDeviceRoundTripModes(t *testing.T) {
	d := record.Device{Index: 0, UUID: "GPU-abc", Name: "NVIDIA H200", Backend: "nvml",
		PersistenceMode: record.ModeEnabled, ECCMode: record.ModeDisabled, MIGMode: record.ModeUnsupported}
	if got := FromDevice(&d).ToSampler(); got != d {
		t.Fatalf("round trip: %+v, want %+v", got, d)
	}
	// Unknown stays unknown.
	d = record.Device{Index: 1, UUID: "GPU-def"}
	if got := FromDevice(&d).ToSampler(); got != d {
		t.Fatalf("round trip: %+v, want %+v", got, d)
	}
}
