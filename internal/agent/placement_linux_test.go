//go:build linux

package agent_test

import (
	"context"
	"log/slog"
	"os/exec"
	"reflect"
	stdslices "slices"
	"strconv"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/diagnose"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// hostedSource is the simulator's GPUs as if real (not marked simulated),
// each running one real process: what a driver reports for a job on the
// GPU.
type hostedSource struct {
	*sim.Source
	pid uint32
}

func (s *hostedSource) Devices() ([]sampler.DeviceSource, error) {
	devs, err := s.Source.Devices()
	if err != nil {
		return nil, err
	}
	out := make([]sampler.DeviceSource, len(devs))
	for i, d := range devs {
		out[i] = &hostedDevice{Device: d.(*sim.Device), pid: s.pid}
	}
	return out, nil
}

type hostedDevice struct {
	*sim.Device
	pid uint32
}

func (d *hostedDevice) Identity() (record.Device, error) {
	id, err := d.Device.Identity()
	id.Simulated = false
	return id, err
}

func (d *hostedDevice) Processes(_ sampler.ProcessQuery, dst []sampler.Process) ([]sampler.Process, error) {
	return append(dst, sampler.Process{PID: d.pid, Name: "sleep", Type: "C"}), nil
}

// `run --diagnose` (the agent with Diagnose) judges NUMA placement live: a
// real process on GPU 0, pinned with taskset to a CPU of GPU 1's node, is a
// numa_placement finding on GPU 0 with the field guide's numactl advice,
// and on no other GPU.
func TestLiveNUMAPlacement(t *testing.T) {
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skip("taskset not installed")
	}
	src, err := sim.New(sim.Options{GPUs: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := src.Devices()
	near, _ := devs[0].(sampler.CPUAffinityReporter).CPUAffinity()
	far, _ := devs[1].(sampler.CPUAffinityReporter).CPUAffinity()
	if stdslices.Equal(near, far) {
		t.Skip("one CPU: every GPU is close to it")
	}
	pin := far[len(far)-1]
	child := exec.Command(taskset, "-c", strconv.Itoa(pin), "sleep", "300")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	pid := child.Process.Pid
	// taskset sets the affinity, then executes sleep in the same process.
	for deadline := time.Now().Add(time.Minute); ; {
		if cpus, err := diagnose.ProcessCPUs(pid); err == nil && stdslices.Equal(cpus, []int{pin}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("taskset never pinned process %d to CPU %d", pid, pin)
		}
		time.Sleep(5 * time.Millisecond)
	}

	findings := make(chan record.Event, 64)
	reg := outputs.NewRegistry(outputs.Kind{
		Kind:  "findings",
		Parse: func(*config.Table) any { return nil },
		Build: func(*outputs.Block, outputs.BuildEnv) (record.Output, error) { return findingsOut(findings), nil },
	})
	cfg := mustParse(t, reg, "[agent]\nstats_interval = \"1h\"\n[sampler]\nprocesses = true\nprocess_interval = \"1s\"\n"+
		"[[outputs.findings]]\nname = \"f\"\nflush_interval = \"10ms\"\n")
	a, err := agent.New(&hostedSource{Source: src, pid: uint32(pid)}, cfg, agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler), Diagnose: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var got []record.Event
	liveness := time.After(2 * time.Minute)
	for len(got) == 0 {
		select {
		case e := <-findings:
			if attrOf(e, "finding") == diagnose.FindingNUMA {
				got = append(got, e)
			}
		case err := <-done:
			t.Fatalf("agent ended: %v", err)
		case <-liveness:
			cancel()
			t.Fatal("no NUMA-placement finding in 2 minutes")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(findings)
	for e := range findings {
		if attrOf(e, "finding") == diagnose.FindingNUMA {
			got = append(got, e)
		}
	}
	gc, p := diagnose.CPUList(near), strconv.Itoa(pid)
	msg := "process " + p + " runs on CPUs " + strconv.Itoa(pin) + ", none of them close to GPU 0 (its CPUs: " + gc +
		"): every copy and kernel launch crosses the socket interconnect. Bind it to the GPU's CPUs, as the field guide does: " +
		"CUDA_VISIBLE_DEVICES=0 numactl -C " + gc + " CMD (or taskset -c " + gc + " CMD)"
	attrs := func(state string) []record.Attr {
		return []record.Attr{{Key: "finding", Value: diagnose.FindingNUMA}, {Key: "state", Value: state},
			{Key: "pid", Value: p}, {Key: "process_cpus", Value: strconv.Itoa(pin)}, {Key: "gpu_cpus", Value: gc}}
	}
	if len(got) != 2 {
		t.Fatalf("NUMA findings %+v, want one opened and closed on GPU 0", got)
	}
	start := got[0].StartNS
	want := []record.Event{
		{Kind: record.EventFinding, Device: 0, StartNS: start, Message: msg, Attrs: attrs("open")},
		{Kind: record.EventFinding, Device: 0, StartNS: start, EndNS: got[1].EndNS, Message: msg, Attrs: attrs("closed")},
	}
	for i := range got {
		got[i].Fields = nil
	}
	if !reflect.DeepEqual(got, want) || got[1].EndNS < start {
		t.Fatalf("NUMA findings\n%+v\nwant\n%+v", got, want)
	}
}

// findingsOut passes every finding event to a channel.
type findingsOut chan record.Event

func (o findingsOut) Write(_ context.Context, b *record.Batch) error {
	for _, e := range b.Events {
		if e.Kind == record.EventFinding {
			o <- e.Clone()
		}
	}
	return nil
}

func (o findingsOut) Close() error { return nil }

func attrOf(e record.Event, k string) string {
	for _, a := range e.Attrs {
		if a.Key == k {
			return a.Value
		}
	}
	return ""
}
