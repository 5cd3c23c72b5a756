package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpusampler/gpusampler/internal/attribution"
	"github.com/gpusampler/gpusampler/internal/pipeline/buffer"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// selfMetricsLoop sends self-metrics every stats interval through every
// output (as record.EventSelf events) and, with a StatsWriter, prints a
// summary there.
func (a *Agent) selfMetricsLoop(ctx context.Context) {
	for {
		every, _ := a.statsSettings()
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case now := <-t.C:
			a.selfTick(now, false)
		}
	}
}

// selfTick sends one round of self-metrics through the outputs (when
// self_metrics is on) and, except for the final round, prints the summary
// to the StatsWriter. It is called by the stats loop and, once, by the
// engine after the outputs' final flush of samples and before they close
// (final).
func (a *Agent) selfTick(now time.Time, final bool) {
	a.selfMu.Lock()
	defer a.selfMu.Unlock()
	if a.selfPrev == nil {
		a.selfPrev, a.selfLast = map[int]uint64{}, a.started
	}
	_, send := a.statsSettings()
	st := a.eng.Stats()
	evs := SelfEvents(st, now, now.Sub(a.selfLast), a.selfPrev)
	bufs := BufferEvents(a.Buffers(), now)
	evs = append(evs, bufs...)
	detail := DetailEvents(a.Outputs(), now)
	evs = append(evs, detail...)
	a.mu.Lock()
	health := a.healthEvents(now, detail, st)
	a.mu.Unlock()
	evs = append(evs, health...)
	if r := a.attrib.Load(); r != nil {
		evs = append(evs, AttributionEvent(r.Stats(), now))
	}
	a.selfLast = now
	if send {
		for _, ev := range evs {
			a.eng.Emit(ev)
		}
	}
	if w := a.opts.StatsWriter; w != nil && !final {
		fmt.Fprint(w, FormatStats(st, append(append(detail, bufs...), health...)))
	}
}

// finalStats reports the outputs' counters once Run has ended, every
// output's final flush included: the summary on the StatsWriter under
// "gpusampler final stats:", a log line per output (a warning when it lost
// anything). For each output, published = delivered + dropped + failed +
// filtered.
func (a *Agent) finalStats() {
	st := a.eng.Stats()
	for _, o := range st.Outputs {
		level := slog.LevelInfo
		if o.Dropped+o.Failed > 0 {
			level = slog.LevelWarn
		}
		a.log.Log(context.Background(), level, "final output stats", "output", o.Name, "published", o.Published,
			"delivered", o.Delivered, "dropped", o.Dropped, "failed", o.Failed, "filtered", o.Filtered,
			"unflushed", o.Unflushed, "events_delivered", o.EventsDelivered, "events_dropped", o.EventsDropped)
	}
	var published uint64
	for _, d := range st.Devices {
		published += d.Published
	}
	a.mu.Lock()
	missed := map[string]uint64{}
	for name, p := range a.pending {
		missed[name] = p.missed(published)
	}
	a.mu.Unlock()
	a.mu.Lock()
	held := map[string]bool{}
	for name, p := range a.pending {
		held[name] = p.held != nil
	}
	a.mu.Unlock()
	for name, err := range a.NotStarted() {
		if held[name] {
			a.log.Warn("final output stats: output never started; what its disk buffer holds stays there for its next start",
				"output", name, "samples_missed", missed[name], "err", err)
			continue
		}
		a.log.Warn("final output stats: output never started; nothing was delivered to it", "output", name,
			"samples_missed", missed[name], "err", err)
	}
	if w := a.opts.StatsWriter; w != nil {
		now := time.Now()
		detail := append(DetailEvents(a.Outputs(), now), BufferEvents(a.Buffers(), now)...)
		a.mu.Lock()
		detail = append(detail, a.healthEvents(now, detail, st)...)
		a.mu.Unlock()
		fmt.Fprint(w, strings.Replace(FormatStats(st, detail), "gpusampler stats:", "gpusampler final stats:", 1))
	}
}

func intField(k string, v uint64) record.Field {
	return record.Field{Key: k, Value: float64(v), Int: true}
}

// SelfEvents turns an engine Stats snapshot into self-metrics events: one
// per output (published, read, delivered, dropped, filtered, failed,
// buffered = ring lag, write latency) and one per device (samples per NVML
// call, nothing-new drains, suspected losses, NVML calls/s over elapsed,
// newest sample age). prevCalls holds each device's call count at the last
// snapshot and is updated.
func SelfEvents(st sampler.Stats, now time.Time, elapsed time.Duration, prevCalls map[int]uint64) []record.Event {
	ns := now.UnixNano()
	var evs []record.Event
	for _, o := range st.Outputs {
		evs = append(evs, record.Event{Kind: record.EventSelf, Device: -1, StartNS: ns, EndNS: ns,
			Attrs: []record.Attr{{Key: "scope", Value: "output"}, {Key: "output", Value: o.Name}},
			Fields: []record.Field{intField("published", o.Published), intField("read", o.Read),
				intField("delivered", o.Delivered), intField("dropped", o.Dropped), intField("filtered", o.Filtered),
				intField("failed", o.Failed), intField("buffered", o.Lag), intField("writes", o.Writes),
				intField("write_errors", o.WriteErrors), intField("events_dropped", o.EventsDropped),
				intField("write_latency_last_ns", uint64(o.LastWriteLatency)),
				intField("write_latency_max_ns", uint64(o.MaxWriteLatency))}})
	}
	for _, d := range st.Devices {
		callsPerS := 0.0
		if elapsed > 0 {
			callsPerS = float64(d.Calls-prevCalls[d.Index]) / elapsed.Seconds()
		}
		prevCalls[d.Index] = d.Calls
		age := int64(0)
		if d.NewestNS > 0 {
			age = ns - d.NewestNS
		}
		fields := []record.Field{intField("published", d.Published), intField("drains", d.Drains),
			intField("nothing_new", d.NothingNew), intField("suspected_losses", d.SuspectedLosses),
			intField("lost_estimate", d.LostEstimate), intField("cursors_discarded", d.CursorsDiscarded),
			intField("held", d.Held), intField("read_errors", d.ReadErrors),
			intField("nvml_calls", d.Calls), {Key: "nvml_calls_per_s", Value: callsPerS},
			{Key: "samples_per_call", Value: d.SamplesPerCall}, {Key: "newest_sample_age_ns", Value: float64(age), Int: true},
			intField("min_drain_interval_ns", uint64(d.MinDrainInterval))}
		// Calls per driver function, cumulative (a sink's rate() gives
		// calls/s per function): nvml_calls_GetSamples, ...
		for _, fn := range slices.Sorted(maps.Keys(d.CallsByFunction)) {
			fields = append(fields, intField("nvml_calls_"+fieldName(fn), d.CallsByFunction[fn]))
		}
		attrs := []record.Attr{{Key: "scope", Value: "device"}, {Key: "gpu", Value: strconv.Itoa(d.Index)}, {Key: "uuid", Value: d.UUID}}
		if d.Simulated {
			// marked as every other record of a simulated device
			attrs = append(attrs, record.Attr{Key: "simulated", Value: "true"})
		}
		evs = append(evs, record.Event{Kind: record.EventSelf, Device: d.Index, StartNS: ns, EndNS: ns,
			Attrs: attrs, Fields: fields})
	}
	return evs
}

// AttributionEvent turns the attribution resolver's counters into a
// self-metrics event (scope "attribution"): refreshes, the device
// attribution changes they made, successes (refreshes in which every source
// on answered), failed kubelet lookups, job-mapping and container log
// directory reads, device IDs
// naming no sampled GPU, GPUs left without pod labels as shared, and the
// age of the last success (from the resolver's start before the first), so
// that an alert can see attribution going stale.
func AttributionEvent(st attribution.Stats, now time.Time) record.Event {
	ns := now.UnixNano()
	return record.Event{Kind: record.EventSelf, Device: -1, StartNS: ns, EndNS: ns,
		Attrs: []record.Attr{{Key: "scope", Value: "attribution"}},
		Fields: []record.Field{intField("refreshes", st.Refreshes), intField("changes", st.Changes),
			intField("successes", st.Successes), intField("kube_errors", st.KubeErrors),
			intField("mapping_errors", st.MappingErrors), intField("container_log_errors", st.ContainerLogErrors),
			intField("unknown_devices", st.UnknownDevices),
			intField("shared_devices", st.SharedDevices),
			{Key: "last_success_age_ns", Value: float64(st.LastSuccessAge(now)), Int: true}}}
}

// fieldName makes a driver function's name a field key: letters, digits
// and underscores ("GetSamples(size)" → "GetSamples_size").
func fieldName(fn string) string {
	b := []byte(fn)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return strings.TrimRight(string(b), "_")
}

// FormatStats renders a short human summary of st (gpusampler run --stats):
// a line per output — published, delivered (to the output, or to its
// buffer when it has one), dropped, filtered, failed, held (a batch the
// output refused for now, offered again) and unread (the ring's lag) —
// followed by the output's own non-zero counters from
// detail (DetailEvents) when it has any and its buffer's backlog (from a
// BufferEvents event in detail: records, bytes and the oldest record's
// age, which the output line's ring lag does not show), a line per output
// that has not started (from an "output_health" event in detail), and a
// line per device.
func FormatStats(st sampler.Stats, detail []record.Event) string {
	s := "gpusampler stats:\n"
	for _, ev := range detail {
		if attr(ev, "scope") == "output_health" && field(ev, "started") == 0 {
			s += fmt.Sprintf("  output %-12s NOT STARTED: %d failed start attempts; retrying with backoff (the log says why); %d samples published meanwhile never reach it",
				attr(ev, "output"), int64(field(ev, "start_failures")), int64(field(ev, "missed_not_started")))
			if field(ev, "held_not_started") != 0 {
				s += "; what is published now is held in its disk buffer until it starts"
			}
			s += "\n"
		}
	}
	for _, o := range st.Outputs {
		s += fmt.Sprintf("  output %-12s published %d delivered %d dropped %d filtered %d failed %d held %d unread %d write %v (max %v)\n",
			o.Name, o.Published, o.Delivered, o.Dropped, o.Filtered, o.Failed, o.Pending, o.Lag,
			o.LastWriteLatency.Round(time.Microsecond), o.MaxWriteLatency.Round(time.Microsecond))
		for _, ev := range detail {
			if attr(ev, "output") == o.Name && attr(ev, "scope") == "buffer" {
				s += strings.Repeat(" ", 22) + formatBuffer(ev) + "\n"
				continue
			}
			if attr(ev, "output") == o.Name && attr(ev, "scope") != "output_health" {
				if line := formatFields(ev.Fields); line != "" {
					s += strings.Repeat(" ", 22) + line + "\n"
				}
			}
		}
	}
	for _, d := range st.Devices {
		s += fmt.Sprintf("  gpu %-3d published %d samples/call %.1f nothing-new %d suspected-losses %d clock %v\n",
			d.Index, d.Published, d.SamplesPerCall, d.NothingNew, d.SuspectedLosses, d.Clock)
	}
	return s
}

// BufferEvents turns per-output buffer stats into self-metrics events (scope
// "buffer"): buffered records and bytes, the oldest record's age, batches
// and records delivered to the sink, replayed, retries, dropped records by
// reason, dropped corrupt and malformed batches, and for a disk buffer
// whether it is degraded (holding new batches in memory because the disk
// refuses writes), the records it holds in memory, its failed disk writes
// and the bytes its files use.
func BufferEvents(bufs map[string]*buffer.Buffer, now time.Time) []record.Event {
	ns := now.UnixNano()
	var evs []record.Event
	for _, name := range slices.Sorted(maps.Keys(bufs)) {
		s := bufs[name].Stats()
		evs = append(evs, record.Event{Kind: record.EventSelf, Device: -1, StartNS: ns, EndNS: ns,
			Attrs: []record.Attr{{Key: "scope", Value: "buffer"}, {Key: "output", Value: name}, {Key: "buffer", Value: s.Kind}},
			Fields: []record.Field{intField("buffered_records", uint64(s.BufferedRecords)),
				intField("buffered_bytes", uint64(s.BufferedBytes)),
				{Key: "oldest_age_seconds", Value: s.OldestAge.Seconds()},
				intField("delivered_batches", s.Delivered), intField("delivered_records", s.DeliveredRecords),
				intField("replayed_batches", s.Replayed),
				intField("retries", s.Retries),
				intField("dropped_cap", s.DroppedRecords.Cap), intField("dropped_malformed", s.DroppedRecords.Malformed),
				intField("dropped_corrupt", s.DroppedRecords.Corrupt), intField("dropped_shutdown", s.DroppedRecords.Shutdown),
				intField("dropped_unmapped", s.DroppedRecords.Unmapped),
				// Batches, for losses whose record count is unknown (a
				// torn region of a disk segment).
				intField("dropped_corrupt_batches", s.DroppedBatches.Corrupt),
				intField("dropped_malformed_batches", s.DroppedBatches.Malformed),
				// Disk: 1 while writes to disk fail and new batches are
				// held in memory (held_records of the backlog).
				intField("disk_degraded", b2u(s.Degraded)), intField("held_records", uint64(s.HeldRecords)),
				intField("disk_errors", s.DiskErrors), intField("disk_bytes", uint64(s.DiskBytes))}})
	}
	return evs
}

// DetailEvents turns the outputs' own counters (record.StatsReporter:
// HTTP requests and retries, NATS messages and acks, plugin restarts, ...)
// into self-metrics events of scope "output_detail", one per output that
// reports any, in name order.
func DetailEvents(outs map[string]record.Output, now time.Time) []record.Event {
	ns := now.UnixNano()
	var evs []record.Event
	for _, name := range slices.Sorted(maps.Keys(outs)) {
		fields := record.ReportStats(outs[name], nil)
		if len(fields) == 0 {
			continue
		}
		evs = append(evs, record.Event{Kind: record.EventSelf, Device: -1, StartNS: ns, EndNS: ns,
			Attrs:  []record.Attr{{Key: "scope", Value: "output_detail"}, {Key: "output", Value: name}},
			Fields: fields})
	}
	return evs
}

// formatBuffer renders a buffer's self-metrics (BufferEvents): "buffer
// disk backlog 13536 records 201.3 KB oldest 20.1s", then its non-zero
// counters.
func formatBuffer(ev record.Event) string {
	var records, bytes, age float64
	var rest []record.Field
	for _, f := range ev.Fields {
		switch f.Key {
		case "buffered_records":
			records = f.Value
		case "buffered_bytes":
			bytes = f.Value
		case "oldest_age_seconds":
			age = f.Value
		default:
			rest = append(rest, f)
		}
	}
	s := fmt.Sprintf("buffer %s backlog %d records %.1f KB oldest %v", attr(ev, "buffer"), int64(records), bytes/1e3,
		time.Duration(age*float64(time.Second)).Round(100*time.Millisecond))
	if line := formatFields(rest); line != "" {
		s += " " + line
	}
	return s
}

// field returns the value of ev's field key (0 when absent).
func field(ev record.Event, key string) float64 { return record.FieldValue(ev.Fields, key) }

func attr(ev record.Event, key string) string {
	for _, a := range ev.Attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return ""
}

// formatFields renders the non-zero fields as "key=value ..." ("" when all
// are zero).
func formatFields(fs []record.Field) string {
	var b strings.Builder
	for _, f := range fs {
		if f.Value == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if f.Int {
			fmt.Fprintf(&b, "%s=%d", f.Key, int64(f.Value))
		} else {
			fmt.Fprintf(&b, "%s=%g", f.Key, f.Value)
		}
	}
	return b.String()
}
