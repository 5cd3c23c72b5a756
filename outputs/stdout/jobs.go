package stdout

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// jobsEncoder is the "jobs" format: a live table of the per-job accounts
// (record.EventJob and record.EventJobEnd, [attribution] accounting), one
// row per owner over all its GPUs, printed whenever new account records
// arrive. Other records are not printed. An owner whose every account
// ended is dropped jobEndedRetention after its last end, on the records'
// own clock (the newest account record's time), as Prometheus drops its
// series; a table of a node running thousands of jobs stays small.
type jobsEncoder struct {
	// accounts holds the newest record per (device, owner).
	accounts map[jobKey]*jobAccount
	// latest is the newest account record's time (ns).
	latest  int64
	changed bool
	buf     []byte
}

// jobEndedRetention is how long an ended owner's row stays after its last
// account ended.
const jobEndedRetention = 5 * time.Minute

type jobKey struct {
	owner string
	gpu   int
}

type jobAccount struct {
	fields []record.Field
	ended  bool
	atNS   int64 // the record's time
}

func newJobsEncoder() *jobsEncoder { return &jobsEncoder{accounts: map[jobKey]*jobAccount{}} }

// Encode keeps b's account records and renders the table when any came.
func (e *jobsEncoder) Encode(b *record.Batch) {
	for _, ev := range b.Events {
		if ev.Kind != record.EventJob && ev.Kind != record.EventJobEnd {
			continue
		}
		owner := record.OwnerUnattributed
		for _, a := range ev.Attrs {
			if a.Key == record.AttrOwner {
				owner = a.Value
			}
		}
		at := max(ev.StartNS, ev.EndNS)
		e.accounts[jobKey{owner, ev.Device}] = &jobAccount{fields: slices.Clone(ev.Fields), ended: ev.Kind == record.EventJobEnd, atNS: at}
		e.latest = max(e.latest, at)
		e.changed = true
	}
	if e.changed {
		e.expire()
		e.render()
	}
}

// expire drops the owners whose every account ended more than
// jobEndedRetention before the newest record.
func (e *jobsEncoder) expire() {
	keep := map[string]bool{}
	for k, a := range e.accounts {
		if !a.ended || e.latest-a.atNS <= int64(jobEndedRetention) {
			keep[k.owner] = true
		}
	}
	maps.DeleteFunc(e.accounts, func(k jobKey, _ *jobAccount) bool { return !keep[k.owner] })
}

// jobsFormat: owner, GPUs, energy (J, from the power samples), busy % of
// the allocated time, idle-allocated time, peak memory, exactness, state.
const jobsFormat = "%-36s %-8s %12s %6s %10s %9s %6s %s\n"

// render prints one row per owner, sorted by owner.
func (e *jobsEncoder) render() {
	e.changed = false
	type row struct {
		gpus                                     []int
		energy, busy, idle, alloc, inexact, peak float64
		running                                  bool
	}
	rows := map[string]*row{}
	for k, a := range e.accounts {
		r := rows[k.owner]
		if r == nil {
			r = &row{}
			rows[k.owner] = r
		}
		v := func(key string) float64 { return record.FieldValue(a.fields, key) }
		r.gpus = append(r.gpus, k.gpu)
		r.energy += v(record.JobFieldEnergy)
		r.busy += v(record.JobFieldBusy)
		r.idle += v(record.JobFieldIdleAllocated)
		r.alloc += v(record.JobFieldAllocated)
		r.inexact += v(record.JobFieldPointRead) + v(record.JobFieldLost)
		r.peak = max(r.peak, v(record.JobFieldMemoryPeak))
		r.running = r.running || !a.ended
	}
	e.buf = fmt.Appendf(e.buf, jobsFormat, "OWNER", "GPUS", "ENERGY_J", "BUSY%", "IDLE_ALLOC", "PEAK_MiB", "EXACT", "STATE")
	for _, owner := range slices.SortedFunc(maps.Keys(rows), func(a, b string) int {
		// unattributed last
		return cmp.Or(cmp.Compare(boolInt(a == record.OwnerUnattributed), boolInt(b == record.OwnerUnattributed)), cmp.Compare(a, b))
	}) {
		r := rows[owner]
		slices.Sort(r.gpus)
		gpus := make([]string, len(r.gpus))
		for i, g := range r.gpus {
			gpus[i] = strconv.Itoa(g)
		}
		busy, exact := "-", "-"
		if r.alloc > 0 {
			busy = strconv.FormatFloat(100*r.busy/r.alloc, 'f', 1, 64)
			exact = strconv.FormatFloat(max(0, 1-r.inexact/r.alloc), 'f', 3, 64)
		}
		idle := "-"
		if owner != record.OwnerUnattributed {
			idle = (time.Duration(r.idle * float64(time.Second))).Round(100 * time.Millisecond).String()
		}
		state := "ended"
		if r.running {
			state = "running"
		}
		e.buf = fmt.Appendf(e.buf, jobsFormat, trunc(owner, 36), trunc(strings.Join(gpus, ","), 8), strconv.FormatFloat(r.energy, 'f', 1, 64),
			busy, idle, strconv.FormatFloat(r.peak, 'f', 0, 64), exact, state)
	}
	e.buf = append(e.buf, '\n')
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "~"
	}
	return s
}

// Bytes returns what the last Encode rendered.
func (e *jobsEncoder) Bytes() []byte { return e.buf }

// Reset empties the rendered text, keeping the accounts.
func (e *jobsEncoder) Reset() { e.buf = e.buf[:0] }
