// Package diagnose turns windows of samples into findings with evidence —
// the field guide's diagnoses, made live: temperature over the device's own
// slowdown threshold, clocks throttled (with the reason), memory nearly
// full, high utilization with low power (launch-bound: small kernels),
// periodic utilization dips (input-pipeline stalls, with the period),
// communication-bound multi-GPU work (NVLink or PCIe busy while the SMs
// idle), XID errors, and, where it is given the CPUs (WithPlacement), a
// process on a GPU that may run only on CPUs far from it (NUMA placement).
//
// A Detector implements sampler.Observer: set it as sampler.Config.Observer
// and the engine feeds it every published sample; it reports each finding
// as a record.Event of kind record.EventFinding, once when it opens
// (EndNS 0, attr state=open) and once when it closes (attr state=closed,
// StartNS..EndNS the span). `gpusampler bench` can feed it recorded
// samples the same way.
//
// Thresholds come from the device (Device.SlowdownTempC,
// Device.MemoryMaxTempC, Device.MemoryTotalMiB, the power_limit metric) and
// the catalog's generic field-guide constants only as a fallback; the
// launch-bound and dip rules are stated with the reasoning behind them
// below. Time is the samples' own timestamps: the detector has no clock.
//
// Concurrency: Observe may be called concurrently for different devices
// (the engine calls it from each device's loop); calls for one device are
// serialized by the caller. Flush may be called from any goroutine.
package diagnose

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Finding names (attr "finding" of an EventFinding).
const (
	FindingTemperature  = "temperature_high"
	FindingThrottle     = "clocks_throttled"
	FindingMemoryFull   = "memory_nearly_full"
	FindingLaunchBound  = "launch_bound"
	FindingPeriodicDips = "periodic_utilization_dips"
	FindingXID          = "xid"
	FindingCommBound    = "communication_bound"
	FindingNUMA         = "numa_placement"
)

// Rules, with their reasons.
const (
	// LaunchBoundUtilPct and LaunchBoundPowerFrac: a GPU that is busy
	// (≥ 80% of the time a kernel runs) on real work draws most of its power
	// limit; drawing under 40% of it while that busy means the SMs mostly
	// wait between small kernels (the field guide's "high Util, low Pwr").
	LaunchBoundUtilPct   = 80
	LaunchBoundPowerFrac = 0.40
	// launchWindowNS is the window the launch-bound means are taken over.
	launchWindowNS = 10e9
	// DipLowPct and DipHighPct: a dip is utilization falling below 30%
	// after having been at or above 80% (a busy GPU starving).
	DipLowPct  = 30
	DipHighPct = 80
	// dipMinCount dips with intervals whose coefficient of variation is at
	// most dipMaxCV make the dips periodic (an input pipeline's rhythm, not
	// chance).
	dipMinCount = 4
	dipMaxCV    = 0.25
	// quietNS: a condition that has not held for this long closes its
	// finding.
	quietNS = 5e9

	// CommNVLinkBytesPerS: NVLink traffic (both directions, all links) at
	// which a GPU is busy communicating: more than a quarter of an
	// H100/H200's 900 GB/s, several times what data-parallel training moves
	// while its compute keeps the SMs busy.
	CommNVLinkBytesPerS = 250e9
	// CommPCIeFrac and CommPCIeBytesPerS: PCIe traffic (both directions) at
	// half the link's capacity (from its current generation and width), or
	// 16 GB/s when the link is unknown (half of a Gen4 x16 link, one
	// direction's worth).
	CommPCIeFrac      = 0.5
	CommPCIeBytesPerS = 16e9
	// CommSMActivePct and CommUtilPct: with the links that busy, SMs active
	// under 40% of the time (GPM), or the engine busy under 60% of the time
	// when the GPU has no GPM, mean the GPU mostly waits for its peers'
	// data.
	CommSMActivePct = 40
	CommUtilPct     = 60
	// commMinSpanNS: link rates over at least this span make a verdict, not
	// one burst (counters need two readings; GPM reads come once a second).
	commMinSpanNS = 1e9
)

// pcieLaneBytesPerS is one PCIe lane's usable bandwidth per direction, by
// generation (after encoding overhead).
var pcieLaneBytesPerS = map[int]float64{1: 250e6, 2: 500e6, 3: 985e6, 4: 1969e6, 5: 3938e6, 6: 7563e6}

// Detector finds problems in per-device sample streams. Create it with
// New.
type Detector struct {
	emit func(record.Event)
	mu   sync.Mutex
	devs map[int]*devState
	// gpuCPUs and processCPUs, when set (WithPlacement), give a device's
	// close CPUs and the CPUs a process may run on.
	gpuCPUs     func(dev int) ([]int, error)
	processCPUs func(pid int) ([]int, error)
}

// Option configures a Detector.
type Option func(*Detector)

// WithPlacement turns on the NUMA-placement finding for the processes seen
// on each GPU (ObserveProcesses): gpuCPUs returns a device's close CPUs
// (sampler.Engine.CPUAffinity), processCPUs the CPUs a process may run on
// (ProcessCPUs). Both are called from ObserveProcesses' goroutine.
func WithPlacement(gpuCPUs func(dev int) ([]int, error), processCPUs func(pid int) ([]int, error)) Option {
	return func(d *Detector) { d.gpuCPUs, d.processCPUs = gpuCPUs, processCPUs }
}

// New returns a detector that reports findings through emit (typically
// Engine.Emit). emit is called from the goroutine that calls Observe,
// ObserveProcesses or Flush.
func New(emit func(record.Event), opts ...Option) *Detector {
	d := &Detector{emit: emit, devs: map[int]*devState{}}
	for _, o := range opts {
		o(d)
	}
	return d
}

// finding is one open or quiet condition on one device.
type finding struct {
	name     string
	open     bool
	startNS  int64
	lastNS   int64 // last time the condition held
	peak     float64
	attrs    []record.Attr
	evidence string
}

type devState struct {
	mu       sync.Mutex
	findings map[string]*finding
	// latest values
	powerLimitW   float64
	memTotalMiB   float64
	memUsedMiB    float64
	lastXID       float64
	xidSeen       bool
	utilWin       []tv // utilization samples in the launch window
	powerWin      []tv
	high          bool    // utilization was ≥ DipHighPct since the last dip
	dips          []int64 // start times of recent dips
	lastUtilNS    int64
	lastReasons   uint64
	lastReasonsNS int64
	smWin         []tv // GPM SM activity in the launch window
	links         map[catalog.MetricID]*linkSeries
	pcieGen       int
	pcieWidth     int
	// near is the device's close CPUs (nil: not read yet, or unknown
	// after nearRead).
	near     []int
	nearRead bool
}

// linkSeries is one link metric's recent rates (bytes/s): a GPM rate as
// read, a byte counter as the difference of successive readings.
type linkSeries struct {
	prevT int64
	prevV float64
	have  bool
	win   []tv
}

type tv struct {
	t int64
	v float64
}

func (d *Detector) state(idx int) *devState {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.devs[idx]
	if s == nil {
		s = &devState{findings: map[string]*finding{}, links: map[catalog.MetricID]*linkSeries{}}
		d.devs[idx] = s
	}
	return s
}

// Observe feeds samples of one device (see sampler.Observer). Samples are
// not retained.
func (d *Detector) Observe(dev *record.Device, samples []record.Sample) {
	s := d.state(dev.Index)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range samples {
		d.observe(dev, s, &samples[i])
	}
}

func (d *Detector) observe(dev *record.Device, s *devState, x *record.Sample) {
	t, v := x.TimeNS, x.Value
	switch x.Metric {
	case catalog.MetricTempGPU:
		th, src := dev.SlowdownTempC, "device_slowdown"
		if th <= 0 {
			th, src = catalog.GenericGPUTempWarnC, "field_guide"
		}
		d.cond(dev, s, FindingTemperature+"/gpu", v >= th, t, v, func() []record.Attr {
			return []record.Attr{{Key: "sensor", Value: "gpu"}, {Key: "threshold_c", Value: ftoa(th)}, {Key: "threshold_source", Value: src}}
		}, "GPU temperature at or above its slowdown threshold")
	case catalog.MetricTempMemory:
		th, src := dev.MemoryMaxTempC, "device_memory_max"
		if th <= 0 {
			th, src = catalog.GenericMemoryTempWarnC, "field_guide"
		}
		d.cond(dev, s, FindingTemperature+"/memory", v >= th, t, v, func() []record.Attr {
			return []record.Attr{{Key: "sensor", Value: "memory"}, {Key: "threshold_c", Value: ftoa(th)}, {Key: "threshold_source", Value: src}}
		}, "HBM temperature at or above its maximum operating threshold")
	case catalog.MetricClocksEventReasons:
		mask := uint64(v) & catalog.ReasonThrottleAny
		d.cond(dev, s, FindingThrottle, mask != 0, t, float64(mask), func() []record.Attr {
			return []record.Attr{{Key: "reason", Value: catalog.ReasonString(mask)}}
		}, "clocks held down: "+catalog.ReasonString(mask))
	case catalog.MetricPowerLimit:
		s.powerLimitW = v
	case catalog.MetricMemoryTotal:
		s.memTotalMiB = v
	case catalog.MetricMemoryUsed:
		total := s.memTotalMiB
		if total <= 0 {
			total = float64(dev.MemoryTotalMiB)
		}
		if total > 0 {
			pct := 100 * v / total
			d.cond(dev, s, FindingMemoryFull, pct >= catalog.GenericMemoryNearFullPc, t, pct, func() []record.Attr {
				return []record.Attr{{Key: "threshold_pct", Value: ftoa(catalog.GenericMemoryNearFullPc)}, {Key: "total_mib", Value: ftoa(total)}}
			}, "framebuffer memory nearly full (allocation failures and fragmentation follow)")
		}
	case catalog.MetricPowerDraw:
		s.powerWin = window(append(s.powerWin, tv{t, v}), t)
		d.launchBound(dev, s, t)
	case catalog.MetricUtilGPU:
		if x.Flags&record.FlagPointRead != 0 {
			return // an idle GPU's point read: no rhythm in it
		}
		s.utilWin = window(append(s.utilWin, tv{t, v}), t)
		d.launchBound(dev, s, t)
		d.dipsFrom(dev, s, t, v)
	case catalog.MetricSMActive:
		s.smWin = window(append(s.smWin, tv{t, v}), t)
	case catalog.MetricPCIeLinkGen:
		s.pcieGen = int(v)
	case catalog.MetricPCIeLinkWidth:
		s.pcieWidth = int(v)
	case catalog.MetricNVLinkTxRate, catalog.MetricNVLinkRxRate, catalog.MetricPCIeTxRate, catalog.MetricPCIeRxRate:
		ls := s.link(x.Metric)
		ls.win = window(append(ls.win, tv{t, v}), t)
		d.commBound(dev, s, t)
	case catalog.MetricNVLinkTxBytes, catalog.MetricNVLinkRxBytes, catalog.MetricPCIeTxBytes, catalog.MetricPCIeRxBytes:
		ls := s.link(x.Metric)
		if ls.have && t > ls.prevT && v >= ls.prevV {
			ls.win = window(append(ls.win, tv{t, (v - ls.prevV) / (float64(t-ls.prevT) / 1e9)}), t)
		} else if ls.have && v < ls.prevV {
			ls.win = ls.win[:0] // the counter was reset
		}
		ls.prevT, ls.prevV, ls.have = t, v, true
		d.commBound(dev, s, t)
	case catalog.MetricXIDCount:
		if s.xidSeen && v > s.lastXID {
			d.emit(record.Event{Kind: record.EventFinding, Device: dev.Index, StartNS: t, EndNS: t,
				Message: fmt.Sprintf("%g new XID error(s); see the xid events", v-s.lastXID),
				Attrs:   []record.Attr{{Key: "finding", Value: FindingXID}, {Key: "state", Value: "closed"}, {Key: "count", Value: ftoa(v - s.lastXID)}}})
		}
		s.lastXID, s.xidSeen = v, true
	}
	d.closeQuiet(dev, s, t)
}

// ObserveProcesses sees the processes on one device at nowNS (see
// sampler.ProcessObserver): with WithPlacement, a process that may run only
// on CPUs outside the device's CPU affinity is a NUMA-placement finding,
// one per process, open while the process is seen so placed. Simulated
// devices are skipped: their processes are made up, and their PIDs may
// name unrelated processes of this machine.
func (d *Detector) ObserveProcesses(dev *record.Device, pids []uint32, nowNS int64) {
	if d.gpuCPUs == nil || d.processCPUs == nil || dev.Simulated {
		return
	}
	s := d.state(dev.Index)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.nearRead {
		s.near, _ = d.gpuCPUs(dev.Index)
		s.nearRead = true
	}
	for _, pid := range pids {
		if len(s.near) == 0 {
			break // the GPU's affinity is unknown: nothing to read
		}
		cpus, err := d.processCPUs(int(pid))
		if err != nil || !PlacedAway(cpus, s.near) {
			continue // gone, unreadable, or allowed on a close CPU
		}
		pc, gc := CPUList(cpus), CPUList(s.near)
		d.cond(dev, s, FindingNUMA+"/"+strconv.FormatUint(uint64(pid), 10), true, nowNS, 0, func() []record.Attr {
			return []record.Attr{{Key: "pid", Value: strconv.FormatUint(uint64(pid), 10)}, {Key: "process_cpus", Value: pc}, {Key: "gpu_cpus", Value: gc}}
		}, NUMAMessage(fmt.Sprintf("process %d runs", pid), cpus, dev.Index, s.near))
	}
	d.closeQuiet(dev, s, nowNS)
}

// PlacedAway reports whether a process allowed only on cpus can run on
// none of near, a GPU's close CPUs (ascending): the NUMA-placement
// condition. An unknown affinity on either side is never placed away.
func PlacedAway(cpus, near []int) bool {
	return len(cpus) > 0 && len(near) > 0 &&
		!slices.ContainsFunc(cpus, func(c int) bool { _, ok := slices.BinarySearch(near, c); return ok })
}

// NUMAMessage is the NUMA-placement finding's text and the field guide's
// advice; who says who ran on cpus ("process 42 runs", "the command ran").
func NUMAMessage(who string, cpus []int, gpu int, near []int) string {
	pc, gc := CPUList(cpus), CPUList(near)
	return fmt.Sprintf("%s on CPUs %s, none of them close to GPU %d (its CPUs: %s): every copy and kernel launch "+
		"crosses the socket interconnect. Bind it to the GPU's CPUs, as the field guide does: "+
		"CUDA_VISIBLE_DEVICES=%d numactl -C %s CMD (or taskset -c %s CMD)", who, pc, gpu, gc, gpu, gc, gc)
}

// CPUList writes CPU numbers (ascending) as ranges: "0-7,16-23".
func CPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// window drops entries older than launchWindowNS before t.
func window(w []tv, t int64) []tv {
	i := 0
	for i < len(w) && w[i].t < t-int64(launchWindowNS) {
		i++
	}
	if i > 0 {
		w = append(w[:0], w[i:]...)
	}
	return w
}

func mean(w []tv) float64 {
	if len(w) == 0 {
		return math.NaN()
	}
	var s float64
	for _, x := range w {
		s += x.v
	}
	return s / float64(len(w))
}

// launchBound: mean utilization ≥ LaunchBoundUtilPct with mean power ≤
// LaunchBoundPowerFrac × the power limit, over a full window.
func (d *Detector) launchBound(dev *record.Device, s *devState, t int64) {
	if s.powerLimitW <= 0 || len(s.utilWin) < 2 || len(s.powerWin) < 2 {
		return
	}
	if s.utilWin[len(s.utilWin)-1].t-s.utilWin[0].t < int64(launchWindowNS)*8/10 {
		return // not a full window yet
	}
	u, p := mean(s.utilWin), mean(s.powerWin)
	frac := p / s.powerLimitW
	d.cond(dev, s, FindingLaunchBound, u >= LaunchBoundUtilPct && frac <= LaunchBoundPowerFrac, t, frac, func() []record.Attr {
		return []record.Attr{{Key: "utilization_pct", Value: ftoa(math.Round(u))}, {Key: "power_w", Value: ftoa(math.Round(p))},
			{Key: "power_limit_w", Value: ftoa(s.powerLimitW)}, {Key: "power_fraction", Value: ftoa(math.Round(frac*100) / 100)}}
	}, "busy but drawing little power: the SMs mostly wait (small kernels, launch overhead); larger batches or fused kernels help")
}

func (s *devState) link(id catalog.MetricID) *linkSeries {
	ls := s.links[id]
	if ls == nil {
		ls = &linkSeries{}
		s.links[id] = ls
	}
	return ls
}

// linkRate is the mean traffic (bytes/s, both directions) of one link kind
// over the window: from the GPM rates when they cover commMinSpanNS, else
// from the byte counters (read more often) when they cover more; span is the
// time the rates cover and from the first of them.
func (s *devState) linkRate(gpmTx, gpmRx, ctrTx, ctrRx catalog.MetricID) (rate float64, span, from int64, src string) {
	for _, c := range []struct {
		tx, rx catalog.MetricID
		src    string
	}{{gpmTx, gpmRx, "gpm"}, {ctrTx, ctrRx, "counters"}} {
		tx, rx := s.links[c.tx], s.links[c.rx]
		if tx == nil || rx == nil || len(tx.win) == 0 || len(rx.win) == 0 {
			continue
		}
		sp := min(tx.win[len(tx.win)-1].t-tx.win[0].t, rx.win[len(rx.win)-1].t-rx.win[0].t)
		if src != "" && sp <= span {
			continue
		}
		rate, span, from, src = mean(tx.win)+mean(rx.win), sp, max(tx.win[0].t, rx.win[0].t), c.src
		if span >= int64(commMinSpanNS) {
			break
		}
	}
	return rate, span, from, src
}

// commBound: NVLink or PCIe busy (CommNVLinkBytesPerS, CommPCIeFrac of
// the link) while the SMs are mostly idle (CommSMActivePct, or
// CommUtilPct without GPM): the GPU waits on transfers — in multi-GPU work,
// on its peers.
func (d *Detector) commBound(dev *record.Device, s *devState, t int64) {
	nv, nvSpan, nvFrom, nvSrc := s.linkRate(catalog.MetricNVLinkTxRate, catalog.MetricNVLinkRxRate, catalog.MetricNVLinkTxBytes, catalog.MetricNVLinkRxBytes)
	pc, pcSpan, pcFrom, pcSrc := s.linkRate(catalog.MetricPCIeTxRate, catalog.MetricPCIeRxRate, catalog.MetricPCIeTxBytes, catalog.MetricPCIeRxBytes)
	pcieLimit := CommPCIeBytesPerS
	if lane, ok := pcieLaneBytesPerS[s.pcieGen]; ok && s.pcieWidth > 0 {
		pcieLimit = CommPCIeFrac * 2 * lane * float64(s.pcieWidth)
	}
	nvBusy := nvSpan >= int64(commMinSpanNS) && nv >= CommNVLinkBytesPerS
	pcBusy := pcSpan >= int64(commMinSpanNS) && pc >= pcieLimit
	var act float64
	var actKey string
	var idle bool
	switch {
	case len(s.smWin) >= 2:
		act, actKey = mean(s.smWin), "sm_active_pct"
		idle = act < CommSMActivePct
	case len(s.utilWin) >= 2:
		act, actKey = mean(s.utilWin), "utilization_pct"
		idle = act < CommUtilPct
	default:
		return // activity unknown: no verdict
	}
	if nvSpan < int64(commMinSpanNS) && pcSpan < int64(commMinSpanNS) {
		return // too little link data for a verdict either way
	}
	link, src, from := "nvlink", nvSrc, nvFrom
	if !nvBusy && pcBusy {
		link, src, from = "pcie", pcSrc, pcFrom
	}
	// The verdict is on means over the window: the condition held from the
	// first rate in it, which is where the finding starts.
	d.condSince(dev, s, FindingCommBound, (nvBusy || pcBusy) && idle, min(from, t), t, (nv+pc)/1e9, func() []record.Attr {
		return []record.Attr{{Key: "link", Value: link}, {Key: "nvlink_gbps", Value: ftoa(math.Round(nv/1e8) / 10)},
			{Key: "pcie_gbps", Value: ftoa(math.Round(pc/1e8) / 10)}, {Key: "pcie_threshold_gbps", Value: ftoa(math.Round(pcieLimit/1e8) / 10)},
			{Key: "nvlink_threshold_gbps", Value: ftoa(CommNVLinkBytesPerS / 1e9)}, {Key: "rate_source", Value: src},
			{Key: actKey, Value: ftoa(math.Round(act))}}
	}, "moving data over "+link+" while the SMs mostly idle: the GPUs wait on each other (communication-bound); "+
		"minimize communication: overlap it with compute, all-reduce less often (gradient accumulation, larger per-GPU batches), "+
		"and time each step between torch.distributed.barrier() and torch.cuda.synchronize() to see the wait")
}

// dipsFrom tracks dips (utilization falling below DipLowPct after having
// been at or above DipHighPct) and opens a finding when the last
// dipMinCount dips come at regular intervals.
func (d *Detector) dipsFrom(dev *record.Device, s *devState, t int64, v float64) {
	s.lastUtilNS = t
	if v >= DipHighPct {
		s.high = true
		return
	}
	if v >= DipLowPct || !s.high {
		return
	}
	s.high = false
	s.dips = append(s.dips, t)
	if len(s.dips) > 16 {
		s.dips = s.dips[len(s.dips)-16:]
	}
	if len(s.dips) < dipMinCount {
		return
	}
	last := s.dips[len(s.dips)-dipMinCount:]
	iv := make([]float64, 0, len(last)-1)
	for i := 1; i < len(last); i++ {
		iv = append(iv, float64(last[i]-last[i-1]))
	}
	m := 0.0
	for _, x := range iv {
		m += x
	}
	m /= float64(len(iv))
	var sd float64
	for _, x := range iv {
		sd += (x - m) * (x - m)
	}
	sd = math.Sqrt(sd / float64(len(iv)))
	if m <= 0 || sd/m > dipMaxCV {
		return
	}
	period := m / 1e9
	f := d.cond(dev, s, FindingPeriodicDips, true, t, period, func() []record.Attr {
		return []record.Attr{{Key: "period_s", Value: ftoa(math.Round(period*10) / 10)}}
	}, fmt.Sprintf("utilization dips every %.1f s: the input pipeline stalls (data loading); prefetch more, more loader workers", period))
	// A periodic finding holds until two periods pass without a dip.
	f.lastNS = t + int64(m)
}

// cond updates finding name: opened when ok first holds, kept while it
// holds, closed once it has not held for quietNS.
func (d *Detector) cond(dev *record.Device, s *devState, name string, ok bool, t int64, v float64, attrs func() []record.Attr, msg string) *finding {
	return d.condSince(dev, s, name, ok, t, t, v, attrs, msg)
}

// condSince is cond for a condition judged at t on evidence that starts at
// since: a finding it opens starts at since.
func (d *Detector) condSince(dev *record.Device, s *devState, name string, ok bool, since, t int64, v float64, attrs func() []record.Attr, msg string) *finding {
	f := s.findings[name]
	if f == nil {
		f = &finding{name: name}
		s.findings[name] = f
	}
	if !ok {
		return f
	}
	if !f.open {
		since = max(since, f.lastNS) // never before an earlier span ended
		f.open, f.startNS, f.peak = true, since, v
		f.attrs, f.evidence = attrs(), msg
		d.emit(f.event(dev.Index, 0))
	}
	f.lastNS = max(f.lastNS, t)
	f.peak = math.Max(f.peak, v)
	return f
}

func (d *Detector) closeQuiet(dev *record.Device, s *devState, t int64) {
	for name, f := range s.findings {
		if f.open && t-f.lastNS > int64(quietNS) {
			d.close(dev.Index, f)
			if strings.HasPrefix(name, FindingNUMA+"/") {
				delete(s.findings, name) // a process's: PIDs come and go
			}
		}
	}
}

func (d *Detector) close(idx int, f *finding) {
	f.open = false
	d.emit(f.event(idx, max(f.lastNS, f.startNS)))
}

func (f *finding) event(idx int, end int64) record.Event {
	state := "open"
	if end != 0 {
		state = "closed"
	}
	name, _, _ := cut(f.name)
	attrs := []record.Attr{{Key: "finding", Value: name}, {Key: "state", Value: state}}
	if name != FindingNUMA { // a placement has no magnitude
		attrs = append(attrs, record.Attr{Key: "peak", Value: ftoa(math.Round(f.peak*100) / 100)})
	}
	attrs = append(attrs, f.attrs...)
	return record.Event{Kind: record.EventFinding, Device: idx, StartNS: f.startNS, EndNS: end, Message: f.evidence, Attrs: attrs}
}

// Flush closes every open finding (at the end of a run).
func (d *Detector) Flush() {
	d.mu.Lock()
	idx := make([]int, 0, len(d.devs))
	for i := range d.devs {
		idx = append(idx, i)
	}
	d.mu.Unlock()
	slices.Sort(idx)
	for _, i := range idx {
		s := d.state(i)
		s.mu.Lock()
		names := make([]string, 0, len(s.findings))
		for n := range s.findings {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			if f := s.findings[n]; f.open {
				d.close(i, f)
			}
		}
		s.mu.Unlock()
	}
}

func cut(name string) (string, string, bool) {
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			return name[:i], name[i+1:], true
		}
	}
	return name, "", false
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
