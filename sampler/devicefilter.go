package sampler

import (
	"slices"
	"strconv"

	"github.com/gpusampler/gpusampler/record"
)

// DevicesNamed returns a Config.Devices filter that keeps the devices named
// in ids, each by its index ("0") or its UUID; nil (every device) when ids
// is empty. The filter keeps its own copy of ids.
func DevicesNamed(ids []string) func(record.Device) bool {
	if len(ids) == 0 {
		return nil
	}
	want := slices.Clone(ids)
	return func(d record.Device) bool {
		return slices.Contains(want, strconv.Itoa(d.Index)) || slices.Contains(want, d.UUID)
	}
}
