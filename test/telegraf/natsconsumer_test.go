package telegraf_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/config"
	"github.com/influxdata/telegraf/plugins/inputs/nats_consumer"
	"github.com/influxdata/telegraf/plugins/parsers/influx"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// trackingAccumulator is the part of Telegraf's agent that
// inputs.nats_consumer needs: every metric group it adds is reported
// delivered at once (as when every Telegraf output took it).
type trackingAccumulator struct {
	*accumulator
	next      atomic.Uint64
	delivered chan telegraf.DeliveryInfo
}

type delivery struct{ id telegraf.TrackingID }

func (d delivery) ID() telegraf.TrackingID { return d.id }
func (delivery) Delivered() bool           { return true }

func (a *trackingAccumulator) AddTrackingMetric(m telegraf.Metric) telegraf.TrackingID {
	return a.AddTrackingMetricGroup([]telegraf.Metric{m})
}

func (a *trackingAccumulator) AddTrackingMetricGroup(group []telegraf.Metric) telegraf.TrackingID {
	id := telegraf.TrackingID(a.next.Add(1))
	for _, m := range group {
		a.AddMetric(m)
	}
	a.delivered <- delivery{id}
	return id
}

func (a *trackingAccumulator) Delivered() <-chan telegraf.DeliveryInfo { return a.delivered }

// trackingInput wraps the accumulator handed to Start so that
// WithTracking returns the tracking one.
type trackingInput struct{ *accumulator }

func (t trackingInput) WithTracking(n int) telegraf.TrackingAccumulator {
	return &trackingAccumulator{accumulator: t.accumulator, delivered: make(chan telegraf.DeliveryInfo, n)}
}

// Telegraf's inputs.nats_consumer, configured as its sample.conf shows
// with the influx data format, subscribed to gpusampler's subjects,
// receives exactly what a stdout twin of the publishing node printed: one
// node with two outputs, [[outputs.nats]] (encoding = "influx") and
// [[outputs.stdout]] (format = "influx"); every line Telegraf's parser
// makes of the stdout text is a point the consumer received, and no other.
func TestNATSConsumerReceivesWhatStdoutPrinted(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	defer s.Shutdown()

	// The block outputs/nats/README.md shows, loaded by Telegraf's own
	// config loader; tagexclude drops the subject tag nats_consumer adds.
	tc := config.NewConfig()
	if err := tc.LoadConfigData([]byte(fmt.Sprintf(`
[agent]
  omit_hostname = true
[[inputs.nats_consumer]]
  servers = [%q]
  subjects = ["gpusampler.>"]
  queue_group = "telegraf"
  data_format = "influx"
  tagexclude = ["subject"]
`, s.ClientURL())), config.EmptySourcePath); err != nil {
		t.Fatal(err)
	}
	if len(tc.Inputs) != 1 {
		t.Fatalf("%d inputs loaded", len(tc.Inputs))
	}
	running := tc.Inputs[0]
	nc, ok := running.Input.(*nats_consumer.NatsConsumer)
	if !ok {
		t.Fatalf("input %T, want nats_consumer", running.Input)
	}
	nc.Log = testLogger{t}
	parser := &influx.Parser{}
	if err := parser.Init(); err != nil {
		t.Fatal(err)
	}
	acc := &accumulator{}
	if err := nc.Start(trackingInput{acc}); err != nil {
		t.Fatal(err)
	}
	defer nc.Stop()
	// Core NATS delivers only to subscriptions the server has: wait until
	// it has the consumer's before the node publishes.
	waitFor(t, liveness, "nats_consumer's subscription", func() bool {
		return s.GlobalAccount().SubscriptionInterest("gpusampler.node1.0.power")
	})

	// The node.
	cfgText := fmt.Sprintf(`
[agent]
hostname = "node1"

[[outputs.nats]]
servers = [%q]
encoding = "influx"

[[outputs.stdout]]
format = "influx"
`, s.ClientURL())
	reg := registry.Builtin()
	cfg, err := appconfig.Parse("node1.toml", []byte(cfgText), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	src, err := sim.New(sim.Options{GPUs: 2, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	var stdout lockedBuffer
	a, err := agent.New(src, cfg, agent.Options{Registry: reg, Stdout: &stdout, Hostname: "node1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	// Run until the twin printed a few hundred lines, then stop: the final
	// flush reaches both outputs.
	waitFor(t, liveness, "300 lines on stdout", func() bool { return stdout.lines() >= 300 })
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	printed, err := parser.Parse(stdout.bytes())
	if err != nil {
		t.Fatalf("stdout twin: %v", err)
	}
	want := canonical(printed)
	waitFor(t, liveness, fmt.Sprintf("%d points from nats_consumer", len(want)), func() bool {
		ms, _ := acc.Snapshot()
		n := 0
		for _, m := range ms {
			n += len(m.FieldList())
		}
		return n >= len(want)
	})
	received, errs := acc.Snapshot()
	if len(errs) > 0 {
		t.Fatalf("nats_consumer errors: %v", errs)
	}
	// nats_consumer tags every metric with the subject it came on: the
	// one tag the twin cannot print, the node's, one per metric group, so
	// a GPU's fields land in as many series as it has groups. Telegraf's
	// tagexclude (applied by the running input, as the agent does) drops it.
	subjects := map[string]bool{}
	kept := received[:0]
	for _, m := range received {
		subj, _ := m.GetTag("subject")
		if !strings.HasPrefix(subj, "gpusampler.node1.") {
			t.Fatalf("metric on subject %q: %v", subj, m)
		}
		subjects[subj] = true
		m = running.MakeMetric(m)
		if m == nil {
			t.Fatal("tagexclude dropped a whole metric")
		}
		if _, ok := m.GetTag("subject"); ok {
			t.Fatalf("tagexclude = [\"subject\"] left the subject tag: %v", m)
		}
		kept = append(kept, m)
	}
	received = kept
	if len(subjects) < 2 {
		t.Errorf("subjects %v: want several (one per metric group)", slices.Sorted(maps.Keys(subjects)))
	}
	got := canonical(received)
	if !slices.Equal(got, want) {
		t.Fatalf("nats_consumer received %d points, the stdout twin printed %d; only received: %v; only printed: %v",
			len(got), len(want), minus(got, want), minus(want, got))
	}
	names := map[string]bool{}
	for _, m := range printed {
		names[m.Name()] = true
	}
	if !names["nvidia_smi"] {
		t.Fatalf("no nvidia_smi metrics among %v", slices.Sorted(maps.Keys(names)))
	}
	t.Logf("%d points (%v) identical on both sides", len(got), slices.Sorted(maps.Keys(names)))
}

// canonical renders every field of every metric as one whole point —
// name, every tag, the field with its value and Go type, the timestamp —
// and sorts them. Points, not lines: stdout writes a GPU's fields of one
// timestamp on one line, NATS splits them by subject (one per metric
// group), and line protocol makes those the same points.
func canonical(ms []telegraf.Metric) []string {
	var out []string
	for _, m := range ms {
		var b strings.Builder
		b.WriteString(m.Name())
		tags := m.Tags()
		for _, k := range slices.Sorted(maps.Keys(tags)) {
			fmt.Fprintf(&b, ",%s=%s", k, tags[k])
		}
		series := b.String()
		for k, v := range m.Fields() {
			out = append(out, fmt.Sprintf("%s %s=%#v(%T) %d", series, k, v, v, m.Time().UnixNano()))
		}
	}
	slices.Sort(out)
	return out
}

// minus returns the lines of a (sorted) that b (sorted) lacks, counting
// repeats, at most 10.
func minus(a, b []string) []string {
	var out []string
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j < len(b) && b[j] == x {
			j++
			continue
		}
		if out = append(out, x); len(out) == 10 {
			break
		}
	}
	return out
}

// lockedBuffer is the twin's stdout.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Count(l.b.Bytes(), []byte("\n"))
}

func (l *lockedBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}
