package conservation_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/record"
)

// kill9Env names the environment of the kill -9 child (and, with suffixes,
// its plugin and script start).
const kill9Env = "GPUSAMPLER_CONSERVATION_KILL9"

// kill9Scenario: a child process (this test binary) runs the agent with the
// disk cells, delivers one phase, takes the next while the sinks are down
// (into the disk buffers) and is killed with SIGKILL; a new agent in this
// process then replays the disk buffers with the sinks up and takes two
// more phases.
var kill9Scenario = scenario{name: "kill9", about: "disk buffers: gpusampler SIGKILLed with a phase queued on disk (sinks down), then started again",
	cells: isDisk,
	run: func(t *testing.T, e *env) result {
		src := newScript()
		kill9Phase1 = src.Start.Add(phaseSpan).UnixNano()
		ready := filepath.Join(e.dir, "ready")
		cmd := exec.Command(os.Args[0], "-test.run", "^TestKill9Child$", "-test.v")
		cmd.Env = append(os.Environ(), kill9Env+"="+e.dir, kill9Env+"_PLUGIN="+pluginPath, kill9Env+"_SUM="+pluginSum,
			kill9Env+"_START="+strconv.FormatInt(src.Start.UnixNano(), 10))
		logf, err := os.Create(filepath.Join(e.dir, "child.log"))
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if !waitFor(func() bool {
			_, err := os.Stat(ready)
			select {
			case err := <-exited:
				exited <- err
				return true
			default:
			}
			return err == nil
		}) {
			cmd.Process.Kill()
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("the child never got ready:\n%s", log)
		}
		if _, err := os.Stat(ready); err != nil {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("the child ended before it was ready: %v\n%s", <-exited, log)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-exited
		src.Release()
		src.Release() // what the child published: phases 0 and 1
		e.run = 1
		e.fsync = kill9Fsync
		e.setControl(nil)
		src2 := newScriptAt(src.Start)
		src2.StartAt(2)
		r2 := e.start(src2)
		r2.phase()
		r2.phase()
		r2.settle(func(c cell) bool { return brokenReason("kill9", c) != "" })
		return finish(t, e, &running{src: src}, r2)
	},
	check: func(c cell, got received) func(*outcome) {
		return func(o *outcome) {
			// The sinks were down at the kill: nothing they had taken may
			// come again (a replay of an acknowledged batch is not a
			// retry the sink asked for).
			if got.duplicates > 0 {
				o.problems = append(o.problems, fmt.Sprintf("%d batches the sink had taken before the kill were delivered again", got.duplicates))
			}
			// The second phase reached the sink only through the replay.
			if c.mode != "raw" || len(got.sessions) != 2 {
				return
			}
			phase1 := func(s record.Sample) bool { return s.TimeNS >= kill9Phase1 && s.TimeNS < kill9Phase1+int64(phaseSpan) }
			var before, after int
			for i, session := range got.sessions {
				for _, b := range session {
					for _, s := range b.Samples {
						if phase1(s) && i == 0 {
							before++
						} else if phase1(s) {
							after++
						}
					}
				}
			}
			if before != 0 || after != perPhase*4 {
				o.problems = append(o.problems, fmt.Sprintf("second phase: %d samples delivered before the kill, %d after, want 0 and %d",
					before, after, perPhase*4))
			}
		}
	}}

// kill9Fsync is the disk buffers' fsync interval in the kill9 scenario:
// longer than the run, so that no periodic sync commits the cursor before
// the kill. What the sinks took must not come back all the same: a process
// crash loses no file write, and the buffer writes its cursor at every
// acknowledgement.
const kill9Fsync = "1h"

// kill9Phase1 is where the kill9 scenario's second phase starts (Unix ns).
var kill9Phase1 int64

// TestKill9Child is the child of the kill9 scenario; it skips unless run
// as that child.
func TestKill9Child(t *testing.T) {
	dir := os.Getenv(kill9Env)
	if dir == "" {
		t.Skip("run by the kill9 scenario of TestMatrix")
	}
	startNS, err := strconv.ParseInt(os.Getenv(kill9Env+"_START"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, cells: allCells(isDisk), flush: "20ms", drain: "20ms", fsync: kill9Fsync}
	r := e.start(newScriptAt(time.Unix(0, startNS)))
	r.phase()
	r.settle(nil)
	e.setControl(nil, conservation.ControlDown)
	r.phase()
	r.awaitDown(1)
	// Everything published is in the disk buffers once every cell's pump
	// has handed on at least as many events as the witness had when it
	// received the marker: every pump reads the same event log in order.
	r.a.Engine().Emit(record.Event{Kind: "matrix_marker", Device: -1, StartNS: r.src.Start.UnixNano() - 1000,
		EndNS: r.src.Start.UnixNano() - 1000, Message: "kill9"})
	var witnessEvents uint64
	if !waitFor(func() bool {
		if !r.hasMarker("witness", "kill9") {
			return false
		}
		for _, o := range r.a.Engine().Stats().Outputs {
			if o.Name == "witness" {
				witnessEvents = o.EventsDelivered
			}
		}
		return true
	}) {
		t.Fatal("the witness never received the marker")
	}
	if !waitFor(func() bool {
		for _, o := range r.a.Engine().Stats().Outputs {
			if o.Name != "witness" && (o.EventsDelivered < witnessEvents || o.Lag > 0 || o.Pending > 0) {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the disk buffers never took the second phase")
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {} // until SIGKILL
}
