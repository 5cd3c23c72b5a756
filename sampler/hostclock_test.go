package sampler

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

type fixedClock struct{ t *time.Time }

func (c fixedClock) Now() time.Time               { return *c.t }
func (c fixedClock) NewTimer(time.Duration) Timer { panic("not used") }

// Two processes (here: two host offsets, each measuring its own value, as
// two processes would a few hundred ns apart) share one anchor: the same
// boot-time driver timestamp maps to the same nanosecond in both, on every
// device. A step beyond ClockStepThreshold re-anchors once and is
// reported; drift below it is not.
func TestHostOffsetOnePerHost(t *testing.T) {
	anchor := filepath.Join(t.TempDir(), "offset")
	const off = int64(1_764_000_000_123_456_789) // realtime − boottime, ns
	measured := map[string]int64{"a": off, "b": off + 777}
	hosts := map[string]*hostOffset{}
	for name := range measured {
		hosts[name] = &hostOffset{measure: func() (int64, bool) { return measured[name], true }, anchor: anchor}
	}
	now := time.Unix(0, off+int64(3600*time.Second)) // an hour after boot
	clk := fixedClock{&now}
	rawUS := uint64(3600*time.Second/time.Microsecond) - 20_000 // a sample 20 ms old
	tbs := []*timebase{newTimebase(clk, hosts["a"]), newTimebase(clk, hosts["a"]), newTimebase(clk, hosts["b"])}
	for i, tb := range tbs {
		tb.Observe(rawUS)
		if tb.Kind != ClockBoottime {
			t.Fatalf("timebase %d: clock %v, want boottime", i, tb.Kind)
		}
	}
	want := int64(rawUS)*1000 + off
	for i, tb := range tbs {
		if got := tb.ToNS(rawUS); got != want {
			t.Errorf("timebase %d maps %d µs to %d ns, want %d (one offset per host)", i, rawUS, got, want)
		}
	}
	// A minute on: drift below the threshold keeps the offset.
	now = now.Add(recheckEvery)
	measured["a"] = off + int64(ClockStepThreshold) - 1
	tbs[0].Observe(rawUS + 60e6)
	if tbs[0].Stepped != 0 || tbs[0].ToNS(rawUS) != want {
		t.Errorf("drift of %v re-anchored: step %d, %d µs → %d ns", ClockStepThreshold-1, tbs[0].Stepped, rawUS, tbs[0].ToNS(rawUS))
	}
	// Another minute: the realtime clock was stepped 5 ms forward.
	now = now.Add(recheckEvery + 5*time.Millisecond)
	measured["a"] = off + int64(5*time.Millisecond)
	tbs[0].Observe(rawUS + 120e6)
	tbs[1].Observe(rawUS + 120e6)
	if tbs[0].Stepped != int64(5*time.Millisecond) || tbs[1].Stepped != 0 {
		t.Errorf("steps seen %d and %d, want one 5 ms step reported once", tbs[0].Stepped, tbs[1].Stepped)
	}
	for i, tb := range tbs[:2] {
		if got := tb.ToNS(rawUS); got != want+int64(5*time.Millisecond) {
			t.Errorf("timebase %d after the step: %d ns, want %d", i, got, want+int64(5*time.Millisecond))
		}
	}
	// A process starting after the step takes the re-anchored offset.
	late := &hostOffset{measure: func() (int64, bool) { return off + int64(5*time.Millisecond) + 300, true }, anchor: anchor}
	if got, _, _ := late.offset(now); got != off+int64(5*time.Millisecond) {
		t.Errorf("late process offset %d, want the anchor's %d", got, off+int64(5*time.Millisecond))
	}
}

// The real measurement: two host offsets on the system clocks, one anchor.
func TestHostOffsetSystemClocks(t *testing.T) {
	if _, ok := bootTime(); !ok {
		t.Skip("no boot-time clock on this platform")
	}
	anchor := filepath.Join(t.TempDir(), "offset")
	a := &hostOffset{measure: measureBootOffset, anchor: anchor}
	b := &hostOffset{measure: measureBootOffset, anchor: anchor}
	now := time.Now()
	oa, ok1, _ := a.offset(now)
	ob, ok2, _ := b.offset(now)
	if !ok1 || !ok2 || oa != ob {
		t.Fatalf("offsets %d (%v) and %d (%v), want one", oa, ok1, ob, ok2)
	}
	m, _ := measureBootOffset()
	if d := time.Duration(m - oa); d > ClockStepThreshold || d < -ClockStepThreshold {
		t.Fatalf("anchored offset %d is %v from a fresh measurement", oa, d)
	}
}

// Two processes map the same boot-time driver timestamp to the same
// nanosecond: each child measures the offset itself (on the system clocks)
// and converts one timestamp; the second adopts the first's anchor.
func TestBootTimestampSameInTwoProcesses(t *testing.T) {
	if raw := os.Getenv("GPUSAMPLER_BOOT_RAW_US"); raw != "" {
		us, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		tb := newTimebase(SystemClock(), newHostOffset())
		tb.Observe(us)
		if tb.Kind != ClockBoottime {
			t.Fatalf("clock %v, want boottime", tb.Kind)
		}
		fmt.Printf("BOOT_NS %d\n", tb.ToNS(us))
		return
	}
	bt, ok := bootTime()
	if !ok || bootID() == "" {
		t.Skip("no boot-time clock or boot id on this platform")
	}
	raw := strconv.FormatInt(int64(bt/time.Microsecond)-20_000, 10) // a sample 20 ms old
	tmp := t.TempDir()                                              // the anchor's directory, shared by the children
	var got []string
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBootTimestampSameInTwoProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GPUSAMPLER_BOOT_RAW_US="+raw, "TMPDIR="+tmp)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		_, after, found := strings.Cut(string(out), "BOOT_NS ")
		if !found {
			t.Fatalf("child said:\n%s", out)
		}
		got = append(got, strings.Fields(after)[0])
	}
	if got[0] != got[1] {
		t.Fatalf("boot timestamp %s µs → %s ns in one process, %s ns in the other", raw, got[0], got[1])
	}
}

// A clock step found while a restored cursor is checked (the host offset
// re-anchored by aheadOfNow, a GPU answering a while after the start) is
// reported like one found by a drain: the host offset hands each step to
// one look only, so a look that drops it leaves the step unreported.
func TestCursorCheckReportsClockStep(t *testing.T) {
	const off = int64(1_764_000_000_123_456_789)
	measured := off
	now := time.Unix(0, off+int64(3600*time.Second))
	e := &Engine{log: slog.New(slog.DiscardHandler), events: newEventLog(16),
		host: &hostOffset{measure: func() (int64, bool) { return measured, true }}}
	l := &deviceLoop{e: e}
	if _, ok, _ := e.host.offset(now); !ok { // anchored at the start
		t.Fatal("no offset")
	}
	now = now.Add(recheckEvery + 5*time.Millisecond)
	measured = off + int64(5*time.Millisecond) // the realtime clock stepped 5 ms
	l.aheadOfNow(uint64(3600*time.Second/time.Microsecond), now)
	evs, _, _ := e.events.read(0, nil, new(atomic.Uint64))
	if len(evs) != 1 || evs[0].Kind != record.EventClockStep || !slices.Contains(evs[0].Attrs, record.Attr{Key: "step_ns", Value: "5000000"}) {
		t.Fatalf("events %+v, want one clock_step of 5 ms", evs)
	}
}
