package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// refusing is a device that can neither list processes nor watch events.
type refusing struct{ sampler.DeviceSource }

func (refusing) Processes(sampler.ProcessQuery, []sampler.Process) ([]sampler.Process, error) {
	return nil, fmt.Errorf("list processes: %w", sampler.ErrNotSupported)
}
func (refusing) WatchEvents(context.Context, func(record.Event)) error {
	return fmt.Errorf("watch events: %w", sampler.ErrNoPermission)
}

// broken fails for real.
type broken struct{ sampler.DeviceSource }

func (broken) Processes(sampler.ProcessQuery, []sampler.Process) ([]sampler.Process, error) {
	return nil, fmt.Errorf("list processes: %w", sampler.ErrGPULost)
}

func TestCheckProcessesAndEvents(t *testing.T) {
	src, err := sim.New(sim.Options{GPUs: 1, Profile: "training"})
	if err != nil {
		t.Fatal(err)
	}
	devs, _ := src.Devices()
	var r report
	checkProcesses(&r, devs[0], 0, "test", 0)
	checkEvents(&r, devs[0], 0, 50*time.Millisecond)
	if len(r.Failures) != 0 || len(r.Unsupported) != 0 || len(r.Notes) != 2 || !strings.Contains(r.Notes[0], `"python3" type C`) {
		t.Fatalf("sim: %+v", r)
	}
	r = report{}
	checkProcesses(&r, refusing{devs[0]}, 0, "test", 0)
	checkEvents(&r, refusing{devs[0]}, 0, 50*time.Millisecond)
	if len(r.Failures) != 0 || len(r.Unsupported) != 2 {
		t.Fatalf("refusing device: want 2 unsupported-here, no failures: %+v", r)
	}
	r = report{}
	checkProcesses(&r, broken{devs[0]}, 0, "test", 0)
	if len(r.Failures) != 1 {
		t.Fatalf("broken device: want a failure: %+v", r)
	}
}
