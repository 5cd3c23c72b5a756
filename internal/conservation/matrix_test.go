package conservation_test

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/record"
)

// knownBroken lists the matrix cells ("scenario/cell", path.Match
// patterns) that fail today, each with the reason. A listed cell that
// fails is logged, not failed; a listed cell that passes is logged as
// fixed, so that its entry can go. The goal is an empty table.
var knownBroken = map[string]string{}

// brokenReason returns why scenario/cell is known to fail (every matching
// entry's reason), or "".
func brokenReason(scenario string, c cell) string { return brokenID(scenario + "/" + c.name()) }

// brokenID is brokenReason for an id "scenario/name".
func brokenID(id string) string {
	var reasons []string
	for k, r := range knownBroken {
		if ok, _ := path.Match(k, id); ok {
			reasons = append(reasons, r)
		}
	}
	slices.Sort(reasons)
	return strings.Join(reasons, "; ")
}

// outcome is one cell's result in one scenario.
type outcome struct {
	scenario string
	cell     cell
	// Published records (every kind, as the witness received them; in
	// aggregate cells the summaries of the published samples instead of
	// the samples), Delivered of them to the sink, Dropped as counted by
	// the pump, buffer and aggregation counters.
	published, delivered uint64
	dropped              counts
	missing, extra       bag
	duplicates, torn     int
	problems             []string
}

func (o outcome) pass() bool { return len(o.problems) == 0 }

// check compares one cell's sink with the witness.
func check(t *testing.T, scenario string, c cell, witness []conservation.Batch, got received, cnt counts,
	stopNS int64, extraCheck func(*outcome)) outcome {
	o := outcome{scenario: scenario, cell: c, dropped: cnt, duplicates: got.duplicates, torn: got.torn}
	want := contents(witness)
	if c.mode == "agg" {
		var samples []record.Sample
		for r, n := range want {
			if r.kind == "sample" {
				delete(want, r)
				var s record.Sample
				mustUnmarshal(r.key, &s)
				for range n {
					samples = append(samples, s)
				}
			}
		}
		for _, s := range summarize(samples, phaseSpan) {
			want.add("summary", s)
		}
	}
	if isOTLP(c) {
		want = projectOTLP(want)
	}
	have := contents(got.ok)
	o.missing, o.extra = want.minus(have), have.minus(want)
	// Self-metrics stamped after the stop began may reach some outputs and
	// not others (each pump takes its last events when it stops).
	for _, b := range []bag{o.missing, o.extra, want} {
		for r := range b {
			if r.kind == "event" {
				var ev record.Event
				mustUnmarshal(r.key, &ev)
				if ev.Kind == record.EventSelf && ev.StartNS >= stopNS {
					delete(b, r)
				}
			}
		}
	}
	o.published = uint64(want.len())
	o.delivered = o.published - uint64(o.missing.len())
	if n := o.extra.len(); n > 0 {
		// Tell a record received more often than published (delivered
		// again in a batch that is not a copy of the first, as a retry
		// after a write that timed out yet landed) from one never
		// published.
		again := 0
		for r, k := range o.extra {
			if want[r] > 0 {
				again += k
			}
		}
		o.problems = append(o.problems, fmt.Sprintf("%d records received that were not published (or differ in a field), %d of them published records received again: %v;\n\t%s",
			n, again, o.extra.byKind(), o.extra.sample(6)))
	}
	if m, d := uint64(o.missing.len()), cnt.total(); m != d {
		o.problems = append(o.problems, fmt.Sprintf("%d records published and not received %v, but %d counted dropped (%+v);\n\t%s",
			m, o.missing.byKind(), d, cnt, o.missing.sample(6)))
	}
	for i, session := range got.sessions {
		if p := identityBeforeData(session); p != "" && !isOTLP(c) {
			o.problems = append(o.problems, fmt.Sprintf("run %d: %s", i+1, p))
		}
	}
	if extraCheck != nil {
		extraCheck(&o)
	}
	return o
}

// identityBeforeData checks that every sample or summary reached the sink
// after (or with) its device's identity.
func identityBeforeData(batches []conservation.Batch) string {
	known := map[uint16]bool{}
	missing := map[uint16]int{}
	for _, b := range batches {
		for _, d := range b.Devices {
			known[uint16(d.Index)] = true
		}
		for _, s := range b.Samples {
			if !known[s.Device] {
				missing[s.Device]++
			}
		}
		for _, s := range b.Summaries {
			if !known[s.Device] {
				missing[s.Device]++
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("records arrived before (or without) their device's identity: %v (device: records)", missing)
	}
	return ""
}

func mustUnmarshal(s string, v any) {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		panic(err)
	}
}

// scenario is one run of the matrix under one fault.
type scenario struct {
	name  string
	about string
	cells func(cell) bool
	// shared runs the shared hop's cells (all of them, in one plugin
	// process) instead.
	shared bool
	// run drives the agent and returns the witness batches, each cell's
	// received batches and counts, and when the stop began.
	run func(t *testing.T, e *env) result
	// check adds scenario-specific checks to a cell's outcome.
	check func(c cell, got received) func(*outcome)
}

type result struct {
	witness  []conservation.Batch
	received map[string]received
	counts   map[string]counts
	stopNS   int64
	// samples the scripts published; runs the agent runs
	samples []record.Sample
	runs    int
	// problems found while running, per cell (or "stdout")
	problems map[string][]string
	// rows are extra lines for the summary table
	rows []string
}

// finish stops r and reads every file of the env's runs so far.
func finish(t *testing.T, e *env, rs ...*running) result {
	res := result{received: map[string]received{}, counts: map[string]counts{}, problems: map[string][]string{}}
	last := rs[len(rs)-1]
	last.awaitSelf()
	for _, r := range rs {
		for c, p := range r.problems {
			res.problems[c] = append(res.problems[c], p...)
		}
	}
	res.stopNS = time.Now().UnixNano()
	for _, r := range rs {
		res.samples = append(res.samples, r.src.Samples(r.src.First, r.src.Released())...)
	}
	res.runs = e.run
	res.counts = last.stop()
	var wfiles []string
	for run := 1; run <= e.run; run++ {
		wfiles = append(wfiles, e.recordFile("witness", run))
	}
	w := readReceived(t, wfiles...)
	res.witness = w.ok
	for _, c := range e.cells {
		var files []string
		for run := 1; run <= e.run; run++ {
			files = append(files, e.recordFile(c.name(), run))
		}
		res.received[c.name()] = readReceived(t, files...)
	}
	return res
}

// lines counts a record file's batches in state.
func (e *env) lines(file, state string) int { return e.follow(file).states[state] }

func isPlugin(c cell) bool { return c.hop == "plugin" }
func isDisk(c cell) bool   { return c.buf == "disk" }

var scenarios = []scenario{
	{name: "clean", about: "no fault: three phases, then stop",
		run: func(t *testing.T, e *env) result {
			r := e.start(newScript())
			for range 3 {
				r.phase()
			}
			r.settle(nil)
			return finish(t, e, r)
		},
		check: noDropsCheck("without a fault")},
	{name: "jobs", about: "per-job accounting on: GPU 0 unattributed, held by pod a, then pod b, then nobody, one phase each; the job and job_end records reach every cell",
		run: func(t *testing.T, e *env) result {
			e.accounting = true
			r := e.start(newScript())
			r.phase()
			// Every cell has each identity before it changes: an output
			// sends the identity it finds when it writes, so one that
			// read after two changes would skip the middle generation.
			r.settle(nil)
			for _, pod := range []string{"a", "b", ""} {
				var owner record.Attribution
				if pod != "" {
					owner = record.Attribution{Pod: pod, Namespace: "matrix", Container: "main"}
				}
				r.a.Engine().SetAttribution(0, owner)
				r.phase()
				r.settle(nil)
			}
			res := finish(t, e, r)
			checkJobEnds(t, res.witness, "matrix/a/main", "matrix/b/main")
			return res
		},
		check: func(cell, received) func(*outcome) {
			return func(o *outcome) {
				if n := o.dropped.total(); n != 0 {
					o.problems = append(o.problems, fmt.Sprintf("%d records counted dropped without a fault", n))
				}
			}
		}},
	{name: "down", about: "the sink refuses every write as retryable for a while, then takes writes again",
		run: func(t *testing.T, e *env) result {
			r := e.start(newScript())
			r.phase()
			r.settle(nil)
			e.setControl(nil, conservation.ControlDown)
			r.phase()
			r.awaitDown(3)
			e.setControl(nil)
			r.phase()
			r.settle(nil)
			return finish(t, e, r)
		},
		check: noDropsCheck("across an outage the buffers and pumps should ride out")},
	{name: "refuse", about: "the sink refuses one batch permanently (however often offered); later batches must arrive",
		run: func(t *testing.T, e *env) result {
			r := e.start(newScript())
			r.phase()
			r.settle(nil)
			e.setControl(nil, conservation.ControlPoison)
			r.phase()
			waitFor(func() bool {
				for _, c := range e.cells {
					if brokenReason("refuse", c) == "" && e.lines(e.recordFile(c.name(), e.run), conservation.StateRefused) == 0 {
						return false
					}
				}
				return true
			})
			e.setControl(nil)
			r.phase()
			r.phase()
			r.settle(func(c cell) bool { return brokenReason("refuse", c) != "" })
			return finish(t, e, r)
		},
		check: func(c cell, got received) func(*outcome) {
			return func(o *outcome) {
				if len(got.refused) == 0 {
					o.problems = append(o.problems, "the sink never refused a batch")
					return
				}
				// Exactly the refused batch may be missing, and later
				// batches arrive.
				if extra := o.missing.minus(contents(got.refused[:1])); extra.len() > 0 {
					o.problems = append(o.problems, fmt.Sprintf("%d records missing beyond the refused batch: %v", extra.len(), extra.byKind()))
				}
				if len(got.refused) > 1 {
					o.problems = append(o.problems, fmt.Sprintf("the refused batch was offered %d times", len(got.refused)))
				}
			}
		}},
	{name: "pluginkill", about: "each plugin process is SIGKILLed between two phases", cells: isPlugin,
		run: func(t *testing.T, e *env) result {
			r := e.start(newScript())
			r.phase()
			r.settle(nil)
			for _, c := range e.cells {
				bs, _, err := conservation.ReadFile(e.recordFile(c.name(), e.run))
				if err != nil || len(bs) == 0 {
					t.Fatalf("%s: no batch recorded before the kill (%v)", c.name(), err)
				}
				pid := bs[len(bs)-1].PID
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatalf("%s: kill plugin %d: %v", c.name(), pid, err)
				}
			}
			r.phase()
			r.phase()
			r.settle(nil)
			return finish(t, e, r)
		},
		check: func(c cell, got received) func(*outcome) {
			return func(o *outcome) {
				pids := processes(got.ok)
				if pids < 2 {
					o.problems = append(o.problems, fmt.Sprintf("batches came from %d plugin processes, want a restarted one too", pids))
				}
			}
		}},
	{name: "wedge", about: "one plugin cell's process wedges (a Write blocks, ignoring its context) between two phases; the others go on untouched", cells: isPlugin,
		run: func(t *testing.T, e *env) result {
			r := e.start(newScript())
			r.phase()
			r.settle(nil)
			victim := func(c cell) bool { return c == e.cells[0] }
			e.setControl(victim, conservation.ControlWedge)
			r.phase()
			if !waitFor(func() bool { return e.lines(e.recordFile(e.cells[0].name(), e.run), conservation.StateDown) > 0 }) {
				t.Fatalf("%s never wedged", e.cells[0].name())
			}
			e.setControl(victim) // the restarted process records again
			r.phase()
			r.settle(nil)
			return finish(t, e, r)
		},
		check: func(c cell, got received) func(*outcome) {
			return func(o *outcome) {
				pids := processes(got.ok)
				wedged := len(got.down) > 0
				switch {
				case wedged && pids < 2:
					o.problems = append(o.problems, fmt.Sprintf("the wedged cell's batches came from %d process(es), want a restarted one too", pids))
				case !wedged && pids != 1:
					o.problems = append(o.problems, fmt.Sprintf("a healthy cell's batches came from %d processes: restarted beside the wedged one", pids))
				}
				o.noDrops("across a wedge the pumps and buffers should ride out")
			}
		}},
	{name: "blackhole", about: "the shared hop: one cell's sink black-holes (each Write waits out its deadline) for a while, beside healthy cells in the same plugin process, then recovers",
		shared: true,
		run: func(t *testing.T, e *env) result {
			r := e.start(newScript())
			r.phase()
			r.settle(nil)
			victim := func(c cell) bool { return c == e.cells[0] }
			e.setControl(victim, conservation.ControlSlow)
			r.phase()
			if !waitFor(func() bool { return e.lines(e.recordFile(e.cells[0].name(), e.run), conservation.StateDown) >= 2 }) {
				t.Fatalf("%s never waited out a deadline twice", e.cells[0].name())
			}
			e.setControl(victim)
			r.phase()
			r.settle(nil)
			return finish(t, e, r)
		},
		check: func(c cell, got received) func(*outcome) {
			return func(o *outcome) {
				pids := processes(got.ok, got.down)
				if pids != 1 {
					o.problems = append(o.problems, fmt.Sprintf("batches came from %d processes: the shared process was restarted (a slow sink taken for wedged?)", pids))
				}
				o.noDrops("across a slow sink the pumps and buffers should ride out")
			}
		}},
	{name: "sighup", about: "reloads between phases: unchanged config, every cell changed (flush_interval), [sampler] changed (drain_interval), a broken config",
		run: func(t *testing.T, e *env) result {
			r := e.start(newScript())
			r.phase()
			if err := r.reload(e.configText()); err != nil {
				t.Errorf("reload of an unchanged config: %v", err)
			}
			r.phase()
			e.flush = "30ms"
			before := r.a.Outputs()
			err := r.reload(e.configText())
			after := r.a.Outputs()
			for _, c := range e.cells {
				if before[c.name()] == after[c.name()] {
					r.problems[c.name()] = append(r.problems[c.name()], fmt.Sprintf("a changed block was not applied on reload: %v", err))
				}
			}
			r.phase()
			e.drain = "30ms"
			if err := r.reload(e.configText()); err != nil {
				t.Logf("reload of a changed [sampler] section (drain_interval): %v", err)
			}
			r.phase()
			if err := r.reload(e.configText() + "\n[[outputs.record]]\n  nme = 1\n"); err == nil {
				t.Errorf("a broken config was applied")
			}
			r.phase()
			r.settle(func(c cell) bool { return brokenReason("sighup", c) != "" })
			return finish(t, e, r)
		}},
	{name: "sighupdown", about: "the sinks down, a reload that replaces every cell (flush_interval changed), the sinks up: buffered cells hand their queue to their replacement (memory) or keep it on disk",
		run: func(t *testing.T, e *env) result {
			r := e.start(newScript())
			r.phase()
			r.settle(nil)
			e.setControl(nil, conservation.ControlDown)
			r.phase()
			r.awaitDown(2)
			e.flush = "30ms"
			if err := r.reload(e.configText()); err != nil {
				// Closing a replaced output whose sink is down may fail
				// (its final write); the cells' counts tell what it cost.
				t.Logf("reload: %v", err)
			}
			e.setControl(nil)
			r.phase()
			r.settle(func(c cell) bool { return brokenReason("sighupdown", c) != "" })
			return finish(t, e, r)
		},
		check: func(c cell, _ received) func(*outcome) {
			return func(o *outcome) {
				if n := o.dropped.total(); n != 0 && c.buf != "none" {
					o.problems = append(o.problems, fmt.Sprintf("%d records counted dropped: a buffered output's queue must survive its replacement", n))
				}
			}
		}},
	{name: "restart", about: "disk buffers: a phase delivered, the sink down for the next, stop with it queued on disk, start a new agent (new process state), sink up", cells: isDisk,
		run: func(t *testing.T, e *env) result {
			src := newScript()
			r := e.start(src)
			r.phase()
			r.settle(nil)
			e.setControl(nil, conservation.ControlDown)
			r.phase()
			r.awaitDown(1)
			first := r.stop() // kept on disk, not dropped
			e.setControl(nil)
			src2 := newScriptAt(src.Start)
			src2.StartAt(src.Released())
			r2 := e.start(src2)
			for c, cs := range first {
				cs.OnDisk = 0 // replayed by the second run, not lost
				r2.retired[c] = &cs
			}
			r2.phase()
			r2.phase()
			r2.settle(func(c cell) bool { return brokenReason("restart", c) != "" })
			return finish(t, e, r, r2)
		}},
}

// scriptStart is the scripted samples' start: shared by every scenario's
// script so that restarts continue the same series.
func newScript() *conservation.Script {
	return conservation.NewScript(time.Now(), 30*time.Second, phaseSpan, perPhase)
}

func newScriptAt(start time.Time) *conservation.Script {
	return conservation.NewScript(start.Add(-phaseSpan-30*time.Second), 30*time.Second, phaseSpan, perPhase)
}

// TestMatrix is the conservation matrix: for each scenario, one agent run
// with one output per cell of {inproc, plugin} × {no buffer, memory, disk}
// × {raw, aggregate} (those the scenario applies to) beside a witness (an
// in-process recorder without buffer or fault), comparing each cell's sink
// with the witness record by record. go test -run Matrix -v prints the
// counts.
func TestMatrix(t *testing.T) {
	var table []string
	for _, sc := range append(scenarios, lapped, capped, kill9Scenario, stdoutStall, diskFull, notStarted, finalCounts, finalSelf, finalSelfShared, finalCountsShared) {
		t.Run(sc.name, func(t *testing.T) {
			cells := allCells(sc.cells)
			if sc.shared {
				cells = sharedCells()
			}
			table = append(table, runScenario(t, sc, cells)...)
		})
	}
	t.Logf("conservation matrix (records: devices, samples or summaries, events incl. process and self):\n%s",
		strings.Join(table, "\n"))
}

// runScenario runs scenario sc with cells (and the witness) in one agent
// and checks each cell, as a subtest per cell; it returns the summary
// table's rows.
func runScenario(t *testing.T, sc scenario, cells []cell) []string {
	var table []string
	e := newEnv(t, cells)
	began := time.Now()
	res := sc.run(t, e)
	t.Logf("%s: %s (ran %v)", sc.name, sc.about, time.Since(began).Round(time.Millisecond))
	checkWitness(t, res)
	if w := res.counts["witness"]; w.total() != 0 {
		t.Errorf("the witness dropped records (%+v): what it received undercounts what was published", w)
	}
	for _, c := range e.cells {
		var extra func(*outcome)
		if sc.check != nil {
			extra = sc.check(c, res.received[c.name()])
		}
		o := check(t, sc.name, c, res.witness, res.received[c.name()], res.counts[c.name()], res.stopNS, extra)
		o.problems = append(o.problems, res.problems[c.name()]...)
		reason := brokenReason(sc.name, c)
		status := "ok"
		switch {
		case !o.pass() && reason != "":
			status = "KNOWN BROKEN"
		case !o.pass():
			status = "FAIL"
		case reason != "":
			status = "FIXED (remove from knownBroken)"
		}
		table = append(table, fmt.Sprintf("%-10s %-20s published %5d delivered %5d dropped %5d dup %2d  %s",
			sc.name, c.name(), o.published, o.delivered, o.dropped.total(), o.duplicates, status))
		t.Run(c.name(), func(t *testing.T) {
			for _, p := range o.problems {
				if reason != "" {
					t.Logf("known broken (%s): %s", reason, p)
				} else {
					t.Error(p)
				}
			}
			if o.pass() && reason != "" {
				t.Logf("passes now: remove %q from knownBroken", sc.name+"/"+c.name())
			}
		})
	}
	table = append(table, res.rows...)
	if p := res.problems["stdout"]; len(p) > 0 || len(res.rows) > 0 {
		reason := brokenID(sc.name + "/stdout")
		t.Run("stdout", func(t *testing.T) {
			for _, p := range p {
				if reason != "" {
					t.Logf("known broken (%s): %s", reason, p)
				} else {
					t.Error(p)
				}
			}
			if len(p) == 0 && reason != "" {
				t.Logf("passes now: remove %q from knownBroken", sc.name+"/stdout")
			}
		})
	}
	return table
}

// checkJobEnds checks that the witness received one job_end record on GPU
// 0 for each owner, carrying the same figures as the owner's last job
// record (the counters' last values).
func checkJobEnds(t *testing.T, witness []conservation.Batch, owners ...string) {
	t.Helper()
	last := map[string]record.Event{}
	ends := map[string][]record.Event{}
	for _, b := range witness {
		for _, ev := range b.Events {
			owner := ""
			for _, a := range ev.Attrs {
				if a.Key == record.AttrOwner {
					owner = a.Value
				}
			}
			switch {
			case ev.Kind == record.EventJob && ev.Device == 0:
				last[owner] = ev
			case ev.Kind == record.EventJobEnd && ev.Device == 0:
				ends[owner] = append(ends[owner], ev)
			}
		}
	}
	for _, o := range owners {
		if len(ends[o]) != 1 {
			t.Errorf("witness: %d job_end records of %s on GPU 0, want 1", len(ends[o]), o)
			continue
		}
		if end, job := ends[o][0], last[o]; !slices.Equal(end.Fields, job.Fields) || record.FieldValue(end.Fields, record.JobFieldAllocated) <= 0 {
			t.Errorf("witness: %s's job end %v, its last job record %v", o, end.Fields, job.Fields)
		}
	}
}

// checkWitness checks the witness against the script: every scripted
// sample, device and process record, whole (a process record's time is the
// poll's).
func checkWitness(t *testing.T, res result) {
	t.Helper()
	have := contents(res.witness)
	want := bag{}
	for _, d := range conservation.ScriptDevices() {
		want.add("device", d)
	}
	for _, s := range res.samples {
		want.add("sample", s)
	}
	if missing := want.minus(have); missing.len() > 0 {
		t.Errorf("witness lacks %d scripted records %v:\n\t%s", missing.len(), missing.byKind(), missing.sample(4))
	}
	var samples, procs []string
	for r, n := range have {
		for range n {
			switch {
			case r.kind == "sample":
				samples = append(samples, r.key)
			case r.kind == "event" && strings.Contains(r.key, `"Kind":"process"`):
				var ev record.Event
				mustUnmarshal(r.key, &ev)
				if ev.StartNS == 0 || ev.EndNS != ev.StartNS {
					t.Errorf("process record at %d..%d, want one instant, the poll time", ev.StartNS, ev.EndNS)
				}
				ev.StartNS, ev.EndNS = 0, 0
				procs = append(procs, keyOf(sortedEvent(ev)))
			}
		}
	}
	if len(samples) != len(res.samples) {
		t.Errorf("witness received %d samples, the script published %d", len(samples), len(res.samples))
	}
	var wantProcs []string
	for run := 0; run < res.runs; run++ {
		for dev := range 2 {
			for _, ev := range specProcessRecords(dev) {
				wantProcs = append(wantProcs, keyOf(sortedEvent(ev)))
			}
		}
	}
	slices.Sort(procs)
	slices.Sort(wantProcs)
	if !slices.Equal(procs, wantProcs) {
		t.Errorf("witness process records:\n\t%s\nwant\n\t%s", strings.Join(procs, "\n\t"), strings.Join(wantProcs, "\n\t"))
	}
}

// specProcessRecords is the process records the engine must publish for
// conservation.ScriptProcesses(dev), written out by hand from the process
// record's definition in record/recordpb/records.proto (message Event):
// integer fields pid, used_memory_mib when the memory is known, the four
// utilizations together when a utilization sample is; attrs name, type,
// cmdline when enabled and not empty. It is not computed from the
// processes by a copy of the engine's mapping, so a mistake in that
// mapping (sampler/process.go) fails the matrix.
func specProcessRecords(dev int) []record.Event {
	n := func(key string, v float64) record.Field { return record.Field{Key: key, Value: v, Int: true} }
	a := func(key, v string) record.Attr { return record.Attr{Key: key, Value: v} }
	if dev == 1 { // a MIG instance: memory, no utilization
		return []record.Event{{Kind: "process", Device: 1,
			Fields: []record.Field{n("pid", 4242), n("used_memory_mib", 9000)},
			Attrs:  []record.Attr{a("name", "python3"), a("type", "C"), a("cmdline", "python3 train.py --mig")}}}
	}
	return []record.Event{
		{Kind: "process", Device: dev,
			Fields: []record.Field{n("pid", 1234), n("used_memory_mib", 70000), n("sm_util", 87), n("mem_util", 41), n("enc_util", 0), n("dec_util", 2)},
			Attrs:  []record.Attr{a("name", "python3"), a("type", "C"), a("cmdline", "python3 train.py --epochs 3")}},
		{Kind: "process", Device: dev, // no command line: no cmdline attr
			Fields: []record.Field{n("pid", 77), n("used_memory_mib", 12), n("sm_util", 1), n("mem_util", 0), n("enc_util", 0), n("dec_util", 0)},
			Attrs:  []record.Attr{a("name", "Xorg"), a("type", "G")}},
	}
}

// sortedEvent orders ev's fields and attrs by key: the definition says
// which there are, not in what order.
func sortedEvent(ev record.Event) record.Event {
	ev.Fields = slices.Clone(ev.Fields)
	ev.Attrs = slices.Clone(ev.Attrs)
	slices.SortFunc(ev.Fields, func(x, y record.Field) int { return strings.Compare(x.Key, y.Key) })
	slices.SortFunc(ev.Attrs, func(x, y record.Attr) int { return strings.Compare(x.Key, y.Key) })
	return ev
}

// processes returns how many recording processes (PIDs) the batches came
// from.
func processes(batches ...[]conservation.Batch) int {
	pids := map[int]bool{}
	for _, bs := range batches {
		for _, b := range bs {
			pids[b.PID] = true
		}
	}
	return len(pids)
}

// noDropsCheck is a scenario check that requires no record counted
// dropped (see noDrops).
func noDropsCheck(across string) func(cell, received) func(*outcome) {
	return func(cell, received) func(*outcome) {
		return func(o *outcome) { o.noDrops(across) }
	}
}

// noDrops adds a problem when the cell counted records dropped; across says
// what the scenario put it through.
func (o *outcome) noDrops(across string) {
	if n := o.dropped.total(); n != 0 {
		o.problems = append(o.problems, fmt.Sprintf("%d records counted dropped %s", n, across))
	}
}
