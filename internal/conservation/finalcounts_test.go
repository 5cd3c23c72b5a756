package conservation_test

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/record"
)

// finalCounts: after a clean stop, the counters the final stats report
// for each cell equal what its sink holds. The recorder's own counters
// (recorded_batches, recorded_records: for a plugin cell read over the
// plugin boundary, the final Health answer after its Close) must equal the
// ok batches and their records in the record file, the final flush
// included; a raw cell's engine counter "delivered" must equal the samples
// in it. A phase with the sinks down comes first, so that the refused
// writes (down lines) must not be counted as taken.
var finalCounts = scenario{name: "finalcounts",
	about: "a phase, the sinks down for a phase, up again, a phase, stop: the final stats' counters of each cell equal what its sink holds",
	run: func(t *testing.T, e *env) result {
		e.stats = &lockedBuffer{}
		r := e.start(newScript())
		r.phase()
		r.settle(nil)
		e.setControl(nil, conservation.ControlDown)
		r.phase()
		r.awaitDown(2)
		e.setControl(nil)
		r.phase()
		r.settle(nil)
		res := finish(t, e, r)
		final := finalStats(e.stats.String())
		if final == nil {
			t.Fatalf("no final stats report:\n%s", e.stats.String())
		}
		for _, c := range e.cells {
			n := c.name()
			bs, _, err := conservation.ReadFile(e.recordFile(n, e.run))
			if err != nil {
				t.Fatal(err)
			}
			var batches, records, samples uint64
			for _, b := range bs {
				if b.State != conservation.StateOK {
					continue
				}
				batches++
				records += uint64(len(b.Devices) + len(b.Samples) + len(b.Summaries) + len(b.Events))
				samples += uint64(len(b.Samples))
			}
			got, ok := final[n]
			if !ok {
				res.problems[n] = append(res.problems[n], "not in the final stats report")
				continue
			}
			want := map[string]uint64{conservation.FieldRecordedBatches: batches, conservation.FieldRecordedRecords: records}
			if c.mode == "raw" {
				want["delivered"] = samples
			}
			for k, v := range want {
				if got[k] != v {
					res.problems[n] = append(res.problems[n], fmt.Sprintf("final stats report %s %d, the sink holds %d", k, got[k], v))
				}
			}
			res.rows = append(res.rows, fmt.Sprintf("%-17s %-20s final %s=%d %s=%d delivered=%d; sink %d batches %d records %d samples",
				path.Base(t.Name()), n, conservation.FieldRecordedBatches, got[conservation.FieldRecordedBatches],
				conservation.FieldRecordedRecords, got[conservation.FieldRecordedRecords], got["delivered"], batches, records, samples))
		}
		return res
	},
	check: noDropsCheck("across an outage the buffers and pumps should ride out")}

// finalStats parses the agent's final stats report (the text after the
// last "gpusampler final stats:") into each output's counters: the
// engine's (published, delivered, ...) from its "output NAME" line and
// the output's own key=value counters from the lines under it. A counter
// that is zero is not printed, and reads as zero. It returns nil when
// there is no final report.
func finalStats(text string) map[string]map[string]uint64 {
	i := strings.LastIndex(text, "gpusampler final stats:")
	if i < 0 {
		return nil
	}
	out := map[string]map[string]uint64{}
	var cur map[string]uint64
	for line := range strings.SplitSeq(text[i:], "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "output" && strings.HasPrefix(line, "  output "):
			cur = map[string]uint64{}
			out[f[1]] = cur
			for j := 2; j+1 < len(f); j += 2 {
				if v, err := strconv.ParseUint(f[j+1], 10, 64); err == nil {
					cur[f[j]] = v
				}
			}
		case strings.HasPrefix(line, "  gpu "):
			cur = nil
		case cur != nil && strings.HasPrefix(line, strings.Repeat(" ", 22)):
			for _, kv := range f {
				if k, v, ok := strings.Cut(kv, "="); ok {
					if n, err := strconv.ParseUint(v, 10, 64); err == nil {
						cur[k] = n
					}
				}
			}
		}
	}
	return out
}

// finalSelf: the final self-metrics (emitted after every output's final
// flush, before the events emitted then are flushed) report, for each
// cell, the output's own counters as its sink held them then: the
// recorder's recorded_batches and recorded_records in the cell's last
// output_detail self-metrics event equal the ok batches, and their
// records, that the sink took before the batch carrying that event.
var finalSelf = scenario{name: "finalself",
	about: "three phases held by the cells (flush_interval 10m), buffered sinks slow to answer (lag), plugins not probed during the run, stop: each cell's last output_detail self-metrics event, in its own sink, counts what the sink took before it (the final flush included)",
	run: func(t *testing.T, e *env) result {
		// The cells flush only when stopped: the final flush carries
		// every sample, and the final self-metrics must count it.
		e.flush = "10m"
		// Behind a buffer, a sink slow to answer (every Write waits
		// LagDelay): the final self-metrics must wait for the buffer's
		// delivery, not race it. (Unbuffered sinks answer at once, so
		// that their pumps do not hold the stop while a buffer delivers.)
		e.setControl(func(c cell) bool { return c.buf != "none" }, conservation.ControlLag)
		// No periodic health probe during the run: a plugin's own
		// counters must be read after its final flush, not by luck.
		e.health = "1h"
		// Room for the final delivery on a loaded machine: the buffers'
		// final delivery waits at most the write and close timeouts.
		e.timeout = "5s"
		r := e.start(newScript())
		for range 3 {
			r.phase()
		}
		res := finish(t, e, r)
		for _, c := range e.cells {
			n := c.name()
			bs, _, err := conservation.ReadFile(e.recordFile(n, e.run))
			if err != nil {
				t.Fatal(err)
			}
			// the cell's last output_detail event, and what the sink
			// took before its batch
			var last *record.Event
			var before, beforeRecords, batches, records uint64
			// data (samples, summaries) the sink took in or after the
			// batch carrying the last output_detail event: the final
			// flush came after the final self-metrics
			var dataAfter int
			for _, b := range bs {
				if b.State != conservation.StateOK {
					continue
				}
				for i, ev := range b.Events {
					if ev.Kind == record.EventSelf && attrOf(ev, "scope") == "output_detail" && attrOf(ev, "output") == n &&
						(last == nil || ev.StartNS >= last.StartNS) {
						last = &b.Events[i]
						before, beforeRecords = batches, records
						dataAfter = 0
					}
				}
				if last != nil {
					dataAfter += len(b.Samples) + len(b.Summaries)
				}
				batches++
				records += uint64(len(b.Devices) + len(b.Samples) + len(b.Summaries) + len(b.Events))
			}
			if last == nil {
				res.problems[n] = append(res.problems[n], "no output_detail self-metrics event reached the sink")
				continue
			}
			got := map[string]uint64{}
			for _, f := range last.Fields {
				got[f.Key] = uint64(f.Value)
			}
			if got[conservation.FieldRecordedBatches] != before || got[conservation.FieldRecordedRecords] != beforeRecords {
				res.problems[n] = append(res.problems[n], fmt.Sprintf("the final self-metrics report %s %d %s %d, the sink had taken %d batches, %d records before them (%d batches in all)",
					conservation.FieldRecordedBatches, got[conservation.FieldRecordedBatches], conservation.FieldRecordedRecords,
					got[conservation.FieldRecordedRecords], before, beforeRecords, batches))
			}
			if dataAfter > 0 {
				res.problems[n] = append(res.problems[n], fmt.Sprintf("%d samples or summaries reached the sink with or after the final self-metrics: they do not count the final flush", dataAfter))
			}
			res.rows = append(res.rows, fmt.Sprintf("%-17s %-20s final self-metrics %s=%d %s=%d; sink before them %d batches %d records",
				path.Base(t.Name()), n, conservation.FieldRecordedBatches, got[conservation.FieldRecordedBatches],
				conservation.FieldRecordedRecords, got[conservation.FieldRecordedRecords], before, beforeRecords))
		}
		return res
	},
	check: noDropsCheck("without a fault")}

// finalSelfShared is finalSelf on the shared hop: the cells are instances
// in one outputs process, as the built-in network outputs run (their own
// counters read by each instance's health probe).
var finalSelfShared = scenario{name: "finalselfshared",
	about:  "finalself on the shared hop (every cell an instance in one plugin process)",
	shared: true, run: finalSelf.run, check: finalSelf.check}

// finalCountsShared is finalCounts on the shared hop.
var finalCountsShared = scenario{name: "finalcountsshared",
	about:  "finalcounts on the shared hop (every cell an instance in one plugin process)",
	shared: true, run: finalCounts.run, check: finalCounts.check}
