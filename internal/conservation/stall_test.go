package conservation_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/sampler"
)

// stallWait bounds how long the stall scenario waits for the agent to stop
// once told to (a liveness bound: a stop that never comes fails, not a
// slow one). The agent's own bound is its 10 s shutdown timeout; on a
// loaded machine stopping has taken over 15 s, so the bound is generous.
const stallWait = 2 * time.Minute

// stdoutStall: an in-process stdout output writes into a pipe whose reader
// never reads, beside every cell. The stall must stay with the stdout
// output: the cells conserve, the agent stops when told to, and what stdout
// could not write is counted.
var stdoutStall = scenario{name: "stdoutstall", about: "a stdout reader that stops reading, beside every cell; then stop",
	run: func(t *testing.T, e *env) result {
		rd, wr, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		defer wr.Close()
		e.stdout = wr
		r := e.start(newScript())
		for range 4 {
			r.phase()
		}
		r.settle(func(c cell) bool { return brokenReason("stdoutstall", c) != "" })
		// The pipe holds 64 KiB: four phases of line protocol overflow it,
		// so the stdout output is stuck in a write by now or soon.
		res := result{problems: map[string][]string{}}
		stopped := make(chan result, 1)
		go func() { stopped <- finish(t, e, r) }()
		select {
		case res = <-stopped:
		case <-time.After(stallWait):
			rd.Close() // unblock the write, so that the run ends
			res = <-stopped
			res.problems["stdout"] = append(res.problems["stdout"],
				fmt.Sprintf("the agent did not stop within %v of being told to while a stdout reader stalled", stallWait))
		}
		var st sampler.OutputStats
		for _, o := range r.a.Engine().Stats().Outputs {
			if o.Name == "stdout" {
				st = o
			}
		}
		if st.Published != st.Delivered+st.Dropped+st.Failed+st.Filtered {
			res.problems["stdout"] = append(res.problems["stdout"], fmt.Sprintf(
				"stdout samples: published %d != delivered %d + dropped %d + failed %d + filtered %d (%d unaccounted)",
				st.Published, st.Delivered, st.Dropped, st.Failed, st.Filtered,
				int64(st.Published)-int64(st.Delivered+st.Dropped+st.Failed+st.Filtered)))
		}
		res.rows = append(res.rows, fmt.Sprintf("%-11s %-20s published %5d delivered %5d dropped %5d (samples: ring %d, failed %d)",
			"stdoutstall", "stdout", st.Published, st.Delivered, st.Dropped+st.Failed, st.Dropped, st.Failed))
		return res
	}}
