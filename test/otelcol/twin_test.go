package otelcol_test

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/accum"
)

// twinSamples is how many samples the twin prints before the node stops
// (a few seconds of two simulated GPUs; several aggregate windows).
const twinSamples = 2000

// otelBlock is the [[outputs.opentelemetry]] block for the collector c
// over protocol, with extra keys.
func otelBlock(c *collector, protocol, extra string) string {
	addr := c.GRPC
	if protocol == "http/protobuf" {
		addr = c.HTTP
	}
	return fmt.Sprintf("[[outputs.opentelemetry]]\n  name = \"otel\"\n  protocol = %q\n  endpoint = \"http://%s\"\n%s\n", protocol, addr, extra)
}

// twinBlock is the stdout twin: every record as a json line, unbuffered,
// raw.
const twinBlock = "[[outputs.stdout]]\n  name = \"twin\"\n  format = \"json\"\n\n"

// isSample reports whether a collector point is a driver sample's (not an
// event, a process's or a self-metric).
func isSample(p point) bool {
	return p.Name != "gpusampler.event" && !strings.HasPrefix(p.Name, "gpusampler.self.") &&
		!strings.HasPrefix(p.Name, "gpusampler.process.")
}

// checkResources: every point's resource names the host, the service and
// its version (the binary's, from the outputs child).
func checkResources(t *testing.T, ps []point) {
	t.Helper()
	for _, p := range ps {
		if p.Resource["host.name"] != "node1" || p.Resource["service.name"] != "gpusampler" ||
			p.Resource["service.version"] != testVersion {
			t.Fatalf("%s: resource %v, want host.name=node1, service.name=gpusampler and service.version=%s",
				p.key(), p.Resource, testVersion)
		}
	}
}

// instrumentKind is the point kind (flatten's) of an instrument's raw
// points.
func instrumentKind(in catalog.Instrument) string {
	switch in {
	case catalog.OTelCounter:
		return "sum-Cumulative-monotonic"
	case catalog.OTelUpDownCounter:
		return "sum-Cumulative"
	}
	return "gauge"
}

// A real OpenTelemetry Collector, its OTLP receiver on gRPC and on HTTP,
// receives every sample that a stdout twin of the same gpusampler run
// printed, point by point: the metric's OpenTelemetry name, the device's
// hw.* and gpusampler.* attributes, the driver timestamp, the value in
// OpenTelemetry units; raw (every sample a point) and aggregated (each
// window's exponential histogram holds the count, sum, min and max of
// exactly the twin's samples in that window, and its buckets are those
// samples binned directly at its scale).
func TestTwinIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpusampler and a collector")
	}
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-")+"/raw", func(t *testing.T) {
			c := startCollector(t)
			n := startNode(t, twinBlock+otelBlock(c, protocol, ""))
			runUntilSamples(t, n)
			tw := n.readTwin()
			ps := flatten(c.Sink.all())
			checkResources(t, ps)
			checkRaw(t, tw, ps)
		})
		t.Run(strings.ReplaceAll(protocol, "/", "-")+"/aggregate", func(t *testing.T) {
			c := startCollector(t)
			n := startNode(t, twinBlock+otelBlock(c, protocol, `  aggregate = "1s"`))
			runUntilSamples(t, n)
			tw := n.readTwin()
			ps := flatten(c.Sink.all())
			checkResources(t, ps)
			checkAggregate(t, tw, ps, time.Second, uint64(n.finalStat("otel", "aggregate_late")))
		})
	}
}

// runUntilSamples waits until the twin printed twinSamples samples, then
// stops the node (its outputs flush).
func runUntilSamples(t *testing.T, n *node) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d samples from the twin", twinSamples), func() bool {
		n.running()
		return n.Samples() >= twinSamples
	})
	n.Stop()
}

// checkRaw: the collector's sample points are the twin's samples, one to
// one; counters' start times precede their points.
func checkRaw(t *testing.T, tw twin, ps []point) {
	t.Helper()
	var want, got []string
	names := map[string]bool{}
	for _, s := range tw.samples {
		e := expect(t, tw, s)
		want = append(want, fmt.Sprintf("%s %s = %s", e.key(), instrumentKind(e.naming.Instrument), e.Value))
	}
	for _, p := range ps {
		if !isSample(p) {
			continue
		}
		p = withoutModel(t, p)
		names[p.Name] = true
		got = append(got, fmt.Sprintf("%s %s = %s", p.key(), p.Kind, p.Value))
		if strings.HasPrefix(p.Kind, "sum-") && (p.StartNS <= 0 || p.StartNS > p.TimeNS) {
			t.Errorf("%s: start time %d, want a time at or before the point's", p.key(), p.StartNS)
		}
	}
	if missing, extra := diff(want, got); len(missing)+len(extra) > 0 {
		t.Fatalf("the twin printed %d samples, the collector holds %d sample points;\nonly printed: %s\nonly received: %s",
			len(want), len(got), strings.Join(missing, "\n\t"), strings.Join(extra, "\n\t"))
	}
	// The conventions' names, beside the table the comparison used.
	for _, name := range []string{"hw.power", "hw.gpu.utilization", "hw.gpu.memory.usage", "hw.energy", "gpusampler.clocks_current_sm"} {
		if !names[name] {
			t.Errorf("no %s points among %v", name, slices.Sorted(func(yield func(string) bool) {
				for k := range names {
					if !yield(k) {
						return
					}
				}
			}))
		}
	}
	t.Logf("%d samples, identical on both sides (%d metric names)", len(want), len(names))
}

// window is one aggregate point as received.
type window struct {
	point
	seen uint64 // twin samples that fell in it
}

// checkAggregate: with aggregate = interval, each gauge metric's window is
// an exponential histogram point whose count, sum, min and max are those of
// the twin's samples (raw) of that series in [start, end), and whose
// buckets are those samples binned at its scale; every twin sample is in
// exactly one window. A counter's window is its cumulative sum at the
// window's end: the twin's last sample in the window.
//
// late is the output's aggregate_late: samples that came after their
// window was emitted (a series' samples arrive in time order, so they are
// a window's newest). A window may lack its newest samples, exactly as
// many in all as late says; its count, sum, min and max are then those of
// its samples before them.
func checkAggregate(t *testing.T, tw twin, ps []point, interval time.Duration, late uint64) {
	t.Helper()
	series := func(name string, attrs map[string]string) string {
		a := make(map[string]string, len(attrs))
		for k, v := range attrs {
			if k != "gpusampler.point_read" { // a window mixes point reads and buffer samples
				a[k] = v
			}
		}
		return name + "{" + attrString(a) + "}"
	}
	hists := map[string][]*window{}    // series -> histogram windows
	counters := map[string][]*window{} // series -> counter window ends
	for _, p := range ps {
		if !isSample(p) {
			continue
		}
		p = withoutModel(t, p)
		k := series(p.Name, p.Attrs)
		switch {
		case strings.HasPrefix(p.Kind, "histogram-") || strings.HasPrefix(p.Kind, "exphistogram-"):
			if !strings.HasSuffix(p.Kind, "Delta") {
				t.Errorf("%s: %s, want delta temporality (each window stands alone)", k, p.Kind)
			}
			if p.TimeNS-p.StartNS != int64(interval) {
				t.Errorf("%s: window [%d, %d), want %v long", k, p.StartNS, p.TimeNS, interval)
			}
			hists[k] = append(hists[k], &window{point: p})
		case strings.HasPrefix(p.Kind, "sum-"):
			counters[k] = append(counters[k], &window{point: p})
		default:
			t.Errorf("%s: a %s point in aggregate mode", k, p.Kind)
		}
	}
	type val struct {
		t int64
		v float64
	}
	gauges := map[string][]val{}
	counted := map[string][]val{}
	counterTypes := map[string]catalog.ValueType{}
	for _, s := range tw.samples {
		e := expect(t, tw, s)
		k := series(e.Name, e.Attrs)
		v := val{s.Time, s.Value * e.naming.Scale}
		if e.naming.Instrument == catalog.OTelGauge {
			gauges[k] = append(gauges[k], v)
		} else {
			counted[k] = append(counted[k], v)
			counterTypes[k] = e.naming.Type
		}
	}
	var problems []string
	windows, samples := 0, 0
	var missed uint64 // samples the twin printed that no window holds
	for k, vs := range gauges {
		ws := hists[k]
		sort.Slice(ws, func(i, j int) bool { return ws[i].StartNS < ws[j].StartNS })
		for i := 1; i < len(ws); i++ {
			if ws[i].StartNS < ws[i-1].TimeNS {
				problems = append(problems, fmt.Sprintf("%s: windows overlap: [%d,%d) and [%d,%d)", k, ws[i-1].StartNS, ws[i-1].TimeNS, ws[i].StartNS, ws[i].TimeNS))
			}
		}
		stats := make([]struct {
			count, printed uint64
			sum, min, max  float64
			vals           []float64
		}, len(ws))
		slices.SortStableFunc(vs, func(a, b val) int { return cmp.Compare(a.t, b.t) })
		for _, v := range vs {
			i := sort.Search(len(ws), func(i int) bool { return ws[i].TimeNS > v.t })
			if i == len(ws) || v.t < ws[i].StartNS {
				// A window that took no sample before its newest came late
				// is never emitted.
				missed++
				continue
			}
			st := &stats[i]
			st.printed++
			if st.count == ws[i].Count {
				missed++ // one of the window's newest, late
				continue
			}
			if st.count == 0 {
				st.min, st.max = v.v, v.v
			}
			st.min, st.max = min(st.min, v.v), max(st.max, v.v)
			st.sum += v.v
			st.vals = append(st.vals, v.v)
			st.count++
			samples++
		}
		for i, w := range ws {
			st := stats[i]
			windows++
			switch {
			case st.count != w.Count:
				problems = append(problems, fmt.Sprintf("%s [%d,%d): count %d, the twin printed %d samples in it", k, w.StartNS, w.TimeNS, w.Count, st.printed))
			case !w.HasMin || !w.HasMax || !w.HasSum:
				problems = append(problems, fmt.Sprintf("%s [%d,%d): no min, max or sum", k, w.StartNS, w.TimeNS))
			case w.Min != st.min || w.Max != st.max:
				problems = append(problems, fmt.Sprintf("%s [%d,%d): min %v max %v, the twin's %v and %v", k, w.StartNS, w.TimeNS, w.Min, w.Max, st.min, st.max))
			case math.Abs(w.Sum-st.sum) > 1e-9*math.Max(1, math.Abs(st.sum)):
				problems = append(problems, fmt.Sprintf("%s [%d,%d): sum %v, the twin's samples sum to %v", k, w.StartNS, w.TimeNS, w.Sum, st.sum))
			case w.Exp == nil:
				// No crash here: every window carries its distribution.
				problems = append(problems, fmt.Sprintf("%s [%d,%d): a %s point, want an exponential histogram", k, w.StartNS, w.TimeNS, w.Kind))
			default:
				if d := expDiff(w.Exp, st.vals); d != "" {
					problems = append(problems, fmt.Sprintf("%s [%d,%d): %s", k, w.StartNS, w.TimeNS, d))
				}
			}
		}
		delete(hists, k)
	}
	for k, ws := range hists {
		problems = append(problems, fmt.Sprintf("%s: %d windows of a series the twin printed no sample of", k, len(ws)))
	}
	for k, vs := range counted {
		ends := map[int64]val{} // window end -> the window's last sample
		for _, v := range vs {
			end := (v.t/int64(interval) + 1) * int64(interval)
			if last, ok := ends[end]; !ok || v.t >= last.t {
				ends[end] = v
			}
		}
		got := map[int64]string{}
		for _, w := range counters[k] {
			got[w.TimeNS] = w.Value
		}
		for end, last := range ends {
			v, ok := got[end]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: no point at the end of window %d", k, end))
				continue
			}
			if want := valueString(last.v, counterTypes[k]); v != want {
				problems = append(problems, fmt.Sprintf("%s @%d = %s, the twin's last sample of the window %s", k, end, v, want))
			}
			delete(got, end)
		}
		for end := range got {
			problems = append(problems, fmt.Sprintf("%s: a point at %d, a window the twin printed no sample in", k, end))
		}
		windows += len(ends)
		delete(counters, k)
	}
	for k := range counters {
		problems = append(problems, fmt.Sprintf("%s: counter points of a series the twin printed no sample of", k))
	}
	if missed != late {
		problems = append(problems, fmt.Sprintf("%d of the twin's samples are in no window, the output counted %d late", missed, late))
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		t.Fatalf("%d problems (of %d windows, %d samples):\n\t%s",
			len(problems), windows, len(tw.samples), strings.Join(problems[:min(len(problems), 20)], "\n\t"))
	}
	if samples == 0 || windows == 0 {
		t.Fatalf("nothing compared: %d gauge samples, %d windows", samples, windows)
	}
	t.Logf("%d windows over %d series hold exactly the twin's %d samples (%d of them late, counted)", windows, len(gauges)+len(counted), len(tw.samples), late)
}

// expDiff compares an exponential histogram point's buckets with the twin's
// values of its window, each binned directly at the point's scale: "" when
// they agree.
func expDiff(e *expBuckets, vals []float64) string {
	var zeros uint64
	pos, neg := map[int32]uint64{}, map[int32]uint64{}
	for _, v := range vals {
		switch {
		case v == 0:
			zeros++
		case v > 0:
			pos[accum.ExpIndex(v, e.Scale)]++
		default:
			neg[accum.ExpIndex(-v, e.Scale)]++
		}
	}
	got := func(off int32, counts []uint64) map[int32]uint64 {
		m := map[int32]uint64{}
		for i, c := range counts {
			if c > 0 {
				m[off+int32(i)] = c
			}
		}
		return m
	}
	gp, gn := got(e.PosOffset, e.Pos), got(e.NegOffset, e.Neg)
	if e.ZeroCount != zeros || !maps.Equal(gp, pos) || !maps.Equal(gn, neg) {
		return fmt.Sprintf("buckets at scale %d: zeros %d, positive %v, negative %v; the twin's samples bin to zeros %d, positive %v, negative %v",
			e.Scale, e.ZeroCount, gp, gn, zeros, pos, neg)
	}
	return ""
}
