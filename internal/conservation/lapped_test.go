package conservation_test

import (
	"fmt"
	"testing"

	"github.com/gpusampler/gpusampler/internal/conservation"
)

// lapped: small rings (256 samples per device) and unbuffered raw cells
// whose sinks are down for five phases (500 samples per device): the
// rings drop what the stalled pumps cannot hold, and every sample missing
// at a sink must be one the pump counted as dropped. The witness keeps up.
var lapped = scenario{name: "lapped", about: "ring_size 256, unbuffered raw sinks down for five phases: the ring drops, counted",
	cells: func(c cell) bool { return c.buf == "none" && c.mode == "raw" },
	run: func(t *testing.T, e *env) result {
		e.ring = 256
		r := e.start(newScript())
		r.phase()
		r.settle(nil)
		e.setControl(nil, conservation.ControlDown)
		for range 5 { // the held batch takes one phase; the lanes (256) cannot hold the next four (400)
			r.phase()
		}
		r.awaitDown(2)
		e.setControl(nil)
		r.phase()
		r.settle(nil)
		return finish(t, e, r)
	},
	check: func(c cell, got received) func(*outcome) {
		return func(o *outcome) {
			if o.dropped.RingDropped == 0 {
				o.problems = append(o.problems, fmt.Sprintf("the ring dropped nothing (%+v): the scenario did not lap it", o.dropped))
			}
		}
	}}

// capped: memory buffers capped at 300 records, sinks down for four phases
// (800 samples): the buffers drop their oldest batches at the cap, and
// every record missing at a sink must be one the buffer counted.
var capped = scenario{name: "capped", about: "buffer_max_records 300, memory-buffered sinks down for four phases: the buffer drops at its cap, counted",
	cells: func(c cell) bool { return c.buf == "memory" },
	run: func(t *testing.T, e *env) result {
		e.maxRecords = 300
		r := e.start(newScript())
		r.phase()
		r.settle(nil)
		e.setControl(nil, conservation.ControlDown)
		for range 4 {
			r.phase()
		}
		r.awaitDown(2)
		e.setControl(nil)
		r.phase()
		r.settle(func(c cell) bool { return brokenReason("capped", c) != "" })
		return finish(t, e, r)
	},
	check: func(c cell, got received) func(*outcome) {
		return func(o *outcome) {
			// At the cap the buffer drops its oldest batches; a batch
			// larger than the cap alone (two phases in one flush) is
			// refused and counted by the pump as failed.
			if o.dropped.total() == 0 && c.mode == "raw" {
				o.problems = append(o.problems, fmt.Sprintf("nothing dropped at the buffer's cap (%+v)", o.dropped))
			}
		}
	}}
