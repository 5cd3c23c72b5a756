package accounting_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accounting"
	"github.com/gpusampler/gpusampler/internal/attribution"
	"github.com/gpusampler/gpusampler/internal/attribution/attributiontest"
	"github.com/gpusampler/gpusampler/internal/attribution/podresources"
	"github.com/gpusampler/gpusampler/internal/clocktest"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

var start = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// utilPeriod is the simulated utilization buffer's period: busy and idle
// seconds must match the script within it.
const utilPeriod = time.Second / 6

func pod(name string, ids ...string) *podresources.PodResources {
	return &podresources.PodResources{Name: name, Namespace: "ml", Containers: []*podresources.ContainerResources{{
		Name: "main", Devices: []*podresources.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: ids}}}}}
}

// harness runs the engine over a scripted simulator on a manual clock,
// with an accountant whose records it keeps, and the energy-counter
// readings of each device.
type harness struct {
	t     *testing.T
	clk   *clocktest.Clock
	src   *sim.Source
	eng   *sampler.Engine
	acct  *accounting.Accountant
	armed int

	mu      sync.Mutex
	records []record.Event
	counter map[int][]float64 // energy-counter readings (mJ) by device

	cancel context.CancelFunc
	done   chan error
}

// counterRecorder keeps every energy-counter reading.
type counterRecorder struct{ h *harness }

func (c counterRecorder) Observe(dev *record.Device, samples []record.Sample) {
	c.h.mu.Lock()
	defer c.h.mu.Unlock()
	for _, s := range samples {
		if s.Metric == catalog.MetricEnergy {
			c.h.counter[dev.Index] = append(c.h.counter[dev.Index], s.Value)
		}
	}
}

func newHarness(t *testing.T, script map[int][]sim.Phase) *harness {
	t.Helper()
	h := &harness{t: t, clk: clocktest.New(start), counter: map[int][]float64{}, armed: len(script)}
	src, err := sim.New(sim.Options{GPUs: len(script), Seed: 7, Now: h.clk.Now, Script: script})
	if err != nil {
		t.Fatal(err)
	}
	h.src = src
	h.acct = accounting.New(accounting.Options{Start: start.UnixNano(), Emit: func(ev record.Event) {
		h.mu.Lock()
		h.records = append(h.records, ev.Clone())
		h.mu.Unlock()
		h.eng.Emit(ev)
	}})
	keep := map[catalog.MetricID]bool{catalog.MetricPowerDraw: true, catalog.MetricUtilGPU: true,
		catalog.MetricEnergy: true, catalog.MetricMemoryUsed: true}
	h.eng, err = sampler.New(src, sampler.Config{Clock: h.clk, CallTimeout: -1, LostRetryInterval: time.Second,
		Select:   func(m *catalog.Metric) bool { return keep[m.ID] },
		Observer: sampler.Observers(h.acct, counterRecorder{h}), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- h.eng.Run(ctx) }()
	h.clk.BlockUntil(h.armed)
	t.Cleanup(h.stop)
	return h
}

// until steps the clock to start+d, firing every timer due on the way, and
// returns with the device loops parked.
func (h *harness) until(d time.Duration) {
	target := start.Add(d)
	for {
		h.clk.BlockUntil(h.armed)
		next, ok := h.clk.Next()
		if !ok || next.After(target) {
			break
		}
		h.clk.AdvanceTo(next)
	}
	if h.clk.Now().Before(target) {
		h.clk.AdvanceTo(target)
	}
	h.clk.BlockUntil(h.armed)
}

// stop ends the run (the accountant's Flush runs), once.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	// The final drains and the pumps' flush run on the manual clock too:
	// keep it moving until Run returns.
	for {
		select {
		case err := <-h.done:
			if err != nil {
				h.t.Errorf("Run: %v", err)
			}
			return
		case <-time.After(time.Millisecond):
			if next, ok := h.clk.Next(); ok {
				h.clk.AdvanceTo(next)
			}
		}
	}
}

func (h *harness) refresh(r *attribution.Resolver) {
	r.Refresh(context.Background(), h.acct.Target(h.eng, func() time.Time { return h.clk.Now() }))
}

// last returns the newest record of kind on dev whose owner attr is owner,
// and how many there were.
func (h *harness) last(kind record.EventKind, dev int, owner string) (record.Event, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ev record.Event
	n := 0
	for _, e := range h.records {
		if e.Kind == kind && e.Device == dev && attr(e, record.AttrOwner) == owner {
			ev, n = e, n+1
		}
	}
	return ev, n
}

// owners returns the owners with records on dev.
func (h *harness) owners(dev int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	seen := map[string]bool{}
	for _, e := range h.records {
		if o := attr(e, record.AttrOwner); e.Device == dev && !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out
}

// counterDeltaJ is the device's energy-counter delta over the run, in J.
func (h *harness) counterDeltaJ(dev int) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.counter[dev]
	if len(c) < 2 {
		h.t.Fatalf("gpu %d: %d energy-counter readings", dev, len(c))
	}
	return (c[len(c)-1] - c[0]) / 1000
}

func attr(e record.Event, key string) string {
	for _, a := range e.Attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return ""
}

func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.3f, want %.3f ± %.3f", what, got, want, tol)
	}
}

// checkConservation: the owners' energy on dev sums to the energy
// counter's delta within 1 %, and their shares of the counter to the delta.
func (h *harness) checkConservation(dev int) {
	h.t.Helper()
	sum, sumCounter := 0.0, 0.0
	for _, o := range h.owners(dev) {
		ev, _ := h.last(record.EventJob, dev, o)
		tot := accounting.TotalsOf(ev.Fields)
		sum += tot.EnergyJ
		sumCounter += tot.EnergyCounterJ
	}
	delta := h.counterDeltaJ(dev)
	h.t.Logf("gpu %d: owners' energy_j %.1f J, energy_counter_j %.1f J, counter delta %.1f J (%+.3f%%)", dev, sum, sumCounter, delta, 100*(sum-delta)/delta)
	within(h.t, fmt.Sprintf("gpu %d: energy of every owner", dev), sum, delta, 0.01*delta)
	within(h.t, fmt.Sprintf("gpu %d: counter shares of every owner", dev), sumCounter, delta, 1e-6*delta)
}

// checkJobEnd: the job-end record of owner on dev carries the same totals
// as the owner's last job record (the counters' last values), once.
func (h *harness) checkJobEnd(dev int, owner string) accounting.Totals {
	h.t.Helper()
	end, n := h.last(record.EventJobEnd, dev, owner)
	if n != 1 {
		h.t.Fatalf("gpu %d %s: %d job-end records, want 1 (owners %v)", dev, owner, n, h.owners(dev))
	}
	job, _ := h.last(record.EventJob, dev, owner)
	if got, want := accounting.TotalsOf(end.Fields), accounting.TotalsOf(job.Fields); got != want {
		h.t.Errorf("gpu %d %s: job end %+v, last counters %+v", dev, owner, got, want)
	}
	h.t.Logf("gpu %d %s job end: %+v exactness %.3f", dev, owner, accounting.TotalsOf(end.Fields), accounting.TotalsOf(end.Fields).Exactness())
	return accounting.TotalsOf(end.Fields)
}

// turns is GPU 0's script: job X busy 0–10 s, job Y busy 10–15 s and idle
// (allocated, no kernel) 15–20 s, nobody after.
var turns = []sim.Phase{
	{Until: 10 * time.Second, Util: 100, Procs: []sim.ScriptProcess{{PID: 101, SMUtil: 100, MemoryMiB: 20000}}},
	{Until: 15 * time.Second, Util: 100, Procs: []sim.ScriptProcess{{PID: 202, SMUtil: 100, MemoryMiB: 30000}}},
	{Until: 20 * time.Second, Util: 0, Procs: []sim.ScriptProcess{{PID: 202, MemoryMiB: 30000}}},
	{Until: 30 * time.Second, Util: 0},
}

// shared is GPU 1's script: two pods time-slice it, 3:1 by SM utilization
// for 10 s; then the second idles while the first goes on.
var shared = []sim.Phase{
	{Until: 10 * time.Second, Util: 80, Procs: []sim.ScriptProcess{{PID: 301, SMUtil: 60, MemoryMiB: 10000}, {PID: 302, SMUtil: 20, MemoryMiB: 5000}}},
	{Until: 30 * time.Second, Util: 60, Procs: []sim.ScriptProcess{{PID: 301, SMUtil: 60, MemoryMiB: 12000}, {PID: 302, MemoryMiB: 5000}}},
}

// checkTurns checks GPU 0's two jobs against the script.
func (h *harness) checkTurns(x, y string) {
	h.t.Helper()
	slack := utilPeriod.Seconds()
	tx := h.checkJobEnd(0, x)
	within(h.t, x+" busy_s", tx.BusyS, 10, slack)
	within(h.t, x+" idle_allocated_s", tx.IdleAllocatedS, 0, slack)
	within(h.t, x+" allocated_s", tx.AllocatedS, 10, slack)
	within(h.t, x+" memory_peak_mib", tx.MemoryPeakMiB, 20000, 0)
	within(h.t, x+" exactness", tx.Exactness(), 1, 0)
	ty := h.checkJobEnd(0, y)
	within(h.t, y+" busy_s", ty.BusyS, 5, slack)
	within(h.t, y+" idle_allocated_s", ty.IdleAllocatedS, 5, slack)
	within(h.t, y+" allocated_s", ty.AllocatedS, 10, slack)
	within(h.t, y+" memory_peak_mib", ty.MemoryPeakMiB, 30000, 0)
	// Busy at ~625 W, then idle at ~74 W.
	if tx.EnergyJ < 5500 || ty.EnergyJ > tx.EnergyJ*0.65 || ty.EnergyJ < tx.EnergyJ*0.5 {
		h.t.Errorf("energy %s %.0f J, %s %.0f J: not what the script draws", x, tx.EnergyJ, y, ty.EnergyJ)
	}
	within(h.t, x+" energy_counter_j", tx.EnergyCounterJ, tx.EnergyJ, 0.01*tx.EnergyJ)
	within(h.t, y+" energy_counter_j", ty.EnergyCounterJ, ty.EnergyJ, 0.01*ty.EnergyJ)
	h.checkConservation(0)
}

// Two pods take turns on GPU 0 (the kubelet allocates it to one, then the
// other); GPU 1 is time-sliced between two pods, which the kubelet hands
// both out (no device labels): each process has its own pod from its
// cgroup and the kubelet's container log links.
func TestKubernetesTurnsAndTimeSlicing(t *testing.T) {
	procRoot := t.TempDir()
	for pid, c := range map[uint32]byte{101: 'a', 202: 'b', 301: 'c', 302: 'd'} {
		attributiontest.WriteCgroup(t, procRoot, pid, attributiontest.SystemdContainerd(attributiontest.PodUIDA, attributiontest.ContainerID(c)))
	}
	logs := attributiontest.LogLinks(t,
		"train-x_ml_main-"+attributiontest.ContainerID('a')+".log", "train-y_ml_main-"+attributiontest.ContainerID('b')+".log",
		"serve-c_ml_main-"+attributiontest.ContainerID('c')+".log", "serve-d_ml_main-"+attributiontest.ContainerID('d')+".log")
	k := &attributiontest.Kubelet{}
	k.Set(pod("train-x", "0"), pod("serve-c", "1::0"), pod("serve-d", "1::1"))
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	attributiontest.ServeUnix(t, socket, func(s *grpc.Server) { podresources.Register(s, k) })
	r, err := attribution.New(attribution.Config{PodResourcesSocket: socket, ContainerLogDir: logs, ProcRoot: procRoot,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	h := newHarness(t, map[int][]sim.Phase{0: turns, 1: shared})
	h.refresh(r) // at 0: GPU 0 is train-x's; GPU 1's processes are polled
	h.until(time.Second / 2)
	h.refresh(r) // GPU 1's processes get their pods
	h.until(10 * time.Second)
	k.Set(pod("train-y", "0"), pod("serve-c", "1::0"), pod("serve-d", "1::1"))
	h.refresh(r)
	h.until(20 * time.Second)
	k.Set(pod("serve-c", "1::0"), pod("serve-d", "1::1"))
	h.refresh(r)
	h.until(25 * time.Second)
	h.stop()

	h.checkTurns("ml/train-x/main", "ml/train-y/main")

	// GPU 1: serve-c and serve-d from their first attributed poll on.
	c, _ := h.last(record.EventJob, 1, "ml/serve-c/main")
	d, _ := h.last(record.EventJob, 1, "ml/serve-d/main")
	tc, td := accounting.TotalsOf(c.Fields), accounting.TotalsOf(d.Fields)
	from := time.Duration(h.startNS(1, "ml/serve-c/main") - start.UnixNano())
	held := (25*time.Second - from).Seconds()
	slack := time.Second.Seconds() // the per-process shares come from the 1 s process poll
	within(t, "serve-c busy_s", tc.BusyS, held, slack)
	within(t, "serve-c idle_allocated_s", tc.IdleAllocatedS, 0, slack)
	within(t, "serve-d busy_s", td.BusyS, (10*time.Second - from).Seconds(), slack)
	within(t, "serve-d idle_allocated_s", td.IdleAllocatedS, 15, slack)
	within(t, "serve-c allocated_s", tc.AllocatedS, held, slack)
	within(t, "serve-d allocated_s", td.AllocatedS, held, slack)
	within(t, "serve-c memory_peak_mib", tc.MemoryPeakMiB, 12000, 0)
	within(t, "serve-d memory_peak_mib", td.MemoryPeakMiB, 5000, 0)
	// While both run, c gets 3/4 of the energy; then d only the even part
	// of nothing: c's SM utilization is all there is.
	if tc.EnergyJ < 3*td.EnergyJ {
		t.Errorf("serve-c %.0f J, serve-d %.0f J: want c at least 3× d", tc.EnergyJ, td.EnergyJ)
	}
	h.checkConservation(1)
}

// startNS returns when owner's account on dev started.
func (h *harness) startNS(dev int, owner string) int64 {
	ev, n := h.last(record.EventJob, dev, owner)
	if n == 0 {
		h.t.Fatalf("gpu %d: no record of %s (owners %v)", dev, owner, h.owners(dev))
	}
	ts, err := time.Parse(time.RFC3339Nano, attr(ev, record.AttrJobStarted))
	if err != nil {
		h.t.Fatal(err)
	}
	return ts.UnixNano()
}

// A Slurm job from the job-mapping directory, then another: the same
// figures as two pods.
func TestSlurmMappingDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(job string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "0"), []byte(job), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("4711\n")
	r, err := attribution.New(attribution.Config{HPCJobMappingDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, map[int][]sim.Phase{0: turns})
	h.refresh(r)
	h.until(10 * time.Second)
	write("4712\n")
	h.refresh(r)
	h.until(20 * time.Second)
	write("")
	h.refresh(r)
	h.until(25 * time.Second)
	h.stop()
	h.checkTurns("slurm:4711", "slurm:4712")
}

// The same jobs found from their processes' Slurm cgroups.
func TestSlurmCgroups(t *testing.T) {
	procRoot := t.TempDir()
	attributiontest.WriteCgroup(t, procRoot, 101, "0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n")
	attributiontest.WriteCgroup(t, procRoot, 202, "0::/system.slice/slurmstepd.scope/job_4712/step_0/user/task_0\n")
	r, err := attribution.New(attribution.Config{SlurmCgroups: true, ProcRoot: procRoot, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, map[int][]sim.Phase{0: turns})
	h.refresh(r) // the first poll's process is job 4711's
	h.until(10 * time.Second)
	h.refresh(r) // the poll at 10 s found job 4712's process
	h.until(20 * time.Second)
	h.refresh(r) // no process: no job
	h.until(25 * time.Second)
	h.stop()
	h.checkTurns("slurm:4711", "slurm:4712")
}

// GPU 0 is lost for 10 s in the middle of a job: the account says so in
// its lost seconds and exactness, and its counter share still covers the
// energy the gap drew.
func TestLostGPUShowsInExactness(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "0"), []byte("99"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := attribution.New(attribution.Config{HPCJobMappingDir: dir, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	busy := []sim.Phase{{Until: time.Hour, Util: 100, Procs: []sim.ScriptProcess{{PID: 5, SMUtil: 100, MemoryMiB: 1000}}}}
	h := newHarness(t, map[int][]sim.Phase{0: busy})
	h.refresh(r)
	h.until(5 * time.Second)
	devs, _ := h.src.Devices()
	gpu := devs[0].(*sim.Device)
	gpu.SetLost(true)
	h.until(15 * time.Second)
	gpu.SetLost(false)
	h.until(25 * time.Second)
	h.stop()
	ev, _ := h.last(record.EventJob, 0, "slurm:99")
	tot := accounting.TotalsOf(ev.Fields)
	// The simulated driver keeps 6 s of power samples (120 × 50 ms): of
	// 10 s lost, 4 s are gone, and up to a probe interval (1 s) more until
	// the engine finds the GPU back.
	if tot.LostS < 4-0.1 || tot.LostS > 5+0.1 {
		t.Errorf("lost_s %.2f, want 4 to 5", tot.LostS)
	}
	within(t, "exactness", tot.Exactness(), 1-tot.LostS/tot.AllocatedS, 1e-9)
	within(t, "allocated_s", tot.AllocatedS, 25, 0.1)
	delta := h.counterDeltaJ(0)
	within(t, "energy_counter_j", tot.EnergyCounterJ, delta, 1e-6*delta)
	// energy_j misses the lost seconds' energy, and says so: what it lacks
	// against the counter is what the lost seconds drew at the job's power.
	meanW := tot.EnergyJ / (tot.AllocatedS - tot.LostS)
	within(t, "energy_diff_j", tot.EnergyCounterJ-tot.EnergyJ, tot.LostS*meanW, 0.02*tot.EnergyCounterJ)
}
