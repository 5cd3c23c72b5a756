package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/gpusampler/gpusampler/sampler"
)

// simProcess is one simulated process of a profile.
type simProcess struct {
	name, typ, cmdline string
	// memShare is the process's share of the device's used memory.
	memShare float64
	// smShare scales the device's utilization into the process's SM
	// utilization; memUtil is its memory-controller utilization at full
	// load.
	smShare, memUtil float64
}

// profileProcesses are the processes each profile runs on every GPU: one
// training process per GPU, like a torchrun job; none when idle.
var profileProcesses = map[string][]simProcess{
	"idle": nil,
	"training": {{name: "python3", typ: "C", cmdline: "python3 -m torch.distributed.run --nproc-per-node=8 train.py --model llama-8b --batch-size 16",
		memShare: 0.995, smShare: 0.98, memUtil: 46}},
	"data-stall": {{name: "python3", typ: "C", cmdline: "python3 train.py --dataloader-workers 2 --data s3://bucket/shards",
		memShare: 0.995, smShare: 0.97, memUtil: 40}},
	"launch-bound": {{name: "python3", typ: "C", cmdline: "python3 serve.py --max-batch 1 --eager",
		memShare: 0.99, smShare: 0.35, memUtil: 8}},
	"thermal": {{name: "python3", typ: "C", cmdline: "python3 train.py --model llama-70b --fsdp",
		memShare: 0.995, smShare: 0.98, memUtil: 48}},
	"memory-pressure": {
		{name: "python3", typ: "C", cmdline: "python3 train.py --model llama-70b --activation-checkpointing off",
			memShare: 0.97, smShare: 0.9, memUtil: 52},
		{name: "nvidia-cuda-mps-server", typ: "C", cmdline: "nvidia-cuda-mps-server", memShare: 0.03},
	},
	"comm-bound": {{name: "python3", typ: "C", cmdline: "python3 -m torch.distributed.run --nproc-per-node=8 train.py --model llama-8b --batch-size 2",
		memShare: 0.995, smShare: 0.5, memUtil: 20}},
}

// processPeriod is how often the simulated driver records per-process
// utilization (real drivers: about every 1/6 s, one sample per process
// kept).
const processPeriod = 200 * time.Millisecond

// Processes lists the profile's processes on this device (sampler.ProcessSource).
// PIDs are stable per seed and device. Utilization is reported once per
// sample: a process's newest sample is returned only when it is newer than
// q.Cursor.
func (d *Device) Processes(q sampler.ProcessQuery, dst []sampler.Process) ([]sampler.Process, error) {
	d.calls.Add(1)
	if d.isLost() {
		return dst, fmt.Errorf("processes: %w", sampler.ErrGPULost)
	}
	now := d.src.opts.Now()
	// The newest per-process utilization sample is at a multiple of
	// processPeriod after the epoch.
	epoch := d.epoch()
	at := epoch.Add(now.Sub(epoch) / processPeriod * processPeriod)
	ts := d.rawUS(at)
	util, active := d.load(at)
	if ph := d.phase(now); ph != nil {
		for _, p := range ph.Procs {
			pr := sampler.Process{PID: p.PID, Name: "python3", Type: "C", UsedMemoryMiB: uint64(math.Round(p.MemoryMiB)), HasMemory: true}
			if active && ts > q.Cursor {
				pr.HasUtil, pr.TimeUS, pr.SMUtil = true, ts, math.Round(p.SMUtil)
			}
			dst = append(dst, pr)
		}
		return dst, nil
	}
	used := d.memUsed(now)
	for i, p := range profileProcesses[d.src.opts.Profile] {
		pr := sampler.Process{
			PID:           uint32(2000 + mix(d.src.opts.Seed, uint64(d.index), uint64(i))%60000),
			Name:          p.name,
			Type:          p.typ,
			UsedMemoryMiB: uint64(math.Round(used * p.memShare)),
			HasMemory:     true,
		}
		if q.Cmdline {
			pr.Cmdline = sampler.TruncateCmdline(p.cmdline, q.CmdlineMax)
		}
		if active && ts > q.Cursor {
			pr.HasUtil, pr.TimeUS = true, ts
			pr.SMUtil = math.Round(clamp(util*p.smShare, 0, 100))
			pr.MemUtil = math.Round(clamp(p.memUtil*util/100, 0, 100))
		}
		dst = append(dst, pr)
	}
	return dst, nil
}
