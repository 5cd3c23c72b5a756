package sampler_test

import (
	"testing"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

func TestDevicesNamed(t *testing.T) {
	if sampler.DevicesNamed(nil) != nil {
		t.Error("DevicesNamed(nil) is not nil (every device)")
	}
	ids := []string{"1", "GPU-x"}
	f := sampler.DevicesNamed(ids)
	ids[0] = "7" // the filter keeps its own copy
	for _, tc := range []struct {
		d    record.Device
		want bool
	}{{record.Device{Index: 1}, true}, {record.Device{Index: 0, UUID: "GPU-x"}, true}, {record.Device{Index: 2, UUID: "GPU-y"}, false}} {
		if f(tc.d) != tc.want {
			t.Errorf("filter(%+v) = %v", tc.d, !tc.want)
		}
	}
}
