package conservation_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpusampler/gpusampler/internal/conservation"
)

// diskFull: every disk buffer on a small tmpfs of its own (64 KiB, 16 KiB
// for the aggregating cells), sinks down
// until each disk is full (the buffers degrade: new batches held in
// memory within the default cap), then up: nothing may be lost, nothing
// counted dropped. Skipped, saying why, where a tmpfs cannot be mounted
// (not root); the buffer package's tests cover a full disk through a
// write-error seam.
var diskFull = scenario{name: "diskfull", about: "disk buffers on 64/16 KiB tmpfs mounts, sinks down until every disk is full, then up: held in memory, nothing lost",
	cells: isDisk,
	run: func(t *testing.T, e *env) result {
		for _, c := range e.cells {
			size := "64k"
			if c.mode == "agg" {
				size = "16k" // summaries are few: four pages fill with the cursor, journal and a segment
			}
			mountTmpfs(t, filepath.Join(e.dir, c.name()+".buf"), size)
		}
		r := e.start(newScript())
		r.phase()
		r.settle(nil)
		e.setControl(nil, conservation.ControlDown)
		degraded := map[string]bool{}
		for range 60 { // a liveness bound: each phase adds to every backlog
			r.phase()
			for name, b := range r.a.Buffers() {
				if b.Stats().Degradations > 0 {
					degraded[name] = true
				}
			}
			if len(degraded) == len(e.cells) {
				break
			}
		}
		r.phase() // one more, held in memory
		r.awaitDown(2)
		e.setControl(nil)
		r.phase()
		r.settle(nil)
		res := finish(t, e, r)
		for _, c := range e.cells {
			if !degraded[c.name()] {
				res.problems[c.name()] = append(res.problems[c.name()], "its disk never filled: the scenario did not test a full disk")
			}
		}
		return res
	},
	check: noDropsCheck("on a full disk the buffer should ride out in memory")}

// mountTmpfs mounts a tmpfs of size on dir (created) until the test ends,
// or skips the test saying why it cannot.
func mountTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as a full disk")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs (%v: %s)", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}
