// Package recordtest holds test fixtures for the record contract: a batch
// that sets every field of every record kind, and reflection helpers that
// prove a fixture leaves no field zero. Tests of every hop that carries a
// batch (buffers, plugin protocol, encoders) compare whole records with it.
package recordtest

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// FullBatch returns a batch in which every field of every record kind is
// set to a value other than its zero value: samples (one a point read),
// summaries, device identities (a physical GPU with its modes and a MIG
// instance), events with attributes and fields (an XID, a process record,
// a self-metrics record), and the identity it was sampled under.
func FullBatch() *record.Batch {
	return &record.Batch{
		Seq: 1<<40 + 7,
		Devices: []record.Device{
			{Index: 1, UUID: "GPU-5a1b", Name: "NVIDIA H200", PCIBusID: "00000000:19:00.0", Serial: "1654922006536",
				MemoryTotalMiB: 143771, DriverVersion: "570.86.15", CUDAVersion: "12.8", VBIOSVersion: "96.00.89.00.01",
				Backend: "nvml", Simulated: true,
				SlowdownTempC: 90, ShutdownTempC: 95, MaxOperatingTempC: 87, MemoryMaxTempC: 105,
				MIG: true, Parent: 2, GPUInstanceID: 7, ComputeInstanceID: 3, MIGProfile: "1g.18gb",
				PersistenceMode: record.ModeEnabled, ECCMode: record.ModeDisabled, MIGMode: record.ModeUnsupported,
				Architecture: "Hopper", ComputeMode: "Default",
				Attribution: record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer", HPCJob: "4711"},
				Generation:  3},
		},
		Samples: []record.Sample{
			{TimeNS: 1_700_000_000_123_456_789, Value: 312.5, Device: 1, Metric: catalog.MetricPowerDraw, Flags: record.FlagPointRead},
			{TimeNS: 1_700_000_000_100_000_000, Value: -0.25, Device: 65535, Metric: 65535, Flags: 65535},
		},
		Events: []record.Event{
			{Kind: record.EventXID, Device: 1, StartNS: 11, EndNS: 12, Message: "xid 79",
				Attrs: []record.Attr{{Key: "xid", Value: "79"}}, Fields: []record.Field{{Key: "xid", Value: 79, Int: true}}},
			{Kind: record.EventProcess, Device: 1, StartNS: 13, EndNS: 13, Message: "process",
				Attrs:  []record.Attr{{Key: record.ProcessAttrName, Value: "python3"}, {Key: record.ProcessAttrType, Value: "compute"}},
				Fields: []record.Field{{Key: record.ProcessFieldPID, Value: 4242, Int: true}, {Key: record.ProcessFieldSMUtil, Value: 37.5}}},
			{Kind: record.EventSelf, Device: -1, StartNS: 14, EndNS: 14, Message: "self",
				Attrs:  []record.Attr{{Key: "scope", Value: "buffer"}, {Key: "output", Value: "influxdb"}},
				Fields: []record.Field{{Key: "buffered_records", Value: 13536, Int: true, Gauge: true}, {Key: "oldest_age_seconds", Value: 20.5}}},
		},
		Summaries: []record.Summary{
			{StartNS: 1_700_000_000_000_000_000, IntervalNS: 5e9, Mean: 300.5, Min: 250, Max: 350, Last: 301, Count: 50,
				Device: 1, Metric: catalog.MetricTempGPU, Hist: &record.ExpHistogram{Scale: 3, ZeroCount: 1,
					PositiveOffset: 65, NegativeOffset: -4, Positive: []uint64{10, 0, 30}, Negative: []uint64{8}, NonFinite: 1}},
		},
		Origin: &record.Origin{Host: "node7", Tags: map[string]string{"rack": "r1", "cluster": "west"}},
	}
}

// ZeroFields returns the paths of every zero-valued field reachable from v
// (structs, slices, pointers): empty when v sets every field.
func ZeroFields(v any) []string { return zeroFields(reflect.ValueOf(v), reflect.TypeOf(v).Name()) }

func zeroFields(v reflect.Value, path string) []string {
	switch v.Kind() {
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			out = append(out, zeroFields(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return out
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		var out []string
		for i := range v.Len() {
			out = append(out, zeroFields(v.Index(i), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	default:
		if v.IsZero() {
			return []string{path}
		}
		return nil
	}
}

// UnsetFields returns the field paths (slice indexes left out) that no
// element reachable from v sets to a non-zero value: a field that is zero
// in one element (a self event's Device) is fine as long as another element
// sets it. Empty when v exercises every field.
func UnsetFields(v any) []string {
	set := map[string]bool{}
	for _, p := range zeroFieldsAll(reflect.ValueOf(v), "") {
		set[p.path] = set[p.path] || !p.zero
	}
	var out []string
	for _, p := range slices.Sorted(maps.Keys(set)) {
		ok := set[p]
		if !ok {
			out = append(out, p)
		}
	}
	return out
}

type fieldSeen struct {
	path string
	zero bool
}

func zeroFieldsAll(v reflect.Value, path string) []fieldSeen {
	switch v.Kind() {
	case reflect.Struct:
		var out []fieldSeen
		for i := range v.NumField() {
			out = append(out, zeroFieldsAll(v.Field(i), path+"."+v.Type().Field(i).Name)...)
		}
		return out
	case reflect.Slice:
		if v.Len() == 0 {
			return []fieldSeen{{path, true}}
		}
		var out []fieldSeen
		for i := range v.Len() {
			out = append(out, zeroFieldsAll(v.Index(i), path+"[]")...)
		}
		return out
	case reflect.Pointer:
		if v.IsNil() {
			return []fieldSeen{{path, true}}
		}
		return zeroFieldsAll(v.Elem(), path)
	default:
		return []fieldSeen{{path, v.IsZero()}}
	}
}
