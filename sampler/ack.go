package sampler

import (
	"slices"
	"sync"
	"time"
)

// Acknowledged drain cursors.
//
// The cursor a restart resumes from must not pass a sample that some
// output has not taken yet, or a crash (kill -9) between the save and the
// output's Write loses it for good: the restarted engine would drain past
// it. So the saved cursors are the ones every output has acknowledged:
//
//   - after each flush that publishes everything drained so far, the device
//     loop notes a cursorMark: the buffers' cursors and, per ring lane, how
//     far the lane's head stood;
//   - a pump acknowledges a lane up to where it has read once the batch it
//     read into is done with (delivered, or failed and counted); samples
//     its Select filtered out count as taken;
//   - a mark is covered when every lane still attached has acknowledged its
//     head; the cursors saved are those of the newest covered mark.
//
// A lane that has acknowledged nothing for backlogHoldLimit (or two flush
// intervals and a write timeout, when longer) while samples wait in it (its
// output is stuck: the samples are held or being dropped, and counted) is
// not waited for, as ring.Room does not wait for it: one stuck output does
// not hold every other output's cursors back.
//
// "Taken" is the output's Write returning: for an output with a disk
// buffer the samples are then in its segment files, which survive the
// process; for an unbuffered output the sink has them; a memory buffer or an
// aggregate's open interval dies with the process (that is what choosing a
// memory buffer means). The engine saves as soon as an output has taken
// more (Engine.cursorSaver), so what a crash makes the next run deliver
// again is what the outputs took between their Write returning and that
// save: none unless the crash falls in that instant, then at most one
// drain's worth of samples.

// cursorMark is where the buffer cursors stood when every sample drained
// before them had been published, and where each ring lane's head stood
// then.
type cursorMark struct {
	lanes   []laneHead
	cursors []uint64 // per deviceLoop.buffers index
}

type laneHead struct {
	c    *cursor
	head uint64
}

// maxMarks bounds a loop's marks: beyond it the newest mark is replaced (the
// saved cursors then wait for a later head: coarser, never ahead).
const maxMarks = 1024

// ackState is a device loop's marks, added by the loop and taken by the
// engine's cursor saver.
type ackState struct {
	mu    sync.Mutex
	marks []cursorMark
	// settled is the newest covered mark's cursors (nil before one).
	settled []uint64
}

// mark notes the buffers' cursors as published up to every lane's present
// head. Called by the loop, the ring's producer.
func (l *deviceLoop) mark(withLanes bool) {
	if l.e.cfg.Cursors == nil {
		return
	}
	m := cursorMark{cursors: make([]uint64, len(l.buffers))}
	for i, b := range l.buffers {
		m.cursors[i] = b.cursor
	}
	if withLanes {
		for _, c := range *l.ring.lanes.Load() {
			m.lanes = append(m.lanes, laneHead{c, c.head.Load()})
		}
	}
	a := &l.ack
	a.mu.Lock()
	if len(a.marks) >= maxMarks {
		a.marks[len(a.marks)-1] = m
	} else {
		a.marks = append(a.marks, m)
	}
	a.mu.Unlock()
}

// acknowledged returns the cursors every output attached to the loop's ring
// has taken, per buffer index (nil when none yet), dropping the marks that
// are behind them. now is the engine's clock.
func (l *deviceLoop) acknowledged(now time.Time) []uint64 {
	lanes := *l.ring.lanes.Load()
	a := &l.ack
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for n < len(a.marks) && a.marks[n].covered(lanes, now) {
		n++
	}
	if n > 0 {
		a.settled = a.marks[n-1].cursors
		a.marks = a.marks[:copy(a.marks, a.marks[n:])]
	}
	return a.settled
}

// covered reports whether every lane of m that is still attached has
// acknowledged m's head, or has been stuck for backlogHoldLimit.
func (m *cursorMark) covered(lanes []*cursor, now time.Time) bool {
	for _, lh := range m.lanes {
		if lh.c.acked.Load() >= lh.head || !slices.Contains(lanes, lh.c) {
			continue
		}
		if at := lh.c.ackedAt.Load(); at != 0 && now.Sub(time.Unix(0, at)) >= time.Duration(lh.c.stuckAfter.Load()) {
			continue
		}
		return false
	}
	return true
}

// stuckAfter is how long a pump's lane may go without an acknowledgement,
// samples waiting, before the saved cursors stop waiting for it.
func stuckAfter(o PumpOptions) time.Duration {
	return max(backlogHoldLimit, 2*o.FlushInterval+o.WriteTimeout)
}

// acknowledge acknowledges every sample the pump has read: called when the
// batch they went into is done with (delivered or failed), or nothing is
// held. now is the engine's clock.
func (p *pump) acknowledge() {
	now := p.e.cfg.Clock.Now().UnixNano()
	more := false
	for _, c := range p.cursors {
		if t := c.tail.Load(); c.acked.Swap(t) != t {
			more = true
		}
		c.ackedAt.Store(now)
	}
	if more && p.e.ackKick != nil {
		select {
		case p.e.ackKick <- struct{}{}:
		default: // a save is due already
		}
	}
}
