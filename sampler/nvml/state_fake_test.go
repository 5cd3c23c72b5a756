//go:build cgo

package nvml

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// State and loss scenarios on the fake driver: drain cursors checked
// against the driver, every loss counted, no false alarm. Each runs the
// engine on a manual clock that the fake driver follows, and reports, per
// scenario, the samples the driver took in the window the run is
// responsible for (expected), those delivered, missing and duplicated, and
// what the engine counted. The figures are logged as one "figures" line
// (go test -v), then asserted.

// TestFakeDriverCursorAhead: the wall clock steps back 60 s between two
// runs within one boot, so the saved cursors lie 60 s ahead of every
// sample the driver takes. The second run discards them (one WARN, a
// self-metric) and delivers what the buffers hold as at a fresh start.
func TestFakeDriverCursorAhead(t *testing.T) {
	runScenario(t, "cursor-ahead", false, "FAKENVML_PERIOD_US=20000", "FAKENVML_DEPTH=100",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// TestFakeDriverIdleAtStartCounted: the encoder idles at start (its buffer
// empty, so drained at the secondary interval, 10 s), then encodes at
// 50 Hz; its buffer (2 s) overruns before the first drain that finds
// samples. What was overwritten is counted as a suspected loss.
func TestFakeDriverIdleAtStartCounted(t *testing.T) {
	runScenario(t, "idle-start", false, "FAKENVML_PERIOD_US=20000", "FAKENVML_DEPTH=100", "FAKENVML_REPORTED_DEPTH=120",
		"FAKENVML_IDLE_MS=3@-4000", "FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// TestFakeDriverLostAtStartCounted: GPU 1 does not answer for the first
// 4 s; what its buffers took before that and no longer hold when it
// answers is counted; it is probed often enough to answer within a span.
func TestFakeDriverLostAtStartCounted(t *testing.T) {
	runCtlScenario(t, "lost-start-loss", "FAKENVML_DEVICES=2", "FAKENVML_PERIOD_US=20000", "FAKENVML_DEPTH=120",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// TestFakeDriverOutageProbes: a 6 s outage, and five 1 s outages, of a GPU
// whose shortest buffer spans 2.4 s: probed at half that span, it is back
// within 1.2 s of answering, and the 1 s outages lose nothing.
func TestFakeDriverOutageProbes(t *testing.T) {
	runCtlScenario(t, "outage", "FAKENVML_DEVICES=2", "FAKENVML_PERIOD_US=20000", "FAKENVML_DEPTH=120",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// TestFakeDriverIdleAcrossRestart: the utilization buffers idle across a
// restart (their cursors from the last run, then seconds without a
// sample): when they take samples again, nothing is reported lost.
func TestFakeDriverIdleAcrossRestart(t *testing.T) {
	runScenario(t, "idle-restart", false, "FAKENVML_PERIOD_US=20000", "FAKENVML_DEPTH=100",
		"FAKENVML_IDLE_MS=1@1500-5000,2@1500-5000,3@1500-5000,4@1500-5000,8@1500-5000,9@1500-5000",
		// The media engines' buffers span 12 s: drained at the secondary
		// interval (10 s) while their span is unknown, they lose nothing.
		"FAKENVML_DEPTHS=3:600,4:600,8:600,9:600",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// TestFakeDriverHungDrainKeepsInterval: one drain hangs 4 s (under the
// watchdog's limit): the overrun it causes is counted, but the drain
// intervals stay what they were.
func TestFakeDriverHungDrainKeepsInterval(t *testing.T) {
	runCtlScenario(t, "hang-4s", "FAKENVML_PERIOD_US=20000", "FAKENVML_DEPTH=120",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// TestFakeDriverDeepBacklog: every buffer holds 20,000 samples at start,
// far more than an output's 8,192-sample lane: the first backlog reaches
// the output whole, in lane-sized steps, and nothing is dropped.
func TestFakeDriverDeepBacklog(t *testing.T) {
	runScenario(t, "deep-backlog", false, "FAKENVML_PERIOD_US=1000", "FAKENVML_DEPTH=20000",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// runCtlScenario is runFaultScenario with the sample period the caller
// gives (a 2.4 s power buffer, 20 ms × 120, as on a real driver).
func runCtlScenario(t *testing.T, scenario string, env ...string) {
	runScenario(t, scenario, false, append(env, "FAKENVML_CTL_DIR="+t.TempDir())...)
}

// stateScenario runs the scenarios of this file in the child process; it
// reports whether scenario is one of them.
func stateScenario(t *testing.T, scenario string, src *Source, clk *clocktest.Clock, lib string) bool {
	switch scenario {
	case "cursor-ahead":
		childCursorAhead(t, src, clk, lib)
	case "idle-start":
		childIdleStart(t, src, clk)
	case "lost-start-loss":
		childLostStartLoss(t, src, clk)
	case "outage":
		childOutage(t, src, clk)
	case "idle-restart":
		childIdleRestart(t, src, clk, lib)
	case "hang-4s":
		childHang4s(t, src, clk)
	case "deep-backlog":
		childDeepBacklog(t, src, clk)
	default:
		return false
	}
	return true
}

// fakeModel mirrors testdata/fakenvml.c's sample times: buffer type t takes
// a sample at every multiple of its period outside its idle windows.
type fakeModel struct {
	period, depth uint64
	depths        map[catalog.BufferType]uint64 // FAKENVML_DEPTHS
	initUS        uint64                        // the driver clock at the first nvmlInit (the manual clock's start)
	idle          []idleWin
}

type idleWin struct {
	typ      catalog.BufferType
	from, to uint64 // µs; to 0: open-ended
}

func newFakeModel(t *testing.T, start time.Time) fakeModel {
	m := fakeModel{period: 20000, depth: 100, initUS: uint64(start.UnixMicro())}
	if s := os.Getenv("FAKENVML_PERIOD_US"); s != "" {
		m.period, _ = strconv.ParseUint(s, 10, 64)
	}
	if s := os.Getenv("FAKENVML_DEPTH"); s != "" {
		m.depth, _ = strconv.ParseUint(s, 10, 64)
	}
	m.depths = map[catalog.BufferType]uint64{}
	for _, d := range strings.Split(os.Getenv("FAKENVML_DEPTHS"), ",") {
		typ, n, ok := strings.Cut(d, ":")
		if !ok {
			continue
		}
		ti, _ := strconv.Atoi(typ)
		m.depths[catalog.BufferType(ti)], _ = strconv.ParseUint(n, 10, 64)
	}
	for _, w := range strings.Split(os.Getenv("FAKENVML_IDLE_MS"), ",") {
		typ, span, ok := strings.Cut(w, "@")
		if !ok {
			continue
		}
		from, to, _ := strings.Cut(span, "-")
		n, _ := strconv.Atoi(typ)
		iw := idleWin{typ: catalog.BufferType(n)}
		if from != "" {
			ms, _ := strconv.ParseUint(from, 10, 64)
			iw.from = m.initUS + ms*1000
		}
		if to != "" {
			ms, _ := strconv.ParseUint(to, 10, 64)
			iw.to = m.initUS + ms*1000
		}
		m.idle = append(m.idle, iw)
	}
	return m
}

func (m fakeModel) taken(typ catalog.BufferType, us uint64) bool {
	for _, w := range m.idle {
		if w.typ == typ && us >= w.from && (w.to == 0 || us < w.to) {
			return false
		}
	}
	return true
}

// takenIn returns the sample times of typ in (from, to] (µs).
func (m fakeModel) takenIn(typ catalog.BufferType, from, to uint64) []uint64 {
	var out []uint64
	for k := from/m.period + 1; k*m.period <= to; k++ {
		if us := k * m.period; m.taken(typ, us) {
			out = append(out, us)
		}
	}
	return out
}

// heldAt returns the sample times the buffer of typ holds at us: its depth
// newest, none before the history it had at the library's init (initUS).
func (m fakeModel) heldAt(typ catalog.BufferType, us uint64) []uint64 {
	depth := m.depth
	if d, ok := m.depths[typ]; ok {
		depth = d
	}
	oldestK := (m.initUS/m.period + 1) - min(depth, m.initUS/m.period+1)
	var out []uint64
	for k := us / m.period; k >= oldestK && uint64(len(out)) < depth; k-- {
		if m.taken(typ, k*m.period) {
			out = append(out, k*m.period)
		}
		if k == 0 {
			break
		}
	}
	slices.Reverse(out)
	return out
}

// sampledTypes are the fake's buffer types (module power is unsupported).
var sampledTypes = []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferGPUUtil, catalog.BufferMemoryUtil,
	catalog.BufferEncoderUtil, catalog.BufferDecoderUtil, catalog.BufferSMClock, catalog.BufferMemoryClock,
	catalog.BufferJPEGUtil, catalog.BufferOFAUtil}

// tally compares what was delivered with what was expected, per buffer
// type and in all.
type tally struct {
	expected, delivered, missing, duplicated, extra int
	byType                                          map[catalog.BufferType][4]int // expected, delivered, missing, duplicated
}

func compare(expected map[catalog.BufferType][]uint64, got map[catalog.BufferType][]uint64) tally {
	tl := tally{byType: map[catalog.BufferType][4]int{}}
	for _, typ := range sampledTypes {
		want := map[uint64]bool{}
		for _, us := range expected[typ] {
			want[us] = true
		}
		seen := map[uint64]int{}
		for _, us := range got[typ] {
			seen[us]++
		}
		var miss, dup, extra int
		for us := range want {
			if seen[us] == 0 {
				miss++
			}
		}
		for us, n := range seen {
			dup += n - 1
			if !want[us] {
				extra++
			}
		}
		tl.expected += len(want)
		tl.delivered += len(got[typ])
		tl.missing += miss
		tl.duplicated += dup
		tl.extra += extra
		tl.byType[typ] = [4]int{len(want), len(got[typ]), miss, dup}
	}
	return tl
}

func (tl tally) String() string {
	return fmt.Sprintf("expected %d delivered %d missing %d duplicated %d (outside the window %d)",
		tl.expected, tl.delivered, tl.missing, tl.duplicated, tl.extra)
}

// counted describes what the engine counted on one device.
func counted(eng *sampler.Engine, col *collector, logs *syncBuffer, dev int) string {
	st := eng.Stats().Devices[dev]
	discarded := "n/a"
	if f := reflect.ValueOf(st).FieldByName("CursorsDiscarded"); f.IsValid() {
		discarded = strconv.FormatUint(f.Uint(), 10)
	}
	var dropped uint64
	for _, o := range eng.Stats().Outputs {
		dropped += o.Dropped
	}
	warns := 0
	if logs != nil {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "sample buffer") {
				warns++
			}
		}
	}
	return fmt.Sprintf("suspected_losses %d lost_estimate %d loss_events %d loss_warnings %d cursors_discarded %s output_dropped %d",
		st.SuspectedLosses, st.LostEstimate, len(col.eventsOf(record.EventSampleLoss, dev)), warns, discarded, dropped)
}

// keepLanesRead waits until the output has read (or dropped) all but a
// little of what the devices published (a liveness bound only). A stepped
// engine publishes as fast as the test moves the clock, but the output's
// pump flushes on real time: a pump not scheduled for a while would let
// the rings overrun and drop what the test means to count.
func keepLanesRead(t *testing.T, eng *sampler.Engine) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := eng.Stats()
		var published, taken uint64
		for _, d := range st.Devices {
			published += d.Published
		}
		for _, o := range st.Outputs {
			taken += o.Read + o.Dropped
		}
		lag := published - min(taken, published)
		if lag < 64 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the output left %d samples unread for 2 minutes", lag)
		}
		time.Sleep(time.Millisecond)
	}
}

// steppedClock returns a manual clock at start that the fake driver
// follows (FAKENVML_TIME_FILE), as manualClock does.
func steppedClock(t *testing.T, start time.Time) *clocktest.Clock {
	clk := clocktest.New(start)
	path := os.Getenv("FAKENVML_TIME_FILE")
	write := func(now time.Time) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d\n", now.UnixMicro())), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(start)
	clk.OnMove(write)
	return clk
}

func textLogger(logs *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func closeStore(s sampler.CursorStore) {
	if c, ok := s.(interface{ Close() error }); ok {
		c.Close()
	}
}

func childCursorAhead(t *testing.T, src *Source, clk *clocktest.Clock, lib string) {
	dir := t.TempDir()
	open := func() sampler.CursorStore {
		f, _, err := sampler.OpenCursorFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// Run 1: the device loop, the watchdog and the cursor saver park.
	s1 := open()
	stepEngine(t, src, sampler.Config{Cursors: s1}, clk, 3, 2*time.Second, reportDrops, nil, nil)
	closeStore(s1)
	// The wall clock steps back (60 s, then 0.5 s: less than any slack
	// for "ahead of now", so only the buffers' newest samples tell), the
	// driver's timestamps with it; each run starts right after the step.
	for i, step := range []time.Duration{60 * time.Second, 500 * time.Millisecond} {
		clk2 := steppedClock(t, clk.Now().Add(-step))
		src2, err := Open(Options{LibraryPath: lib, Now: clk2.Now})
		if err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		s2 := open()
		start := clk2.Now()
		eng, col := stepEngine(t, src2, sampler.Config{Cursors: s2, Logger: textLogger(&logs)}, clk2, 3, 5*time.Second, reportDrops, nil, nil)
		closeStore(s2)
		end := clk2.Now()
		clk = clk2
		m := newFakeModel(t, start) // the buffers are full of history at every init
		expected := map[catalog.BufferType][]uint64{}
		for _, typ := range sampledTypes {
			held := m.heldAt(typ, uint64(start.UnixMicro()))
			expected[typ] = append(held, m.takenIn(typ, uint64(start.UnixMicro()), uint64(end.UnixMicro()))...)
		}
		tl := compare(expected, bufferTimes(col, 0))
		warns := strings.Count(logs.String(), "drain cursor from the last run discarded")
		t.Logf("figures cursor-ahead (clock stepped back %v after run %d, then a 5 s run): %v; counted: %s; cursor-discard warnings %d",
			step, i+1, tl, counted(eng, col, &logs, 0), warns)
		if tl.missing != 0 || tl.duplicated != 0 {
			t.Errorf("run after the clock step: %v", tl)
		}
		if d := eng.Stats().Devices[0].CursorsDiscarded; d != uint64(len(sampledTypes)) || warns != 1 {
			t.Errorf("%d cursors discarded, %d warnings; want %d and 1", d, warns, len(sampledTypes))
		}
	}
}

// countedFor reports whether an estimate covers missing samples, give or
// take one per suspected loss (the estimate counts whole periods between
// the last sample known and the first one held).
func countedFor(st sampler.DeviceStats, missing int) bool {
	return st.LostEstimate+st.SuspectedLosses >= uint64(missing)
}

func childIdleStart(t *testing.T, src *Source, clk *clocktest.Clock) {
	var logs syncBuffer
	start := clk.Now()
	m := newFakeModel(t, start)
	eng, col := stepEngine(t, src, sampler.Config{Logger: textLogger(&logs)}, clk, 2, 16*time.Second, reportDrops, nil, nil)
	end := clk.Now()
	enc := catalog.BufferEncoderUtil
	expected := map[catalog.BufferType][]uint64{enc: m.takenIn(enc, uint64(start.UnixMicro()), uint64(end.UnixMicro()))}
	got := map[catalog.BufferType][]uint64{enc: bufferTimes(col, 0)[enc]}
	tl := compare(expected, got)
	st := eng.Stats().Devices[0]
	t.Logf("figures idle-start (encoder idle 4 s, then 50 Hz; 16 s): %v; counted: %s", tl, counted(eng, col, &logs, 0))
	if tl.duplicated != 0 || tl.missing == 0 {
		t.Errorf("encoder: %v; want some lost (the buffer overran before its first drain), none twice", tl)
	}
	if st.SuspectedLosses != 1 || !countedFor(st, tl.missing) || len(col.eventsOf(record.EventSampleLoss, 0)) != 1 {
		t.Errorf("counted %d suspected losses, estimate %d, %d events; want 1, at least the %d missing, 1",
			st.SuspectedLosses, st.LostEstimate, len(col.eventsOf(record.EventSampleLoss, 0)), tl.missing)
	}
}

func childLostStartLoss(t *testing.T, src *Source, clk *clocktest.Clock) {
	var logs syncBuffer
	start := clk.Now()
	back := start.Add(4 * time.Second)
	answered := false
	eng, col := stepEngine(t, src, sampler.Config{Logger: textLogger(&logs)}, clk, 3, 8*time.Second, reportDrops, func(now time.Time) {
		if !answered && !now.Before(back) {
			ctlFile(t, "lost1", false, "")
			answered = true
		}
	}, nil)
	end := clk.Now()
	m := newFakeModel(t, start)
	// The run is responsible for what the buffers take from its start on
	// (not for the history before it, which a GPU that answers at start
	// delivers as a bonus).
	expected := map[catalog.BufferType][]uint64{}
	for _, typ := range sampledTypes {
		expected[typ] = m.takenIn(typ, uint64(start.UnixMicro()), uint64(end.UnixMicro()))
	}
	got := bufferTimes(col, 1)
	for typ, ts := range got {
		got[typ] = slices.DeleteFunc(ts, func(us uint64) bool { return us <= uint64(start.UnixMicro()) })
	}
	tl := compare(expected, got)
	rec := col.eventsOf(record.EventDeviceRecovery, 1)
	recAt := "never"
	if len(rec) == 1 {
		recAt = time.Unix(0, rec[0].EndNS).Sub(start).String()
	}
	st := eng.Stats().Devices[1]
	t.Logf("figures lost-start (gpu1 answers from 4 s; 8 s run): %v; recovered at %s after %d probes; counted: %s",
		tl, recAt, st.Probes, counted(eng, col, &logs, 1))
	if tl.duplicated != 0 || !countedFor(st, tl.missing) || st.SuspectedLosses == 0 {
		t.Errorf("gpu1: %v; counted %d suspected losses, estimate %d: want every missing sample counted", tl, st.SuspectedLosses, st.LostEstimate)
	}
}

func childOutage(t *testing.T, src *Source, clk *clocktest.Clock) {
	var logs syncBuffer
	start := clk.Now()
	// One 6 s outage from 2 s, then five 1 s outages 3 s apart from 12 s.
	type outage struct{ from, to time.Duration }
	outages := []outage{{2 * time.Second, 8 * time.Second}}
	for i := range 5 {
		at := 12*time.Second + time.Duration(i)*3*time.Second
		outages = append(outages, outage{at, at + time.Second})
	}
	eng, col := stepEngine(t, src, sampler.Config{Logger: textLogger(&logs)}, clk, 3, 28*time.Second, reportDrops, func(now time.Time) {
		el := now.Sub(start)
		lost := false
		for _, o := range outages {
			lost = lost || el >= o.from && el < o.to
		}
		ctlFile(t, "lost1", lost, "")
	}, nil)
	end := clk.Now()
	m := newFakeModel(t, start)
	got := bufferTimes(col, 1)
	// Expected: everything from the start's history to the end; the
	// unavoidable loss is what the driver overwrote during an outage
	// before it answered again (outage longer than the span).
	spanUS := m.depth * m.period
	var long, short tally
	for i, o := range outages {
		from, to := uint64(start.Add(o.from).UnixMicro()), uint64(start.Add(o.to).UnixMicro())
		// The window each outage is responsible for: from its start to
		// 3 s after it ends (every probe within).
		exp, dl := map[catalog.BufferType][]uint64{}, map[catalog.BufferType][]uint64{}
		for _, typ := range sampledTypes {
			exp[typ] = m.takenIn(typ, from, to+2*uint64(time.Second/time.Microsecond))
			for _, us := range got[typ] {
				if us > from && us <= to+2*uint64(time.Second/time.Microsecond) {
					dl[typ] = append(dl[typ], us)
				}
			}
		}
		tl := compare(exp, dl)
		if i == 0 {
			long = tl
		} else {
			short.expected += tl.expected
			short.delivered += tl.delivered
			short.missing += tl.missing
			short.duplicated += tl.duplicated
		}
	}
	unavoidable := 0
	if d := uint64(6 * time.Second / time.Microsecond); d > spanUS {
		unavoidable = int((d-spanUS)/m.period) * len(sampledTypes)
	}
	var downFor []string
	for _, ev := range col.eventsOf(record.EventDeviceRecovery, 1) {
		downFor = append(downFor, time.Duration(ev.EndNS-ev.StartNS).String())
	}
	st := eng.Stats().Devices[1]
	all := map[catalog.BufferType][]uint64{}
	for _, typ := range sampledTypes {
		all[typ] = append(m.heldAt(typ, uint64(start.UnixMicro())), m.takenIn(typ, uint64(start.UnixMicro()), uint64(end.UnixMicro()))...)
	}
	total := compare(all, got)
	t.Logf("figures outage: 6 s outage: %v (unavoidable %d, all 9 buffer types); five 1 s outages: expected %d delivered %d missing %d duplicated %d; down for %v; %d probes; whole run: %v; counted: %s",
		long, unavoidable, short.expected, short.delivered, short.missing, short.duplicated, downFor, st.Probes, total, counted(eng, col, &logs, 1))
	if short.missing != 0 || total.duplicated != 0 {
		t.Errorf("1 s outages lost %d samples (want 0), %d duplicated", short.missing, total.duplicated)
	}
	if long.missing > unavoidable+int(uint64(sampler.DefaultLostRetryInterval/time.Microsecond)/m.period)*len(sampledTypes)/2 {
		t.Errorf("6 s outage lost %d samples, unavoidable %d: probed too seldom", long.missing, unavoidable)
	}
	if !countedFor(st, total.missing) {
		t.Errorf("lost estimate %d, %d missing", st.LostEstimate, total.missing)
	}
}

func childIdleRestart(t *testing.T, src *Source, clk *clocktest.Clock, lib string) {
	dir := t.TempDir()
	open := func() sampler.CursorStore {
		f, _, err := sampler.OpenCursorFile(dir)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	start := clk.Now()
	s1 := open()
	_, c1 := stepEngine(t, src, sampler.Config{Cursors: s1}, clk, 3, 2*time.Second, reportDrops, nil, nil)
	closeStore(s1)
	clk.Advance(200 * time.Millisecond)
	src2, err := Open(Options{LibraryPath: lib, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	s2 := open()
	eng, c2 := stepEngine(t, src2, sampler.Config{Cursors: s2, Logger: textLogger(&logs)}, clk, 3, 6*time.Second, reportDrops, nil, nil)
	closeStore(s2)
	end := clk.Now()
	m := newFakeModel(t, start)
	expected := map[catalog.BufferType][]uint64{}
	for _, typ := range sampledTypes {
		expected[typ] = append(m.heldAt(typ, uint64(start.UnixMicro())), m.takenIn(typ, uint64(start.UnixMicro()), uint64(end.UnixMicro()))...)
	}
	got := bufferTimes(c1, 0)
	for typ, ts := range bufferTimes(c2, 0) {
		got[typ] = append(got[typ], ts...)
	}
	tl := compare(expected, got)
	st := eng.Stats().Devices[0]
	t.Logf("figures idle-restart (utilization buffers idle 1.5-5 s, restart at 2.2 s): runs 1+2: %v; run 2 counted: %s",
		tl, counted(eng, c2, &logs, 0))
	if tl.missing != 0 || tl.duplicated != 0 {
		t.Errorf("%v", tl)
	}
	if st.SuspectedLosses != 0 || len(c2.eventsOf(record.EventSampleLoss, 0)) != 0 {
		t.Errorf("%d suspected losses, %d loss events with nothing missing", st.SuspectedLosses, len(c2.eventsOf(record.EventSampleLoss, 0)))
	}
}

func childHang4s(t *testing.T, src *Source, clk *clocktest.Clock) {
	var logs syncBuffer
	start := clk.Now()
	hangAt, releaseAt := start.Add(5*time.Second), start.Add(9*time.Second)
	hung := false
	eng, col := stepEngine(t, src, sampler.Config{Logger: textLogger(&logs)}, clk, 2, 20*time.Second, reportDrops, func(now time.Time) {
		switch {
		case !hung && !now.Before(hangAt):
			ctlFile(t, "hang0", true, "")
			hung = true
		case hung && !now.Before(releaseAt):
			ctlFile(t, "hang0", false, "")
		}
	}, func() bool { return ctlExists("hanging0") })
	end := clk.Now()
	m := newFakeModel(t, start)
	expected := map[catalog.BufferType][]uint64{}
	for _, typ := range sampledTypes {
		expected[typ] = append(m.heldAt(typ, uint64(start.UnixMicro())), m.takenIn(typ, uint64(start.UnixMicro()), uint64(end.UnixMicro()))...)
	}
	tl := compare(expected, bufferTimes(col, 0))
	st := eng.Stats().Devices[0]
	t.Logf("figures hang-4s (every call of the GPU hangs from 5 s to 9 s; 20 s run): %v; shortest drain interval at the end %v; %d drains; counted: %s",
		tl, st.MinDrainInterval, st.Drains, counted(eng, col, &logs, 0))
	if st.MinDrainInterval != time.Second {
		t.Errorf("shortest drain interval %v after a 4 s hang, want 1s (the drain interval, unchanged)", st.MinDrainInterval)
	}
	if tl.duplicated != 0 || !countedFor(st, tl.missing) {
		t.Errorf("%v, lost estimate %d", tl, st.LostEstimate)
	}
}

func childDeepBacklog(t *testing.T, src *Source, clk *clocktest.Clock) {
	var logs syncBuffer
	start := clk.Now()
	eng, col := stepEngine(t, src, sampler.Config{Logger: textLogger(&logs)}, clk, 2, 3*time.Second, reportDrops, nil, nil)
	end := clk.Now()
	m := newFakeModel(t, start)
	expected := map[catalog.BufferType][]uint64{}
	for _, typ := range sampledTypes {
		expected[typ] = append(m.heldAt(typ, uint64(start.UnixMicro())), m.takenIn(typ, uint64(start.UnixMicro()), uint64(end.UnixMicro()))...)
	}
	tl := compare(expected, bufferTimes(col, 0))
	t.Logf("figures deep-backlog (every buffer 20,000 deep at 1 ms, ring 8,192; 3 s run): %v; counted: %s", tl, counted(eng, col, &logs, 0))
	if tl.missing != 0 || tl.duplicated != 0 || eng.Stats().Outputs[0].Dropped != 0 {
		t.Errorf("%v, output dropped %d", tl, eng.Stats().Outputs[0].Dropped)
	}
}
