package sampler

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/internal/atomicfile"
)

// ClockStepThreshold is how far the measured realtime − boottime offset
// may drift from the one in use before it counts as a clock step and is
// re-anchored. Below it, the offset in use stays: every batch of every
// device is converted with the same one.
const ClockStepThreshold = time.Millisecond

// hostOffset is the host's realtime − boottime offset, one per engine and
// shared by its device loops (safe for concurrent use). Processes on one
// boot of the host share it through an anchor file, so that they map a
// boot-time driver timestamp to the same Unix nanosecond: two separate
// measurements differ by the time between the clock reads.
type hostOffset struct {
	// measure returns realtime − boottime in ns now; false where the
	// platform has no boot-time clock.
	measure func() (int64, bool)
	// anchor is the file shared by the processes of this boot ("": none).
	anchor string

	mu      sync.Mutex
	ns      int64
	known   bool
	checked time.Time
}

// newHostOffset measures with the operating system's clocks and anchors
// in the temporary directory, per boot.
func newHostOffset() *hostOffset {
	h := &hostOffset{measure: measureBootOffset}
	if id := bootID(); id != "" {
		h.anchor = filepath.Join(os.TempDir(), "gpusampler-boot-offset-"+id)
	}
	return h
}

// measureBootOffset reads realtime, boottime, realtime several times and
// keeps the tightest bracket's midpoint.
func measureBootOffset() (int64, bool) {
	best, bestWidth, ok := int64(0), int64(-1), false
	for range 8 {
		r1 := time.Now().UnixNano()
		bt, has := bootTime()
		r2 := time.Now().UnixNano()
		if !has {
			return 0, false
		}
		if w := r2 - r1; bestWidth < 0 || w < bestWidth {
			best, bestWidth, ok = r1+w/2-int64(bt), w, true
		}
	}
	return best, ok
}

// offset returns the offset in use, measuring (or re-checking, at most
// every recheckEvery of now) first. stepped is the re-anchoring it made,
// 0 when none.
func (h *hostOffset) offset(now time.Time) (ns int64, ok bool, stepped int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.known && now.Sub(h.checked) < recheckEvery && now.Sub(h.checked) > -recheckEvery {
		return h.ns, true, 0
	}
	m, has := h.measure()
	if !has {
		return 0, false, 0
	}
	h.checked = now
	if h.known {
		if d := m - h.ns; d <= int64(ClockStepThreshold) && d >= -int64(ClockStepThreshold) {
			return h.ns, true, 0
		}
		old := h.ns
		h.ns = m
		h.writeAnchor()
		return h.ns, true, h.ns - old
	}
	h.known = true
	h.ns = m
	if v, ok := h.readAnchor(); ok && v-m <= int64(ClockStepThreshold) && m-v <= int64(ClockStepThreshold) {
		h.ns = v // another process's measurement of the same offset
	} else {
		h.writeAnchor()
	}
	return h.ns, true, 0
}

func (h *hostOffset) readAnchor() (int64, bool) {
	if h.anchor == "" {
		return 0, false
	}
	b, err := os.ReadFile(h.anchor)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// writeAnchor replaces the anchor file (best effort: without it, processes
// agree within the clock-read time).
func (h *hostOffset) writeAnchor() {
	if h.anchor == "" {
		return
	}
	_ = atomicfile.WriteFile(h.anchor, []byte(strconv.FormatInt(h.ns, 10)+"\n"), 0o644)
}
