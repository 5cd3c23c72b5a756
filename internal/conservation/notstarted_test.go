package conservation_test

import (
	"fmt"
	"testing"

	"github.com/gpusampler/gpusampler/internal/conservation"
)

// notStarted: every disk-buffered cell's output cannot be built at start
// (control nobuild, read at build time): the agent holds it — its pump and
// disk buffer run — so what is published meanwhile waits on disk; then it
// can be built, and every record reaches it: nothing lost, nothing counted
// dropped.
var notStarted = scenario{name: "notstarted", about: "disk-buffered outputs that cannot be built at start are held, then start: nothing lost",
	cells: isDisk,
	run: func(t *testing.T, e *env) result {
		e.setControl(nil, conservation.ControlNoBuild)
		r := e.start(newScript())
		held := len(r.a.NotStarted())
		r.phase()
		r.phase()
		e.setControl(nil)
		waitFor(func() bool { return len(r.a.NotStarted()) == 0 })
		r.phase()
		r.settle(nil)
		res := finish(t, e, r)
		if held != len(e.cells) {
			for _, c := range e.cells {
				res.problems[c.name()] = append(res.problems[c.name()],
					fmt.Sprintf("%d of %d cells had not started: the scenario did not test an output that cannot start", held, len(e.cells)))
			}
		}
		return res
	},
	check: func(cell, received) func(*outcome) {
		return func(o *outcome) {
			if n := o.dropped.total(); n != 0 {
				o.problems = append(o.problems, fmt.Sprintf("%d records counted dropped while the output could not start", n))
			}
		}
	}}
