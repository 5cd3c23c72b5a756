//go:build cgo

package nvml

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/internal/doctor"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sourcetest"
)

// The fake-driver tests run the real cgo/dlopen path against
// testdata/fakenvml.c, compiled here with gcc. A process binds NVML symbols
// once, so each scenario runs in its own process: the parent test re-executes
// the test binary with the scenario in the environment, and the child
// (TestFakeDriverChild) loads the library.
const (
	envScenario = "GPUSAMPLER_FAKENVML_SCENARIO"
	envLib      = "GPUSAMPLER_FAKENVML_LIB"
)

// buildFake compiles the fake library (the old-driver variant when old) and
// returns its path.
func buildFake(t testing.TB, dir string, old bool) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		if testing.Short() {
			t.Skip("gcc not found (-short)")
		}
		t.Fatal("the fake NVML library needs gcc: ", err)
	}
	sub := "new"
	args := []string{"-shared", "-fPIC", "-O1", "-Wall"}
	if old {
		sub = "old"
		args = append(args, "-DFAKE_OLD_DRIVER")
	}
	out := filepath.Join(dir, sub, "libnvidia-ml.so.1")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	args = append(args, "-o", out, filepath.Join("testdata", "fakenvml.c"))
	if b, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

// runScenario runs one scenario in a child process and fails with its
// output when the child fails (including dying on a missing symbol).
func runScenario(t *testing.T, scenario string, old bool, env ...string) {
	t.Helper()
	lib := buildFake(t, t.TempDir(), old)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFakeDriverChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envScenario+"="+scenario, envLib+"="+lib)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFakeDriverChild") {
		t.Fatalf("scenario %s: %v\n%s", scenario, err, out)
	}
	if testing.Verbose() {
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "_test.go:") && !strings.Contains(line, "--- ") {
				t.Log(strings.TrimSpace(line))
			}
		}
	}
}

func TestFakeDriverExactlyOnce(t *testing.T) {
	runScenario(t, "exactly-once", false, "FAKENVML_PERIOD_US=5000", "FAKENVML_DEPTH=100", "FAKENVML_DEVICES=2",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// Back-to-back runs with the drain cursors kept in a state directory.
func TestFakeDriverRestartExactlyOnce(t *testing.T) {
	runScenario(t, "restart", false, "FAKENVML_PERIOD_US=5000", "FAKENVML_DEPTH=100", "FAKENVML_DEVICES=2",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// The backend passes the source conformance suite on the fake driver (two
// GPUs, one process each; the suite drives the driver's clock).
func TestFakeDriverConformance(t *testing.T) {
	runScenario(t, "conformance", false, "FAKENVML_PERIOD_US=5000", "FAKENVML_DEPTH=100", "FAKENVML_DEVICES=2",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

func TestFakeDriverLossCounted(t *testing.T) {
	// The size query says 1000 samples but the buffer keeps 50: the engine
	// drains at 1 s, finds the overrun, and falls back to what it saw.
	runScenario(t, "loss", false, "FAKENVML_PERIOD_US=2000", "FAKENVML_DEPTH=50", "FAKENVML_REPORTED_DEPTH=1000")
}

func TestFakeDriverBootTime(t *testing.T) {
	runScenario(t, "boottime", false, "FAKENVML_CLOCK=boottime", "FAKENVML_PERIOD_US=5000")
}

func TestFakeDriverNotSupported(t *testing.T) {
	runScenario(t, "unsupported", false, "FAKENVML_UNSUPPORTED=186,83", "FAKENVML_IDLE=1")
}

// TestFakeDriverShortBuffer: a buffer spanning 36 ms (36 samples, 1 ms
// apart) is drained at 20 ms (half its span, clamped to the minimum
// interval) from the first drain on: nothing is lost in the first 2 s.
func TestFakeDriverShortBuffer(t *testing.T) {
	runScenario(t, "short-buffer", false, "FAKENVML_PERIOD_US=1000", "FAKENVML_DEPTH=36",
		"FAKENVML_TIME_FILE="+filepath.Join(t.TempDir(), "now"))
}

// TestFakeDriverPointFallback: without sample buffers, the buffer metrics
// that have a point getter come from point reads at the field interval,
// marked as such; the others (here the media engines, whose point getters
// say not supported) are not sampled; both are logged once.
func TestFakeDriverPointFallback(t *testing.T) {
	runScenario(t, "fallback", false, "FAKENVML_BUFFER_NS=all", "FAKENVML_MEDIA_UTIL=ns")
}

func TestFakeDriverVersions(t *testing.T) {
	for _, tc := range []struct {
		version string
		old     bool
	}{
		{"12.535.183.01", true}, // R535 symbols only
		{"12.550.54.15", false},
		{"12.575.51.03", false},
		{"13.580.65.06", false},
		{"13.590.44.01", false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			runScenario(t, "fields", tc.old, "FAKENVML_VERSION="+tc.version)
		})
	}
}

// The identity's modes, CUDA and VBIOS versions as the driver reports
// them; what it does not support is left empty.
func TestFakeDriverModes(t *testing.T) {
	for _, tc := range []struct {
		env      []string
		want     string // persistence, ECC and MIG mode
		versions string // CUDA and VBIOS version
	}{
		{nil, "enabled/enabled/disabled", "13.0/96.00.89.00.01"},
		{[]string{"FAKENVML_PERSISTENCE=0", "FAKENVML_ECC=ns", "FAKENVML_MIG_MODE=ns", "FAKENVML_CUDA=ns", "FAKENVML_VBIOS=ns"},
			"disabled/unsupported/unsupported", "/"},
		{[]string{"FAKENVML_ECC=0", "FAKENVML_MIG_MODE=1", "FAKENVML_CUDA=12080"}, "enabled/disabled/enabled", "12.8/96.00.89.00.01"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			runScenario(t, "modes", false, append(tc.env, "FAKENVML_WANT_MODES="+tc.want, "FAKENVML_WANT_VERSIONS="+tc.versions)...)
		})
	}
}

// The nvidia_smi drop-in's extra reads (fan, display, encoder and
// frame-buffer-capture statistics, pending page retirement, media-engine
// utilization point reads) as the driver answers them, each left out
// (not supported) where the driver says so; a second read asks the
// driver only for what it supports (probe once, cache).
func TestFakeDriverDropInReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"defaults", nil,
			"fan_speed=ns display_enabled=0 display_in_use=0 encoder_sessions=0 encoder_average_fps=0 encoder_average_latency=0 " +
				"fbc_sessions=0 fbc_average_fps=0 fbc_average_latency=0 page_retirement_pending=ns " +
				"utilization_encoder=0 utilization_decoder=0 utilization_jpeg=0 utilization_ofa=0"},
		{"present", []string{"FAKENVML_FAN=46", "FAKENVML_DISPLAY_MODE=1", "FAKENVML_DISPLAY_ACTIVE=1", "FAKENVML_RETIRED_PENDING=1",
			"FAKENVML_ENCODER_STATS=2,60,1500", "FAKENVML_FBC_STATS=1,30,900", "FAKENVML_MEDIA_UTIL=12,34,5,6"},
			"fan_speed=46 display_enabled=1 display_in_use=1 encoder_sessions=2 encoder_average_fps=60 encoder_average_latency=1500 " +
				"fbc_sessions=1 fbc_average_fps=30 fbc_average_latency=900 page_retirement_pending=1 " +
				"utilization_encoder=12 utilization_decoder=34 utilization_jpeg=5 utilization_ofa=6"},
		{"absent", []string{"FAKENVML_DISPLAY_MODE=ns", "FAKENVML_DISPLAY_ACTIVE=ns", "FAKENVML_RETIRED_PENDING=ns",
			"FAKENVML_ENCODER_STATS=ns", "FAKENVML_FBC_STATS=ns", "FAKENVML_MEDIA_UTIL=ns"},
			"fan_speed=ns display_enabled=ns display_in_use=ns encoder_sessions=ns encoder_average_fps=ns encoder_average_latency=ns " +
				"fbc_sessions=ns fbc_average_fps=ns fbc_average_latency=ns page_retirement_pending=ns " +
				"utilization_encoder=ns utilization_decoder=ns utilization_jpeg=ns utilization_ofa=ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runScenario(t, "drop-in-reads", false, append(tc.env, "FAKENVML_WANT_READS="+tc.want)...)
		})
	}
}

// TestFakeDriverNoCPUAffinity: the fake library, like a driver without
// nvmlDeviceGetCpuAffinity, answers the NUMA query as unsupported instead
// of the process dying on the missing symbol (bench asks it on every run).
func TestFakeDriverNoCPUAffinity(t *testing.T) {
	runScenario(t, "no-cpu-affinity", false)
}

func TestFakeDriverNotLoaded(t *testing.T) {
	runScenario(t, "driver-not-loaded", false, "FAKENVML_INIT_RET=9")
}

// TestFakeDriverChild is the child side of the scenarios above.
func TestFakeDriverChild(t *testing.T) {
	scenario := os.Getenv(envScenario)
	if scenario == "" {
		t.Skip("runs only as a child of the TestFakeDriver* tests")
	}
	lib := os.Getenv(envLib)
	if scenario == "driver-not-loaded" {
		_, err := Open(Options{LibraryPath: lib})
		if !errors.Is(err, sampler.ErrDriverNotLoaded) {
			t.Fatalf("err = %v, want ErrDriverNotLoaded", err)
		}
		t.Logf("driver not loaded: %v", err)
		return
	}
	if scenario == "driver-late" {
		childDriverLate(t, lib)
		return
	}
	if scenario == "fields-ns" || scenario == "getters-ns" || scenario == "buffers-ns-warn" {
		childCapabilities(t, lib, scenario)
		return
	}
	calls := filepath.Join(t.TempDir(), "calls")
	os.Setenv("FAKENVML_CALLS_FILE", calls)
	if scenario == "lost-at-start" || scenario == "lost-start-loss" {
		ctlFile(t, "lost1", true, "") // before the library enumerates the GPUs
	}
	opts := Options{LibraryPath: lib}
	var clk *clocktest.Clock
	if os.Getenv("FAKENVML_TIME_FILE") != "" {
		clk = manualClock(t)
		opts.Now = clk.Now
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	src := s.(*Source)
	switch scenario {
	case "exactly-once":
		childExactlyOnce(t, src, clk, calls)
	case "loss":
		childLoss(t, src)
	case "boottime":
		childBootTime(t, src)
	case "unsupported":
		childUnsupported(t, src)
	case "fields":
		childFields(t, src)
	case "lost":
		childLost(t, src)
	case "hang-clock":
		childHangClock(t, src, clk)
	case "lost-at-start":
		childLostAtStart(t, src, clk)
	case "restart":
		childRestart(t, src, clk, lib)
	case "lost-and-back":
		childLostAndBack(t, src, clk)
	case "hang":
		childHang(t, src)
	case "xid":
		childXID(t, src)
	case "allns":
		childAllNotSupported(t, src)
	case "doctor":
		childDoctor(t, src)
	case "doctor-fallback":
		childDoctorFallback(t, src)
	case "doctor-media", "doctor-fields-ns":
		childDoctorCost(t, src, scenario)
	case "gpm":
		childGPM(t, src)
	case "processes":
		childProcesses(t, src)
	case "processes-ns":
		childProcessesNotSupported(t, src)
	case "modes":
		childModes(t, src)
	case "drop-in-reads":
		childDropInReads(t, src)
	case "no-cpu-affinity":
		childNoCPUAffinity(t, src)
	case "fallback":
		childFallback(t, src)
	case "processes-none":
		childNoProcesses(t, src)
	case "short-buffer":
		childShortBuffer(t, src, clk)
	case "call-budget":
		childCallBudget(t, src, clk)
	case "conformance":
		sourcetest.Run(t, src, sourcetest.Options{Advance: clk.Advance})
	default:
		if !stateScenario(t, scenario, src, clk, lib) {
			t.Fatalf("unknown scenario %q", scenario)
		}
	}
}

// childNoCPUAffinity asks every GPU for its CPU affinity on a library that
// lacks the symbol: unsupported, never a call.
func childNoCPUAffinity(t *testing.T, src *Source) {
	if src.has["nvmlDeviceGetCpuAffinity"] {
		t.Fatal("the fake library exports nvmlDeviceGetCpuAffinity: this scenario needs a library without it")
	}
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range devs {
		r, ok := d.(sampler.CPUAffinityReporter)
		if !ok {
			t.Fatalf("device %d: no CPUAffinity", i)
		}
		if cpus, err := r.CPUAffinity(); !errors.Is(err, sampler.ErrNotSupported) {
			t.Fatalf("device %d: CPUAffinity = %v, %v; want ErrNotSupported", i, cpus, err)
		}
	}
}

// fakeValue mirrors testdata/fakenvml.c: the value of sample k of type t in
// the catalog's base unit.
func fakeValue(t catalog.BufferType, k uint64) float64 {
	switch t {
	case catalog.BufferTotalPower:
		return float64(100000+(k%1000)*100) / 1000
	case catalog.BufferSMClock:
		return float64(1000 + k%980)
	case catalog.BufferMemoryClock:
		return 2619
	}
	return float64(k % 101)
}

const fakePeriodUS = 5000

// checkContinuous checks that ts are consecutive multiples of the period:
// every sample between the first and the last, once.
func checkContinuous(t *testing.T, what string, ts []uint64, periodUS uint64) {
	t.Helper()
	if len(ts) < 10 {
		t.Errorf("%s: only %d samples", what, len(ts))
		return
	}
	for i := 1; i < len(ts); i++ {
		if d := ts[i] - ts[i-1]; d != periodUS {
			t.Errorf("%s: samples %d→%d step %d µs (want %d): duplicate or gap", what, ts[i-1], ts[i], d, periodUS)
			return
		}
	}
}

// collector is an in-process output that keeps copies of every sample.
type collector struct {
	mu      sync.Mutex
	samples []record.Sample
	events  []record.Event
	devices []record.Device // every device record delivered, in order
}

func (c *collector) Write(_ context.Context, b *record.Batch) error {
	c.mu.Lock()
	c.samples = append(c.samples, b.Samples...)
	c.devices = append(c.devices, b.Devices...)
	for _, e := range b.Events {
		c.events = append(c.events, e.Clone())
	}
	c.mu.Unlock()
	return nil
}

func (c *collector) Close() error { return nil }

// runEngine runs the engine on src for d and returns what it published.
func runEngine(t *testing.T, src sampler.Source, cfg sampler.Config, d time.Duration) (*sampler.Engine, *collector) {
	t.Helper()
	eng, col, stop := launch(t, src, cfg, 20*time.Millisecond)
	<-time.After(d)
	stop()
	return eng, col
}

// runEngineStepped is stepEngine without a hook, failing on output drops.
func runEngineStepped(t *testing.T, src sampler.Source, cfg sampler.Config, clk *clocktest.Clock, armed int, d time.Duration) (*sampler.Engine, *collector) {
	return stepEngine(t, src, cfg, clk, armed, d, failOnDrops, nil, nil)
}

// Whether stepEngine fails the test when its output dropped samples (a
// stepped run must not outrun its pump), or leaves the drops to the
// test's figures.
const (
	failOnDrops = true
	reportDrops = false
)

// stepEngine runs the engine on the manual clock clk (which the fake
// driver follows) until d has passed on it, and returns what it
// published. Each step waits until armed timers are parked on the clock
// (every device loop, and the watchdog) and the output has read its lanes,
// calls hook (when set) with the clock's time while everything is parked
// (a test injects faults at chosen times from it), then moves the clock to
// the earliest deadline. hung, when set, says a driver call blocks: one
// loop fewer parks.
func stepEngine(t *testing.T, src sampler.Source, cfg sampler.Config, clk *clocktest.Clock, armed int, d time.Duration,
	drops bool, hook func(now time.Time), hung func() bool) (*sampler.Engine, *collector) {
	t.Helper()
	cfg.Clock = clk
	eng, col, stop := launch(t, src, cfg, 5*time.Millisecond)
	end := clk.Now().Add(d)
	isHung := func() bool { return hung != nil && hung() }
	for {
		n := armed
		waitParked(clk, n, isHung)
		if isHung() {
			n--
			waitParked(clk, n, func() bool { return false })
		}
		keepLanesRead(t, eng)
		if hook != nil {
			hook(clk.Now())
		}
		if next, _ := clk.Next(); next.After(end) {
			break
		}
		clk.Step(n)
	}
	stop()
	if drops == failOnDrops {
		for _, o := range eng.Stats().Outputs {
			if o.Dropped != 0 {
				t.Errorf("output %s dropped %d samples: the stepped run outran its pump", o.Name, o.Dropped)
			}
		}
	}
	return eng, col
}

// manualClock returns a manual clock at the current time that the fake
// driver follows through FAKENVML_TIME_FILE (set before the library is
// initialized).
func manualClock(t *testing.T) *clocktest.Clock {
	return steppedClock(t, time.Now().Truncate(time.Millisecond))
}

func childExactlyOnce(t *testing.T, src *Source, clk *clocktest.Clock, callsFile string) {
	devs, err := src.Devices()
	if err != nil || len(devs) != 2 {
		t.Fatalf("devices: %v, %v", len(devs), err)
	}
	// The one-call drain path is in use and knows the buffers' capacity.
	if d := devs[0].(*device); d.raw == nil || d.BufferCapacity(catalog.BufferGPUUtil) != 100 {
		t.Fatalf("one-call path: handle %v, capacity %d; want a handle and 100", d.raw, d.BufferCapacity(catalog.BufferGPUUtil))
	}
	// Direct drains at random intervals (all shorter than half the 500 ms
	// buffer span, on the driver's clock), cursor kept as the engine keeps
	// it.
	types := []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferGPUUtil, catalog.BufferSMClock, catalog.BufferMemoryClock}
	got := map[catalog.BufferType][]uint64{}
	cursor := map[catalog.BufferType]uint64{}
	var raw []sampler.RawSample
	for i := 0; i < 80; i++ {
		for _, typ := range types {
			raw, err = devs[0].Drain(typ, cursor[typ], raw[:0])
			if errors.Is(err, sampler.ErrNothingNew) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range raw {
				if r.TimeUS <= cursor[typ] {
					t.Fatalf("%s: sample %d not newer than cursor %d", typ, r.TimeUS, cursor[typ])
				}
				if want := fakeValue(typ, r.TimeUS/fakePeriodUS); r.Value != want {
					t.Fatalf("%s: sample %d = %v, want %v", typ, r.TimeUS, r.Value, want)
				}
				got[typ] = append(got[typ], r.TimeUS)
				cursor[typ] = max(cursor[typ], r.TimeUS)
			}
		}
		clk.Advance(time.Duration(rand.IntN(25)) * time.Millisecond)
	}
	for _, typ := range types {
		checkContinuous(t, "direct "+typ.String(), got[typ], fakePeriodUS)
	}

	// The engine, with its defaults, on both devices, for 2 s of the
	// clock: two device loops and the watchdog park on it.
	eng, col := runEngineStepped(t, src, sampler.Config{Clock: clk}, clk, 3, 2*time.Second)
	byKey := map[[2]int][]uint64{}
	for _, s := range col.samples {
		m, _ := catalog.Default().Get(s.Metric)
		if m.Src.Kind == catalog.FromBuffer && s.Flags&record.FlagPointRead == 0 {
			k := [2]int{int(s.Device), int(s.Metric)}
			byKey[k] = append(byKey[k], uint64(s.TimeNS/1000))
		}
	}
	for _, dev := range []int{0, 1} {
		for _, typ := range types {
			ts := byKey[[2]int{dev, int(catalog.Default().BufferMetric(typ))}]
			checkContinuous(t, fmt.Sprintf("engine gpu%d %s", dev, typ), ts, fakePeriodUS)
		}
	}
	st := eng.Stats()
	var ours uint64
	for _, d := range st.Devices {
		if d.SuspectedLosses != 0 {
			t.Errorf("gpu%d: %d suspected losses with drains inside the span", d.Index, d.SuspectedLosses)
		}
		if d.Clock != sampler.ClockRealtime {
			t.Errorf("gpu%d: clock %v, want realtime", d.Index, d.Clock)
		}
		ours += d.Calls
		// The calls per function add up to the calls.
		var sum uint64
		for _, n := range d.CallsByFunction {
			sum += n
		}
		if sum != d.Calls || d.CallsByFunction["GetSamples"] == 0 || d.CallsByFunction["GetFieldValues"] == 0 {
			t.Errorf("gpu%d: calls by function %v (sum %d), calls %d", d.Index, d.CallsByFunction, sum, d.Calls)
		}
		t.Logf("gpu%d: published %d, calls %d, samples/call %.1f, drain interval %v", d.Index, d.Published, d.Calls, d.SamplesPerCall, d.MinDrainInterval)
	}
	// Engine.Run closed the source: the fake wrote the calls it received.
	f, err := os.Open(callsFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var theirs uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var idx int
		var n uint64
		fmt.Sscan(sc.Text(), &idx, &n)
		theirs += n
	}
	if ours != theirs {
		t.Errorf("counted %d NVML device calls, the library received %d", ours, theirs)
	}
}

func childLoss(t *testing.T, src *Source) {
	// The buffer holds 100 ms but reports 2 s, first drain interval 1 s: the
	// the buffer overrun.
	eng, col := runEngine(t, src, sampler.Config{DrainInterval: time.Second}, 1500*time.Millisecond)
	d := eng.Stats().Devices[0]
	if d.SuspectedLosses == 0 || d.LostEstimate < 100 {
		t.Errorf("suspected losses %d, lost estimate %d: the overrun was not counted", d.SuspectedLosses, d.LostEstimate)
	}
	if d.MinDrainInterval >= time.Second {
		t.Errorf("drain interval %v after a loss, want it shortened below the configured 1s", d.MinDrainInterval)
	}
	if !slices.ContainsFunc(col.events, func(e record.Event) bool { return e.Kind == record.EventSampleLoss }) {
		t.Errorf("no sample-loss event")
	}
	t.Logf("losses %d, lost estimate %d, interval now %v", d.SuspectedLosses, d.LostEstimate, d.MinDrainInterval)
}

func childBootTime(t *testing.T, src *Source) {
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // fill the 500 ms buffers
	for _, p := range doctor.ProbeBuffers(devs[0], doctor.Options{}) {
		switch {
		case p.Type == catalog.BufferModulePower.String():
			if p.Supported {
				t.Errorf("module power: supported, want not")
			}
		case p.Depth != 100 || p.Period != fakePeriodUS*time.Microsecond || p.Clock != sampler.ClockBoottime.String() || p.Duplicates != 0:
			t.Errorf("probe %s = %+v, want depth 100, period 5ms, boottime", p.Type, p)
		}
	}
	eng, col := runEngine(t, src, sampler.Config{}, time.Second)
	if c := eng.Stats().Devices[0].Clock; c != sampler.ClockBoottime {
		t.Errorf("clock = %v, want boottime", c)
	}
	now := time.Now().UnixNano()
	n := 0
	for _, s := range col.samples {
		if s.Metric != catalog.MetricPowerDraw {
			continue
		}
		n++
		if age := time.Duration(now - s.TimeNS); age < 0 || age > 3*time.Second {
			t.Fatalf("power sample at %v: %v from now; boot-time stamps were not converted", s.Time(), age)
		}
	}
	if n < 100 {
		t.Errorf("%d power samples in 1 s at 5 ms", n)
	}
}

func childUnsupported(t *testing.T, src *Source) {
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	ids := []catalog.MetricID{catalog.MetricPowerInstant, catalog.MetricEnergy, catalog.MetricTempMemory, catalog.MetricFanSpeed, catalog.MetricUtilGPU}
	out := make([]sampler.Reading, len(ids))
	if err := devs[0].Read(ids, out); err != nil {
		t.Fatal(err)
	}
	// Energy's field is refused, and its getter
	// (nvmlDeviceGetTotalEnergyConsumption) reads it; instant power has no
	// getter.
	for i, wantNS := range []bool{true, false, false, true, false} {
		if errors.Is(out[i].Err, sampler.ErrNotSupported) != wantNS {
			t.Errorf("%s: err %v, want not supported %v", catalog.Default().Name(ids[i]), out[i].Err, wantNS)
		}
	}
	if out[2].Value != 48 {
		t.Errorf("memory temperature = %v", out[2].Value)
	}
	if out[1].Value < float64(time.Now().Add(-time.Hour).UnixMilli()) {
		t.Errorf("energy from its getter = %v, want the fake's mJ clock", out[1].Value)
	}
	if _, err := devs[0].Drain(catalog.BufferModulePower, 0, nil); !errors.Is(err, sampler.ErrNotSupported) {
		t.Errorf("module power drain: %v", err)
	}
	if _, err := devs[0].Drain(catalog.BufferGPUUtil, 0, nil); !errors.Is(err, sampler.ErrNothingNew) {
		t.Errorf("idle utilization drain: %v, want nothing new", err)
	}
	eng, col := runEngine(t, src, sampler.Config{}, 1200*time.Millisecond)
	d := eng.Stats().Devices[0]
	if d.PointReads == 0 || d.NothingNew == 0 {
		t.Errorf("idle GPU: point reads %d, nothing new %d", d.PointReads, d.NothingNew)
	}
	point := false
	for _, s := range col.samples {
		if s.Metric == catalog.MetricPowerInstant {
			t.Fatalf("unsupported field published: %+v", s)
		}
		if s.Metric == catalog.MetricUtilGPU {
			if s.Flags&record.FlagPointRead == 0 {
				t.Errorf("idle utilization sample not marked as a point read: %+v", s)
			}
			point = true
		}
	}
	if !point {
		t.Errorf("no utilization point read on an idle GPU")
	}
}

func childFields(t *testing.T, src *Source) {
	v := src.NVMLVersion()
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	id, err := devs[0].Identity()
	if err != nil || id.UUID != "GPU-fake-0000-0000" || id.SlowdownTempC != 89 || id.MemoryMaxTempC != 95 || id.PCIBusID != "00000000:18:00.0" {
		t.Fatalf("identity %+v, %v", id, err)
	}
	// Every catalog metric at once: the fake aborts on a field id this
	// version defines differently, the loader on an absent symbol.
	var ids []catalog.MetricID
	for _, m := range catalog.Default().All() {
		ids = append(ids, m.ID)
	}
	out := make([]sampler.Reading, len(ids))
	if err := devs[0].Read(ids, out); err != nil {
		t.Fatal(err)
	}
	get := func(id catalog.MetricID) sampler.Reading { return out[slices.Index(ids, id)] }
	old := !src.HasSymbol("nvmlDeviceGetTemperatureV")
	wantTemp := 42.0 // nvmlDeviceGetTemperatureV
	if old {
		wantTemp = 41 // nvmlDeviceGetTemperature
	}
	if r := get(catalog.MetricTempGPU); r.Err != nil || r.Value != wantTemp {
		t.Errorf("NVML %s: temperature %v, %v; want %v", v.Raw, r.Value, r.Err, wantTemp)
	}
	if r := get(catalog.MetricClocksEventReasons); r.Err != nil || r.Value != 4 {
		t.Errorf("NVML %s: clock event reasons %v, %v", v.Raw, r.Value, r.Err)
	}
	hw := get(catalog.MetricThrottleHWThermal)
	switch {
	case v.API.Less(api12_9):
		if !errors.Is(hw.Err, sampler.ErrNotSupported) {
			t.Errorf("NVML %s: hw thermal throttle %v, %v; want not supported", v.Raw, hw.Value, hw.Err)
		}
	case v.API.Less(api13_1):
		if hw.Err != nil || hw.Value != 7*252 {
			t.Errorf("NVML %s: hw thermal throttle %v, %v; want field 252", v.Raw, hw.Value, hw.Err)
		}
	default:
		if hw.Err != nil || hw.Value != 7*270 {
			t.Errorf("NVML %s: hw thermal throttle %v, %v; want field 270", v.Raw, hw.Value, hw.Err)
		}
	}
	// Before 12.4 the PCIe byte counters are no fields: GetPcieThroughput
	// stands in, a counter from 0 at the first read.
	pcie := get(catalog.MetricPCIeTxBytes)
	viaGetter := devs[0].(sampler.CallBreakdown).CallsByFunction()["GetPcieThroughput"] > 0
	if pcie.Err != nil || v.API.Less(api12_4) != viaGetter || (viaGetter && pcie.Value != 0) {
		t.Errorf("NVML %s: pcie tx %v, %v (by GetPcieThroughput: %v)", v.Raw, pcie.Value, pcie.Err, viaGetter)
	}
	if r := get(catalog.MetricPowerInstant); r.Err != nil || r.Value != 312.25 {
		t.Errorf("power instant %v, %v", r.Value, r.Err)
	}
	if r := get(catalog.MetricNVLinkTxBytes); r.Err != nil || r.Value != 10240 {
		t.Errorf("nvlink tx %v, %v", r.Value, r.Err)
	}
	for _, h := range []struct {
		id   catalog.MetricID
		want float64
	}{
		{catalog.MetricECCSingleAggregate, 3}, {catalog.MetricECCDoubleAggregate, 0},
		{catalog.MetricRowRemapPending, 0}, {catalog.MetricRowRemapFailure, 0},
		{catalog.MetricRetiredPagesSingle, 0}, {catalog.MetricRetiredPagesDouble, 0},
		{catalog.MetricNVLinkCRCFlitErrors, 3}, {catalog.MetricNVLinkCRCDataErrors, 4},
		{catalog.MetricNVLinkReplayErrors, 5}, {catalog.MetricNVLinkRecoveryErrors, 5},
	} {
		if r := get(h.id); r.Err != nil || r.Value != h.want {
			t.Errorf("health %s = %v, %v; want %v", catalog.Default().Name(h.id), r.Value, r.Err, h.want)
		}
	}
	if r := get(catalog.MetricMemoryUsed); r.Err != nil || r.Value != 1024 {
		t.Errorf("memory used %v, %v", r.Value, r.Err)
	}
	if r := get(catalog.MetricUtilGPU); r.Err != nil || r.Value != 97 {
		t.Errorf("utilization point read %v, %v", r.Value, r.Err)
	}
	// And the engine over it for a moment.
	eng, _ := runEngine(t, src, sampler.Config{}, 700*time.Millisecond)
	if d := eng.Stats().Devices[0]; d.Published == 0 || d.ReadErrors != 0 {
		t.Errorf("engine: published %d, read errors %d", d.Published, d.ReadErrors)
	}
	t.Logf("NVML %s (api %s, old symbols %v): ok", v.Raw, v.API, old)
}

// childModes checks the identity's persistence, ECC and MIG modes against
// FAKENVML_WANT_MODES, its CUDA and VBIOS versions against
// FAKENVML_WANT_VERSIONS, and that the reads are counted.
func childModes(t *testing.T, src *Source) {
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	before := devs[0].(sampler.CallCounter).CallStats().Calls
	id, err := devs[0].Identity()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.PersistenceMode+"/"+id.ECCMode+"/"+id.MIGMode, os.Getenv("FAKENVML_WANT_MODES"); got != want {
		t.Fatalf("modes %s, want %s", got, want)
	}
	if got, want := id.CUDAVersion+"/"+id.VBIOSVersion, os.Getenv("FAKENVML_WANT_VERSIONS"); got != want {
		t.Fatalf("CUDA/VBIOS versions %s, want %s", got, want)
	}
	if id.MIG || len(devs) != 1 {
		t.Fatalf("MIG mode alone made MIG instances: %d devices, %+v", len(devs), id)
	}
	// UUID, name, PCI, serial, VBIOS, memory, 4 thresholds, persistence,
	// ECC; MIG mode was read once already while enumerating or is read now.
	if calls := devs[0].(sampler.CallCounter).CallStats().Calls - before; calls < 12 {
		t.Fatalf("identity counted %d calls, want the mode reads counted too", calls)
	}
}

// childDropInReads reads the drop-in's extra metrics twice and checks the
// values against FAKENVML_WANT_READS ("name=value" or "name=ns", in order);
// the second read makes one C call per supported function and none for
// what the device said it does not support.
func childDropInReads(t *testing.T, src *Source) {
	devs, err := src.Devices()
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	ids := []catalog.MetricID{catalog.MetricFanSpeed, catalog.MetricDisplayMode, catalog.MetricDisplayActive,
		catalog.MetricEncoderSessions, catalog.MetricEncoderFPS, catalog.MetricEncoderLatency,
		catalog.MetricFBCSessions, catalog.MetricFBCFPS, catalog.MetricFBCLatency, catalog.MetricRetiredPagesPending,
		catalog.MetricUtilEncoder, catalog.MetricUtilDecoder, catalog.MetricUtilJPEG, catalog.MetricUtilOFA}
	out := make([]sampler.Reading, len(ids))
	render := func() string {
		var parts []string
		for i, id := range ids {
			v := strconv.FormatFloat(out[i].Value, 'f', -1, 64)
			switch {
			case errors.Is(out[i].Err, sampler.ErrNotSupported):
				v = "ns"
			case out[i].Err != nil:
				t.Fatalf("%s: %v", catalog.Default().Name(id), out[i].Err)
			}
			parts = append(parts, catalog.Default().Name(id)+"="+v)
		}
		return strings.Join(parts, " ")
	}
	if err := d.Read(ids, out); err != nil {
		t.Fatal(err)
	}
	want := os.Getenv("FAKENVML_WANT_READS")
	if got := render(); got != want {
		t.Fatalf("reads\n got %s\nwant %s", got, want)
	}
	// Functions that answered: encoder and FBC stats once each for their
	// three metrics, the others once per metric.
	calls := 0
	for _, p := range []string{"fan_speed=", "display_enabled=", "display_in_use=", "page_retirement_pending=",
		"utilization_encoder=", "utilization_decoder=", "utilization_jpeg=", "utilization_ofa="} {
		if strings.Contains(want, p) && !strings.Contains(want, p+"ns") {
			calls++
		}
	}
	for _, p := range []string{"encoder_sessions=", "fbc_sessions="} {
		if !strings.Contains(want, p+"ns") {
			calls++
		}
	}
	before := d.(sampler.CallCounter).CallStats().Calls
	if err := d.Read(ids, out); err != nil {
		t.Fatal(err)
	}
	if got := render(); got != want {
		t.Fatalf("second read\n got %s\nwant %s", got, want)
	}
	if n := d.(sampler.CallCounter).CallStats().Calls - before; n != uint64(calls) {
		t.Fatalf("second read made %d C calls, want %d (one per supported function)", n, calls)
	}
}

// childFallback runs the engine on a device without sample buffers.
func childFallback(t *testing.T, src *Source) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	eng, col := runEngine(t, src, sampler.Config{Logger: log}, 1200*time.Millisecond)
	// The fake's point getters: GetPowerUsage 300000 mW,
	// GetUtilizationRates 97/55 %, GetClockInfo SM 1980 and memory 2619 MHz.
	want := map[catalog.MetricID]float64{
		catalog.MetricPowerDraw: 300, catalog.MetricUtilGPU: 97, catalog.MetricUtilMemory: 55,
		catalog.MetricClockSM: 1980, catalog.MetricClockMemory: 2619,
	}
	got := map[catalog.MetricID]int{}
	for _, s := range col.samples {
		m, _ := catalog.Default().Get(s.Metric)
		if m.Src.Kind != catalog.FromBuffer {
			continue
		}
		v, ok := want[s.Metric]
		if !ok {
			t.Errorf("%s published without a buffer or a point read: %+v", m.Name, s)
			continue
		}
		wantS := record.Sample{TimeNS: s.TimeNS, Value: v, Device: 0, Metric: s.Metric, Flags: record.FlagPointRead}
		if s != wantS {
			t.Errorf("%s: %+v, want %+v", m.Name, s, wantS)
		}
		got[s.Metric]++
	}
	for id := range want {
		// A first read at the fallback, then one per 200 ms field tick.
		if got[id] < 2 {
			t.Errorf("%s: %d point reads in 1.2 s, want one per field tick", catalog.Default().Name(id), got[id])
		}
	}
	if d := eng.Stats().Devices[0]; d.PointFallbacks != uint64(len(want)) {
		t.Errorf("stats: %d point fallbacks, want %d", d.PointFallbacks, len(want))
	}
	text := logs.String()
	for id := range want {
		line := "metric=" + catalog.Default().Name(id) + " "
		if n := strings.Count(text, "its metric comes from point reads"); n != len(want) || !strings.Contains(text, line) {
			t.Errorf("%d fallback log lines (want %d), %s named: %v\n%s", n, len(want), line, strings.Contains(text, line), text)
		}
	}
	if !strings.Contains(text, "level=INFO msg=\"sample buffer not supported, and no point read for its metric: not sampled\"") {
		t.Errorf("no log line for the buffers without a point read:\n%s", text)
	}
	t.Logf("point reads: %v", got)
}

// syncBuffer is a bytes.Buffer safe for concurrent writers (device loops).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func childShortBuffer(t *testing.T, src *Source, clk *clocktest.Clock) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// One device loop and the watchdog park on the clock.
	eng, col := runEngineStepped(t, src, sampler.Config{Logger: log}, clk, 2, 2*time.Second)
	d := eng.Stats().Devices[0]
	if d.SuspectedLosses != 0 || d.LostEstimate != 0 {
		t.Errorf("%d suspected losses, %d samples lost in the first 2 s", d.SuspectedLosses, d.LostEstimate)
	}
	if d.MinDrainInterval != sampler.MinDrainInterval {
		t.Errorf("drain interval %v, want %v (half the 36 ms span, clamped)", d.MinDrainInterval, sampler.MinDrainInterval)
	}
	byType := map[catalog.BufferType][]uint64{}
	for _, s := range col.samples {
		m, _ := catalog.Default().Get(s.Metric)
		if m.Src.Kind != catalog.FromBuffer || s.Flags&record.FlagPointRead != 0 {
			continue
		}
		byType[m.Src.Buffer] = append(byType[m.Src.Buffer], uint64(s.TimeNS/1000))
	}
	for _, typ := range []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferGPUUtil, catalog.BufferSMClock, catalog.BufferOFAUtil} {
		ts := byType[typ]
		checkContinuous(t, typ.String(), ts, 1000)
		// From the buffer's history at start to the end of the 2 s.
		if len(ts) < 2000 {
			t.Errorf("%s: %d samples, want the 36 of history and 2000 more", typ, len(ts))
		}
	}
	if !strings.Contains(logs.String(), "drain interval set from the buffer's span") {
		t.Errorf("no log line for the drain schedule:\n%s", logs.String())
	}
}

// childRestart runs the engine four times on the fake driver, one after
// the other, as restarts of the program would: runs 1-3 keep their drain
// cursors in one state directory, run 4 keeps none (as before cursors were
// kept). Run 2 starts 200 ms after run 1 ended (within the buffers' 500 ms
// span): it delivers exactly what run 1 did not. Run 3 starts 2 s after run
// 2: the samples the driver no longer holds are missing, and exactly those
// are counted as lost. Run 4 re-delivers the buffers' history.
func childRestart(t *testing.T, src *Source, clk *clocktest.Clock, lib string) {
	dir := t.TempDir()
	var last *sampler.CursorFile
	store := func() sampler.CursorStore {
		if last != nil {
			last.Close() // the last run's process is gone: the state dir is free
		}
		f, ignored, err := sampler.OpenCursorFile(dir)
		if err != nil || ignored {
			t.Fatalf("open cursors: %v (ignored %v)", err, ignored)
		}
		last = f
		return f
	}
	reopen := func() sampler.Source {
		s, err := Open(Options{LibraryPath: lib, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Two device loops, the watchdog, and the cursor saver park on the clock.
	e1, c1 := runEngineStepped(t, src, sampler.Config{Cursors: store()}, clk, 4, time.Second)
	clk.Advance(200 * time.Millisecond)
	e2, c2 := runEngineStepped(t, reopen(), sampler.Config{Cursors: store()}, clk, 4, time.Second)
	clk.Advance(2 * time.Second)
	start3 := clk.Now()
	e3, c3 := runEngineStepped(t, reopen(), sampler.Config{Cursors: store()}, clk, 4, time.Second)
	clk.Advance(200 * time.Millisecond)
	_, c4 := runEngineStepped(t, reopen(), sampler.Config{}, clk, 3, time.Second)

	var dups4 int
	for dev := range 2 {
		b1, b2, b3, b4 := bufferTimes(c1, dev), bufferTimes(c2, dev), bufferTimes(c3, dev), bufferTimes(c4, dev)
		if len(b1) < 4 {
			t.Fatalf("gpu%d: %d buffer types sampled", dev, len(b1))
		}
		var missing uint64
		for typ, ts1 := range b1 {
			ts2, ts3 := b2[typ], b3[typ]
			checkContinuous(t, fmt.Sprintf("gpu%d %s runs 1+2", dev, typ), append(slices.Clone(ts1), ts2...), fakePeriodUS)
			checkContinuous(t, fmt.Sprintf("gpu%d %s run 3", dev, typ), ts3, fakePeriodUS)
			if len(ts2) == 0 || len(ts3) == 0 {
				t.Fatalf("gpu%d %s: runs 2 and 3 delivered %d and %d samples", dev, typ, len(ts2), len(ts3))
			}
			last2, first3 := ts2[len(ts2)-1], ts3[0]
			if want := uint64(start3.UnixMicro())/fakePeriodUS*fakePeriodUS - 99*fakePeriodUS; first3 != want {
				t.Errorf("gpu%d %s: run 3 starts at %d, want %d: the oldest sample the driver still holds", dev, typ, first3, want)
			}
			missing += (first3-last2)/fakePeriodUS - 1
			for _, us := range b4[typ] {
				if us <= ts3[len(ts3)-1] {
					dups4++
				}
			}
		}
		st2, st3 := e2.Stats().Devices[dev], e3.Stats().Devices[dev]
		if st2.LostEstimate != 0 || st2.SuspectedLosses != 0 {
			t.Errorf("gpu%d run 2: lost estimate %d (%d suspected losses) after a restart within the span", dev, st2.LostEstimate, st2.SuspectedLosses)
		}
		if st3.LostEstimate != missing {
			t.Errorf("gpu%d run 3: lost estimate %d, want the %d samples the driver no longer held", dev, st3.LostEstimate, missing)
		}
		// The history a first drain returns follows the slow state that
		// outputs make tags of (pstate).
		for run, c := range []*collector{c1, c2, c3} {
			c.mu.Lock()
			firstP := slices.IndexFunc(c.samples, func(s record.Sample) bool { return int(s.Device) == dev && s.Metric == catalog.MetricPState })
			firstB := slices.IndexFunc(c.samples, func(s record.Sample) bool {
				m, _ := catalog.Default().Get(s.Metric)
				return int(s.Device) == dev && m.Src.Kind == catalog.FromBuffer
			})
			c.mu.Unlock()
			if firstP < 0 || firstP > firstB {
				t.Errorf("run %d gpu%d: first pstate sample at %d, first buffer sample at %d: history published untagged", run+1, dev, firstP, firstB)
			}
		}
		t.Logf("gpu%d: run 2 lost 0, run 3 lost %d (counted %d)", dev, missing, st3.LostEstimate)
	}
	if dups4 == 0 {
		t.Errorf("run 4 without cursors delivered no history again")
	}
	_ = e1
	t.Logf("duplicates: 0 across runs 1-3 with cursors; %d in run 4 without them", dups4)
}
