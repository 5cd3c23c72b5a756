package prometheus

import (
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/record"
)

// entry is one raw sample (n = 1, min = max = sum = value) or one summary of
// an aggregating wrapper (internal/pipeline/aggregate) in a window.
type entry struct {
	t             int64 // sample time; for a summary the end of its interval
	min, max, sum float64
	n             uint32
}

// window is a ring of the entries of one metric on one device, oldest
// first. It keeps what the widest statistic needs (the configured window,
// and 1 s for DCGM's power average) behind the newest entry; it grows when
// samples arrive faster than it holds and never shrinks, so that a steady
// stream does not allocate.
type window struct {
	buf    []entry
	head   int // index of the oldest entry
	n      int
	newest int64
}

// push adds e and drops the entries that fell out of the horizon behind the
// newest entry.
func (w *window) push(e entry, horizon int64) {
	if w.n == 0 || e.t > w.newest {
		w.newest = e.t
	}
	for w.n > 0 && w.buf[w.head].t <= w.newest-horizon {
		w.head = (w.head + 1) % len(w.buf)
		w.n--
	}
	if w.n == len(w.buf) {
		w.grow()
	}
	w.buf[(w.head+w.n)%len(w.buf)] = e
	w.n++
}

func (w *window) grow() {
	size := 2 * len(w.buf)
	if size < 16 {
		size = 16
	}
	buf := make([]entry, size)
	for i := 0; i < w.n; i++ {
		buf[i] = w.buf[(w.head+i)%len(w.buf)]
	}
	w.buf, w.head = buf, 0
}

// stats returns min, max and mean of the entries in (newest-span, newest]
// and whether there were any. Every held entry is checked: a late,
// out-of-order one may sit anywhere in the ring.
func (w *window) stats(span int64) (lo, hi, mean float64, ok bool) {
	var acc accum.Stats
	from := w.newest - span
	for i := w.n - 1; i >= 0; i-- {
		e := &w.buf[(w.head+i)%len(w.buf)]
		if e.t <= from {
			continue
		}
		acc = acc.Merge(accum.Stats{Count: uint64(e.n), Sum: e.sum, Min: e.min, Max: e.max})
	}
	if acc.Count == 0 {
		return 0, 0, 0, false
	}
	return acc.Min, acc.Max, acc.Mean(), true
}

// metricState is what one device last reported for one metric.
type metricState struct {
	has    bool
	last   float64
	lastT  int64 // the newest sample's own time
	arrive int64 // when it arrived (the output's clock), for staleness
	// gap and prevGap are the spacings of the newest two reads of the
	// metric (see note); prior stands in for them until the second read.
	gap, prevGap, prior int64
	win                 window
}

// note records a read of the metric: a sample (or a summary ending) at its
// own time t arriving at now. A read is what one Write brings: the spacing
// of two reads is the larger of their arrival spacing and the spacing of
// their own times, so that a metric drained in bursts, and one read once a
// rare_interval, are both measured as the output sees them.
func (ms *metricState) note(t, now int64) {
	if !ms.has || now <= ms.arrive {
		return // the first read, or another sample of the same Write
	}
	g := now - ms.arrive
	if t > ms.lastT && t-ms.lastT > g {
		g = t - ms.lastT
	}
	ms.prevGap, ms.gap = ms.gap, g
}

// interval is the metric's read interval as observed: the larger of its
// newest two spacings (one short pair, such as a read right after a device
// came back, does not hide it for a cycle), or prior before the second
// read.
func (ms *metricState) interval() int64 {
	if ms.gap == 0 {
		return ms.prior
	}
	return max(ms.gap, ms.prevGap)
}

// keep is how long after its newest arrival the metric stays exposed:
// twice its read interval, and at least stale.
func (ms *metricState) keep(stale int64) int64 {
	return max(stale, 2*ms.interval())
}

// deviceState is one device's identity, exposed labels and metric state.
// It belongs to the Output and is guarded by its lock.
type deviceState struct {
	id      record.Device
	known   bool // identity received (otherwise the labels are minimal)
	labels  []string
	descs   *descSet
	metrics []metricState // indexed by MetricID
	// arrive is the arrival time of the newest sample (output clock), 0
	// before the first; newestT its own time.
	arrive  int64
	newestT int64
	// lost is set by a device_lost event at lostT (event time) and cleared
	// by a device_recovered event or a sample newer than lostT.
	lost  bool
	lostT int64
	// XIDs seen: the last code and how many.
	lastXID  float64
	xidCount uint64
}
