package bench

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

func TestNUMAPlacement(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	devs := []record.Device{{Index: 0}, {Index: 1}, {Index: 2}}
	// GPU 0 on CPUs 0-7, GPU 1 on 8-15, GPU 2's affinity unknown.
	gpuCPUs := map[int][]int{0: {0, 1, 2, 3, 4, 5, 6, 7}, 1: {8, 9, 10, 11, 12, 13, 14, 15}}
	ex := func(run int, cpus ...int) execution {
		return execution{cmd: 0, run: run, cpus: cpus, start: t0.Add(time.Duration(run) * time.Second),
			end: t0.Add(time.Duration(run)*time.Second + 500*time.Millisecond)}
	}
	for _, tc := range []struct {
		name  string
		execs []execution
		want  []Diagnosis
	}{
		{name: "pinned to GPU 1's node", execs: []execution{ex(0, 8, 9), ex(1, 8, 9)},
			want: []Diagnosis{{Finding: FindingNUMA, Kind: "NUMA placement", Device: 0, StartNS: t0.UnixNano(),
				EndNS: t0.Add(1500 * time.Millisecond).UnixNano(), Evidence: map[string]string{"process_cpus": "8-9", "gpu_cpus": "0-7"},
				Runs: []int{1, 2}}}},
		{name: "unbound: may run anywhere", execs: []execution{ex(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)}},
		{name: "one CPU of each node", execs: []execution{ex(0, 7, 8)}},
		{name: "affinity not read", execs: []execution{ex(0)}},
		{name: "another command's run", execs: []execution{{cmd: 1, run: 0, cpus: []int{9}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := numaPlacement(tc.execs, 0, devs, gpuCPUs)
			for i := range got {
				if m := got[i].Message; !strings.Contains(m, "numactl -C 0-7") || !strings.Contains(m, "CUDA_VISIBLE_DEVICES=0") {
					t.Errorf("message without the field guide's advice: %s", m)
				}
				got[i].Message = ""
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("diagnoses %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// The command's diagnoses judge the GPUs its processes were seen on: a
// benchmark PID in a device's process list during one of the command's
// runs. Other users' processes, processes seen outside the command's runs,
// and no process information at all leave the choice to every device (nil).
func TestCommandDevices(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	execs := []execution{
		{cmd: 0, run: 0, start: t0, end: t0.Add(2 * time.Second)},
		{cmd: 1, run: 0, start: t0.Add(3 * time.Second), end: t0.Add(5 * time.Second)},
	}
	proc := func(dev, pid int, at time.Duration) record.Event {
		return record.Event{Kind: record.EventProcess, Device: dev, StartNS: t0.Add(at).UnixNano(), EndNS: t0.Add(at).UnixNano(),
			Fields: []record.Field{{Key: record.ProcessFieldPID, Value: float64(pid)}}}
	}
	ours := func(pid int) bool { return pid == 10 || pid == 11 }
	events := []record.Event{
		proc(1, 10, time.Second),           // command 0's process on GPU 1
		proc(0, 20, time.Second),           // another user's on GPU 0
		proc(0, 11, 4*time.Second),         // command 1's on GPU 0
		proc(2, 10, 2500*time.Millisecond), // between runs
		{Kind: record.EventFinding, Device: 3, StartNS: t0.Add(time.Second).UnixNano()},
	}
	for _, tc := range []struct {
		ci     int
		events []record.Event
		want   map[int]bool
	}{
		{0, events, map[int]bool{1: true}},
		{1, events, map[int]bool{0: true}},
		{0, events[1:2], nil},
		{0, nil, nil},
	} {
		if got := commandDevices(tc.events, ours, execs, tc.ci); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("command %d, %d events: devices %v, want %v", tc.ci, len(tc.events), got, tc.want)
		}
	}
}
