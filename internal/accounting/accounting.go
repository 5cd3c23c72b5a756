package accounting

import (
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Defaults of Options.
const (
	// DefaultReportInterval is how often (in sample time) a device's
	// running totals are emitted.
	DefaultReportInterval = 10 * time.Second
	// DefaultGapLimit: two consecutive power (or utilization) samples
	// farther apart than this are a gap: nothing is integrated across it,
	// and its length counts as lost.
	DefaultGapLimit = 2 * time.Second
	// NoPowerAfter: a device seen this long (in sample time) without a
	// power sample is accounted along its other samples and process polls
	// instead (see Accountant.seen).
	NoPowerAfter = 10 * time.Second
	// DefaultIdleThreshold: an owner whose utilization in a sample period is
	// below this many percent is idle in it (NVML reports whole percents,
	// so by default exactly 0% is idle and every other value busy).
	DefaultIdleThreshold = 1.0
)

// Options configure an Accountant.
type Options struct {
	// Emit receives the EventJob and EventJobEnd records (Engine.Emit). It
	// is called without the accountant's lock held.
	Emit func(record.Event)
	// ReportInterval, GapLimit and IdleThreshold: see the defaults.
	ReportInterval time.Duration
	GapLimit       time.Duration
	IdleThreshold  float64
	// Start is when accounting starts (Unix ns; the engine's start): the
	// samples older than it — the history the driver's buffers held at
	// start, whose owner nobody knows — are not accounted. 0 accounts
	// every sample.
	Start int64
}

// Accountant keeps the accounts. It implements sampler.Observer,
// sampler.ProcessObserver and sampler.EventObserver; see the package
// documentation for the rules.
//
// Concurrency: every method may be called from any goroutine; one mutex
// serializes them (the work per sample is a few additions).
type Accountant struct {
	opts Options
	cat  *catalog.Catalog

	power, util, energy, memory catalog.MetricID

	mu   sync.Mutex
	devs map[int]*device
	out  []record.Event // emitted once the lock is released
}

// New returns an accountant.
func New(opts Options) *Accountant {
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = DefaultReportInterval
	}
	if opts.GapLimit <= 0 {
		opts.GapLimit = DefaultGapLimit
	}
	if opts.IdleThreshold <= 0 {
		opts.IdleThreshold = DefaultIdleThreshold
	}
	if opts.Emit == nil {
		opts.Emit = func(record.Event) {}
	}
	cat := catalog.Default()
	return &Accountant{opts: opts, cat: cat, devs: map[int]*device{},
		power: cat.BufferMetric(catalog.BufferTotalPower), util: cat.BufferMetric(catalog.BufferGPUUtil),
		energy: catalog.MetricEnergy, memory: catalog.MetricMemoryUsed}
}

// Totals are an account's cumulative figures (see the package doc).
type Totals struct {
	EnergyJ, EnergyCounterJ           float64
	BusyS, IdleAllocatedS, AllocatedS float64
	PointReadS, LostS                 float64
	MemoryPeakMiB                     float64
	PowerSamples                      uint64
}

// Exactness is the share of the account's time covered neither by point
// reads nor by lost samples: 1 − (PointReadS + LostS) / AllocatedS, in
// [0, 1]; 1 for an account with no time yet.
func (t Totals) Exactness() float64 {
	if t.AllocatedS <= 0 {
		return 1
	}
	return math.Max(0, math.Min(1, 1-(t.PointReadS+t.LostS)/t.AllocatedS))
}

// Fields returns the totals as EventJob fields (record.JobFieldKeys order).
func (t Totals) Fields() []record.Field {
	return []record.Field{
		{Key: record.JobFieldEnergy, Value: t.EnergyJ},
		{Key: record.JobFieldEnergyCounter, Value: t.EnergyCounterJ},
		{Key: record.JobFieldEnergyDiff, Value: t.EnergyCounterJ - t.EnergyJ},
		{Key: record.JobFieldBusy, Value: t.BusyS},
		{Key: record.JobFieldIdleAllocated, Value: t.IdleAllocatedS},
		{Key: record.JobFieldAllocated, Value: t.AllocatedS},
		{Key: record.JobFieldPointRead, Value: t.PointReadS},
		{Key: record.JobFieldLost, Value: t.LostS},
		{Key: record.JobFieldExactness, Value: t.Exactness()},
		{Key: record.JobFieldMemoryPeak, Value: t.MemoryPeakMiB, Int: true},
		{Key: record.JobFieldSamples, Value: float64(t.PowerSamples), Int: true},
	}
}

// TotalsOf reads the totals back from an EventJob's fields.
func TotalsOf(fields []record.Field) Totals {
	v := func(k string) float64 { return record.FieldValue(fields, k) }
	return Totals{EnergyJ: v(record.JobFieldEnergy), EnergyCounterJ: v(record.JobFieldEnergyCounter),
		BusyS: v(record.JobFieldBusy), IdleAllocatedS: v(record.JobFieldIdleAllocated), AllocatedS: v(record.JobFieldAllocated),
		PointReadS: v(record.JobFieldPointRead), LostS: v(record.JobFieldLost), MemoryPeakMiB: v(record.JobFieldMemoryPeak),
		PowerSamples: uint64(v(record.JobFieldSamples))}
}

// Account is one owner's account on one device.
type Account struct {
	Device  int
	Owner   record.Attribution
	StartNS int64
	// EndNS is when the owner left the device; 0 while it holds it.
	EndNS int64
	Totals
}

// Accounts returns a copy of every open account (including those whose
// owner left and whose job-end record is not out yet), by device and start.
func (a *Accountant) Accounts() []Account {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Account
	for _, d := range a.devs {
		for _, ac := range d.accts {
			out = append(out, *ac)
		}
	}
	slices.SortFunc(out, func(x, y Account) int {
		if x.Device != y.Device {
			return x.Device - y.Device
		}
		if x.StartNS != y.StartNS {
			if x.StartNS < y.StartNS {
				return -1
			}
			return 1
		}
		return compareOwner(x.Owner, y.Owner)
	})
	return out
}

func compareOwner(x, y record.Attribution) int {
	xv, yv := x.Values(), y.Values()
	return slices.Compare(xv[:], yv[:])
}

// proc is one process of a committed poll.
type proc struct {
	pid     uint32
	owner   record.Attribution
	sm      float64
	hasUtil bool
	memMiB  float64
}

// state is who holds a device from fromNS on.
type state struct {
	fromNS    int64
	exclusive record.Attribution // the device's own attribution
	procs     []proc             // the newest process poll
}

// share is one owner's part of a device in a state.
type share struct {
	owner record.Attribution
	// weight is the owner's share of the device's energy, and of its
	// utilization, in this state (the shares sum to 1).
	weight float64
}

// shares applies the split rule: an attributed device is its owner's
// alone; otherwise its processes are grouped by their own attribution
// (processes without one are unattributed) and each group's share is its
// part of the processes' summed SM utilization, or an even part when that
// sum is 0 (idle, or no per-process utilization); a device with no
// process is unattributed.
func (s *state) shares(dst []share) []share {
	dst = dst[:0]
	if !s.exclusive.IsZero() || len(s.procs) == 0 {
		return append(dst, share{owner: s.exclusive, weight: 1})
	}
	total := 0.0
	for _, p := range s.procs {
		i := slices.IndexFunc(dst, func(x share) bool { return x.owner == p.owner })
		if i < 0 {
			dst = append(dst, share{owner: p.owner})
			i = len(dst) - 1
		}
		if p.hasUtil && p.sm > 0 {
			dst[i].weight += p.sm
			total += p.sm
		}
	}
	for i := range dst {
		if total > 0 {
			dst[i].weight /= total
		} else {
			dst[i].weight = 1 / float64(len(dst))
		}
	}
	return dst
}

// owners reports whether a is among s's owners.
func (s *state) has(a record.Attribution) bool {
	if !s.exclusive.IsZero() || len(s.procs) == 0 {
		return s.exclusive == a
	}
	return slices.ContainsFunc(s.procs, func(p proc) bool { return p.owner == a })
}

type counterReading struct {
	ns int64
	mj float64
}

// device is one device's accounting state.
type device struct {
	index int
	// states, oldest first; states[0] is in effect at the oldest time not
	// yet accounted.
	states []state
	// pending collects the process events of the poll in progress.
	pending []proc
	// identityAttr is the attribution last seen on the device's identity.
	identityAttr record.Attribution
	// ownerSet: SetOwner was called for the device, so its attribution
	// changes reach the timeline with their times, and the identity's
	// attribution (which can lag them by a batch or two) is ignored.
	ownerSet bool

	havePower bool
	powerNS   int64
	powerW    float64
	// haveClock, clockNS: the timeline of a device without power samples
	// (a MIG instance): its other samples' and process polls' times, from
	// firstNS on, once NoPowerAfter passed on it without a power sample.
	// Unused once power samples arrive.
	haveSeen    bool
	firstNS     int64
	haveClock   bool
	clockNS     int64
	haveUtil    bool
	utilNS      int64
	reportNS    int64
	counters    []counterReading // readings not yet reached by the power timeline
	prevCounter *counterReading
	closedNS    int64 // the newest counter reading whose window closed
	window      map[record.Attribution]float64

	accts map[record.Attribution]*Account
	sh    []share // scratch
}

func (a *Accountant) device(index int) *device {
	d := a.devs[index]
	if d == nil {
		d = &device{index: index, states: []state{{fromNS: math.MinInt64}},
			window: map[record.Attribution]float64{}, accts: map[record.Attribution]*Account{}}
		a.devs[index] = d
	}
	return d
}

// flushOut emits what was collected under the lock. Call with a.mu held;
// it releases it.
func (a *Accountant) unlockAndEmit() {
	out := a.out
	a.out = nil
	a.mu.Unlock()
	for _, ev := range out {
		a.opts.Emit(ev)
	}
}

// SetOwner records that device index is attributed to owner from atNS on
// (engine clock). A zero owner is no device attribution (then the device's
// processes decide). Idempotent for an unchanged owner. From the first
// call for a device on, the attribution its identity carries in Observe
// is ignored: SetOwner's changes are the device's owners.
func (a *Accountant) SetOwner(index int, owner record.Attribution, atNS int64) {
	a.mu.Lock()
	d := a.device(index)
	d.ownerSet = true
	a.change(d, atNS, func(s *state) { s.exclusive = owner })
	a.unlockAndEmit()
}

// change appends a state made from the newest one by modify, from atNS on
// (never before what is already accounted), and starts or ends the
// accounts whose owners it adds or removes.
func (a *Accountant) change(d *device, atNS int64, modify func(*state)) {
	last := d.states[len(d.states)-1]
	next := last
	next.procs = slices.Clone(last.procs)
	modify(&next)
	if next.exclusive == last.exclusive && slices.Equal(next.procs, last.procs) {
		return
	}
	atNS = max(atNS, last.fromNS, d.horizon())
	next.fromNS = atNS
	if atNS == last.fromNS {
		d.states[len(d.states)-1] = next
	} else {
		d.states = append(d.states, next)
	}
	// Owners that left end at atNS; owners that (re)arrived hold an
	// open account.
	for owner, ac := range d.accts {
		if owner.IsZero() {
			continue // unattributed is never done
		}
		if next.has(owner) {
			ac.EndNS = 0
		} else if ac.EndNS == 0 {
			ac.EndNS = atNS
		}
	}
	for _, s := range next.shares(d.sh) {
		d.account(s.owner, atNS)
	}
	a.finalize(d)
}

// timeline returns how far the device's account timeline has come: the
// power samples', or without them the clock's (see clockTo).
func (d *device) timeline() (int64, bool) {
	switch {
	case d.havePower:
		return d.powerNS, true
	case d.haveClock:
		return d.clockNS, true
	}
	return 0, false
}

// horizon is the newest time the device's timelines have accounted.
func (d *device) horizon() int64 {
	h := int64(math.MinInt64)
	if t, ok := d.timeline(); ok {
		h = t
	}
	if d.haveUtil {
		h = max(h, d.utilNS)
	}
	return h
}

func (d *device) account(owner record.Attribution, atNS int64) *Account {
	ac := d.accts[owner]
	if ac == nil {
		ac = &Account{Device: d.index, Owner: owner, StartNS: atNS}
		d.accts[owner] = ac
	}
	return ac
}

// stateIndex returns the index of the state in effect at t (the newest
// starting at or before t).
func (d *device) stateIndex(t int64) int {
	i := sort.Search(len(d.states), func(i int) bool { return d.states[i].fromNS > t })
	return max(i-1, 0)
}

// trim drops the states no timeline needs any more.
func (d *device) trim() {
	low, ok := d.timeline()
	if !ok {
		return
	}
	if d.haveUtil {
		low = min(low, d.utilNS)
	}
	if i := d.stateIndex(low); i > 0 {
		d.states = slices.Delete(d.states, 0, i)
	}
}

// Observe accounts a device's published samples (sampler.Observer).
func (a *Accountant) Observe(dev *record.Device, samples []record.Sample) {
	a.mu.Lock()
	d := a.device(dev.Index)
	if !d.ownerSet && dev.Attribution != d.identityAttr && len(samples) > 0 {
		// The identity's attribution changed without SetOwner (an
		// accountant not fed through a Target): it holds from the oldest
		// sample of this batch on. With SetOwner the timeline has every
		// change at its time already; an identity published between a
		// SetOwner and the engine taking it is one change behind and
		// would hand the device back to the previous owner.
		d.identityAttr = dev.Attribution
		if d.states[len(d.states)-1].exclusive != dev.Attribution {
			at := samples[0].TimeNS
			for _, s := range samples {
				at = min(at, s.TimeNS)
			}
			a.change(d, at, func(s *state) { s.exclusive = dev.Attribution })
		}
	}
	newest := int64(math.MinInt64)
	for i := range samples {
		s := &samples[i]
		if s.TimeNS < a.opts.Start {
			continue
		}
		newest = max(newest, s.TimeNS)
		switch s.Metric {
		case a.power:
			a.powerSample(d, s)
		case a.util:
			a.utilSample(d, s)
		case a.energy:
			a.counterSample(d, s)
		case a.memory:
			st := &d.states[d.stateIndex(s.TimeNS)]
			if !st.exclusive.IsZero() || len(st.procs) == 0 {
				ac := d.account(st.exclusive, s.TimeNS)
				ac.MemoryPeakMiB = max(ac.MemoryPeakMiB, s.Value)
			}
		}
	}
	if newest != math.MinInt64 {
		a.seen(d, newest)
	}
	d.trim()
	a.finalize(d)
	a.unlockAndEmit()
}

// seen notes that the device was seen at t (its newest sample of a batch,
// a process poll). A device that goes NoPowerAfter without a power sample
// (a MIG instance: NVML has no per-instance power; a GPU with neither a
// power buffer nor a power reading) is accounted along the times it was
// seen instead, from the first on (see clockTo). The wait keeps a GPU
// whose field reads are published before its power buffer is drained
// on the power timeline.
func (a *Accountant) seen(d *device, t int64) {
	if d.havePower {
		return
	}
	if !d.haveClock {
		if !d.haveSeen {
			d.haveSeen, d.firstNS = true, t
		}
		if t-d.firstNS < int64(NoPowerAfter) {
			return
		}
		d.haveClock, d.clockNS, d.reportNS = true, d.firstNS, d.firstNS
		d.account(d.states[d.stateIndex(d.firstNS)].shares(d.sh)[0].owner, d.firstNS)
	}
	a.clockTo(d, t)
}

// clockTo moves the clock timeline of a device without power samples to
// t. The interval since the previous time is allocated to the owners
// holding the device, split at state changes, and all of it counts as
// lost_s: no power sample covers it, so energy_j says nothing about it
// and exactness is 0. Busy, idle and memory figures come from their own
// samples as on any device.
func (a *Accountant) clockTo(d *device, t int64) {
	if t <= d.clockNS {
		return
	}
	d.spans(d.clockNS, t, func(st *state, from int64, dt float64) {
		for _, sh := range st.shares(d.sh) {
			ac := d.account(sh.owner, from)
			ac.AllocatedS += dt
			ac.LostS += dt
		}
	})
	d.clockNS = t
	a.report(d, t)
}

// report emits every account's running totals as of t when a report
// interval has passed since the previous report.
func (a *Accountant) report(d *device, t int64) {
	if t-d.reportNS < int64(a.opts.ReportInterval) {
		return
	}
	d.reportNS = t
	for _, ac := range d.sortedAccounts() {
		a.out = append(a.out, jobEvent(record.EventJob, ac, t))
	}
}

// powerSample integrates the interval from the previous power sample
// (trapezoid between the driver's timestamps), split at state changes and
// energy-counter readings.
func (a *Accountant) powerSample(d *device, s *record.Sample) {
	if !d.havePower {
		if d.haveClock {
			// Power samples start on a device accounted by its clock so
			// far: the clock covers up to here, the power timeline on.
			if s.TimeNS < d.clockNS {
				return
			}
			a.clockTo(d, s.TimeNS)
		}
		d.havePower, d.powerNS, d.powerW, d.reportNS = true, s.TimeNS, s.Value, s.TimeNS
		d.account(d.states[d.stateIndex(s.TimeNS)].shares(d.sh)[0].owner, s.TimeNS)
		a.closeWindows(d, s.TimeNS)
		return
	}
	if s.TimeNS <= d.powerNS {
		return // not newer: already accounted
	}
	t0, p0 := d.powerNS, d.powerW
	t1, p1 := s.TimeNS, s.Value
	gap := t1-t0 > int64(a.opts.GapLimit)
	pAt := func(t int64) float64 { return p0 + (p1-p0)*float64(t-t0)/float64(t1-t0) }
	for t := t0; t < t1; {
		i := d.stateIndex(t)
		end := t1
		if i+1 < len(d.states) && d.states[i+1].fromNS < end {
			end = d.states[i+1].fromNS
		}
		if len(d.counters) > 0 && d.counters[0].ns > t && d.counters[0].ns < end {
			end = d.counters[0].ns
		}
		dt := float64(end-t) / 1e9
		e := 0.0
		if !gap {
			e = (pAt(t) + pAt(end)) / 2 * dt
		}
		for _, sh := range d.states[i].shares(d.sh) {
			ac := d.account(sh.owner, t)
			ac.AllocatedS += dt
			if gap {
				ac.LostS += dt
				continue
			}
			ac.EnergyJ += e * sh.weight
			d.window[sh.owner] += e * sh.weight
		}
		t = end
		a.closeWindows(d, t)
	}
	for _, sh := range d.states[d.stateIndex(t1)].shares(d.sh) {
		d.account(sh.owner, t1).PowerSamples++
	}
	d.powerNS, d.powerW = t1, p1
	a.report(d, t1)
}

// utilSample accounts the interval from the previous utilization sample as
// busy or idle for each owner, by the owner's part of the utilization.
func (a *Accountant) utilSample(d *device, s *record.Sample) {
	if !d.haveUtil {
		d.haveUtil, d.utilNS = true, s.TimeNS
		return
	}
	if s.TimeNS <= d.utilNS {
		return
	}
	t0, t1 := d.utilNS, s.TimeNS
	d.utilNS = t1
	if t1-t0 > int64(a.opts.GapLimit) {
		return // a gap: neither busy nor idle (lost shows on the power timeline)
	}
	point := s.Flags&record.FlagPointRead != 0
	d.spans(t0, t1, func(st *state, from int64, dt float64) {
		for _, sh := range st.shares(d.sh) {
			ac := d.account(sh.owner, from)
			if point {
				ac.PointReadS += dt
			}
			if s.Value*sh.weight >= a.opts.IdleThreshold {
				ac.BusyS += dt
			} else if !sh.owner.IsZero() {
				ac.IdleAllocatedS += dt
			}
		}
	})
}

// spans calls f for each part of [t0, t1) split at state changes: the
// state in effect, the part's start and its length in seconds.
func (d *device) spans(t0, t1 int64, f func(st *state, from int64, dt float64)) {
	for t := t0; t < t1; {
		i := d.stateIndex(t)
		end := t1
		if i+1 < len(d.states) && d.states[i+1].fromNS < end {
			end = d.states[i+1].fromNS
		}
		f(&d.states[i], t, float64(end-t)/1e9)
		t = end
	}
}

// counterSample queues an energy-counter reading: its delta since the
// previous reading is split when the power timeline reaches it.
func (a *Accountant) counterSample(d *device, s *record.Sample) {
	if n := len(d.counters); n > 0 && s.TimeNS <= d.counters[n-1].ns {
		return
	}
	if !d.havePower {
		// No power timeline (yet): only the newest reading can matter,
		// as the start of the first window.
		d.counters = d.counters[:0]
	}
	d.counters = append(d.counters, counterReading{ns: s.TimeNS, mj: s.Value})
	if d.havePower {
		a.closeWindows(d, d.powerNS)
	}
}

// closeWindows closes the counter windows whose readings the power
// timeline has reached at t: each reading's delta since the previous one
// is split among the owners in proportion to the power-integrated energy
// each had in between (evenly among the owners at the reading when none
// had any). A counter that went backwards (a driver reload) starts over.
func (a *Accountant) closeWindows(d *device, t int64) {
	for len(d.counters) > 0 && d.counters[0].ns <= t {
		c := d.counters[0]
		d.counters = d.counters[1:]
		if p := d.prevCounter; p != nil && c.mj >= p.mj {
			j := (c.mj - p.mj) / 1000
			total := 0.0
			for _, e := range d.window {
				total += e
			}
			if total > 0 {
				for owner, e := range d.window {
					d.account(owner, c.ns).EnergyCounterJ += j * e / total
				}
			} else {
				shs := d.states[d.stateIndex(c.ns)].shares(d.sh)
				for _, sh := range shs {
					d.account(sh.owner, c.ns).EnergyCounterJ += j / float64(len(shs))
				}
			}
		}
		d.prevCounter = &c
		d.closedNS = c.ns
		clear(d.window)
	}
}

// finalize ends the accounts whose owner left and whose figures can no
// longer change: both timelines and a closed counter window (when the
// device has a counter) are past the end.
func (a *Accountant) finalize(d *device) {
	tl, ok := d.timeline()
	for _, ac := range d.sortedAccounts() {
		if ac.EndNS == 0 || !ok || tl < ac.EndNS || d.haveUtil && d.utilNS < ac.EndNS ||
			d.prevCounter != nil && d.closedNS < ac.EndNS {
			continue
		}
		a.end(d, ac)
	}
}

func (a *Accountant) end(d *device, ac *Account) {
	a.out = append(a.out, jobEvent(record.EventJob, ac, ac.EndNS), jobEvent(record.EventJobEnd, ac, ac.EndNS))
	delete(d.accts, ac.Owner)
}

func (d *device) sortedAccounts() []*Account {
	out := make([]*Account, 0, len(d.accts))
	for _, ac := range d.accts {
		out = append(out, ac)
	}
	slices.SortFunc(out, func(x, y *Account) int { return compareOwner(x.Owner, y.Owner) })
	return out
}

// ObserveProcesses commits the process poll whose events ObserveEvent saw
// (sampler.ProcessObserver): from nowNS on, the device's processes are
// pids with their attribution and utilization.
func (a *Accountant) ObserveProcesses(dev *record.Device, pids []uint32, nowNS int64) {
	a.mu.Lock()
	d := a.device(dev.Index)
	procs := make([]proc, 0, len(pids))
	for _, p := range d.pending {
		if slices.Contains(pids, p.pid) {
			procs = append(procs, p)
		}
	}
	d.pending = d.pending[:0]
	slices.SortFunc(procs, func(x, y proc) int { return int(x.pid) - int(y.pid) })
	a.change(d, nowNS, func(s *state) { s.procs = procs })
	if !d.havePower && nowNS >= a.opts.Start {
		// The poll is a time the device was seen at (the interval up to
		// it goes to the states before the poll's).
		a.seen(d, nowNS)
		d.trim()
		a.finalize(d)
	}
	// A shared device's memory: each owner's processes' memory.
	if st := &d.states[len(d.states)-1]; st.exclusive.IsZero() {
		mem := map[record.Attribution]float64{}
		for _, p := range procs {
			mem[p.owner] += p.memMiB
		}
		for owner, m := range mem {
			if ac := d.accts[owner]; ac != nil {
				ac.MemoryPeakMiB = max(ac.MemoryPeakMiB, m)
			}
		}
	}
	a.unlockAndEmit()
}

// ObserveEvent collects the process events of a poll in progress
// (sampler.EventObserver); other events are ignored.
func (a *Accountant) ObserveEvent(ev *record.Event) {
	if ev.Kind != record.EventProcess {
		return
	}
	owner, _ := record.ProcessAttribution(*ev)
	p := proc{pid: uint32(record.FieldValue(ev.Fields, record.ProcessFieldPID)), owner: owner,
		memMiB: record.FieldValue(ev.Fields, record.ProcessFieldUsedMemory)}
	for _, f := range ev.Fields {
		if f.Key == record.ProcessFieldSMUtil {
			p.hasUtil, p.sm = true, f.Value
		}
	}
	a.mu.Lock()
	d := a.device(ev.Device)
	// A PID seen again replaces its entry: pending holds one per process
	// even if a poll is never committed.
	if i := slices.IndexFunc(d.pending, func(x proc) bool { return x.pid == p.pid }); i >= 0 {
		d.pending[i] = p
	} else {
		d.pending = append(d.pending, p)
	}
	a.mu.Unlock()
}

// Flush closes what the samples so far allow (the engine calls it once
// after the device loops end): the pending counter windows close with
// what they hold, accounts whose owner left get their job-end record, and
// every other account its running totals once more.
func (a *Accountant) Flush() {
	a.mu.Lock()
	for _, i := range slices.Sorted(maps.Keys(a.devs)) {
		d := a.devs[i]
		tl, ok := d.timeline()
		if !ok {
			continue
		}
		a.closeWindows(d, math.MaxInt64)
		for _, ac := range d.sortedAccounts() {
			if ac.EndNS != 0 && ac.EndNS <= tl {
				a.end(d, ac)
				continue
			}
			a.out = append(a.out, jobEvent(record.EventJob, ac, tl))
		}
	}
	a.unlockAndEmit()
}

// jobEvent is ac's record of kind as of asOfNS.
func jobEvent(kind record.EventKind, ac *Account, asOfNS int64) record.Event {
	attrs := []record.Attr{{Key: record.AttrOwner, Value: record.OwnerName(ac.Owner)}}
	attrs = append(attrs, ac.Owner.Attrs()...)
	attrs = append(attrs, record.Attr{Key: record.AttrJobStarted, Value: time.Unix(0, ac.StartNS).UTC().Format(time.RFC3339Nano)})
	return record.Event{Kind: kind, Device: ac.Device, StartNS: asOfNS, EndNS: asOfNS,
		Message: string(kind) + " " + record.OwnerName(ac.Owner), Attrs: attrs, Fields: ac.Totals.Fields()}
}
