package sim

import (
	"fmt"
	"time"
)

// Phase is one step of a device's script (Options.Script): from the end
// of the previous phase (the source's start for the first) until Until
// after the source's start, the device runs at Util percent with Procs
// on it. The last phase lasts on. A Util of 0 idles the engines (the
// utilization buffers then hold nothing, as a real driver's do).
type Phase struct {
	Until time.Duration
	Util  float64
	Procs []ScriptProcess
}

// ScriptProcess is one process of a Phase: its PID, its SM utilization in
// percent (reported as is while the device is busy, 0 while it idles) and
// the memory it holds; the device's memory used is the processes' sum.
type ScriptProcess struct {
	PID       uint32
	SMUtil    float64
	MemoryMiB float64
}

// checkScript reports a script whose phases are out of order or whose
// values are out of range.
func checkScript(phases []Phase) error {
	if len(phases) == 0 {
		return fmt.Errorf("no phase")
	}
	for i, p := range phases {
		if i > 0 && p.Until <= phases[i-1].Until && i < len(phases)-1 {
			return fmt.Errorf("phase %d ends at %v, not after phase %d (%v)", i, p.Until, i-1, phases[i-1].Until)
		}
		if p.Util < 0 || p.Util > 100 {
			return fmt.Errorf("phase %d: util %v: must be within 0–100", i, p.Util)
		}
		for _, pr := range p.Procs {
			if pr.SMUtil < 0 || pr.SMUtil > 100 || pr.MemoryMiB < 0 {
				return fmt.Errorf("phase %d: process %d: sm util %v or memory %v out of range", i, pr.PID, pr.SMUtil, pr.MemoryMiB)
			}
		}
	}
	return nil
}

// phase returns the device's scripted phase at t, nil without a script.
func (d *Device) phase(at time.Time) *Phase {
	phases := d.src.opts.Script[d.index]
	if len(phases) == 0 {
		return nil
	}
	e := at.Sub(d.src.start)
	for i := range phases {
		if e < phases[i].Until {
			return &phases[i]
		}
	}
	return &phases[len(phases)-1]
}
