package conservation_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/internal/natstest"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// The NATS cells' deadline budget, short so that the outage outlasts it
// quickly (see the README's deadline table): write_timeout 2s, so the
// host's call to the shared outputs process gets 1.6s (less a fifth), the
// output's Write 1.28s. The disk cells set ack_timeout 1s (within that);
// the memory cells keep the default 5s, as a user who only turned
// JetStream on does: then the Write's deadline bounds the wait for acks.
const (
	natsWriteTimeout = "2s"
	natsCallTimeout  = 1600 * time.Millisecond
	natsAckTimeout   = "1s"
	// natsOutagePhases are the phases published while nats-server is down.
	natsOutagePhases = 3
	// natsOutageRetries is how many failed Writes each NATS cell must have
	// seen since the kill before the server comes back: every failed Write
	// waited for its acks until its deadline or ack_timeout, so the outage
	// lasts several call timeouts.
	natsOutageRetries = 3
)

// natsCell is one NATS output of the JetStream cell: in the shared
// outputs process (hop "shared", as `gpusampler run` runs the network
// outputs) or in process, behind a memory or disk buffer, raw or
// aggregating.
type natsCell struct{ hop, buf, mode string }

func (c natsCell) name() string { return "nats-" + c.buf + "-" + c.mode }

// stream is the cell's JetStream stream; prefix its subjects' first token.
func (c natsCell) stream() string { return strings.ToUpper("C_" + c.buf + "_" + c.mode) }
func (c natsCell) prefix() string { return "c_" + c.buf + "_" + c.mode }

// natsEnv is one run of the JetStream cells: their config, the witness's
// record file, what the stats writer received.
type natsEnv struct {
	t     *testing.T
	dir   string
	hop   string
	cells []natsCell
	url   string
	stats syncBuffer
}

// syncBuffer collects what the agent's stats writer prints.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

func (e *natsEnv) witnessFile() string { return filepath.Join(e.dir, "witness.jsonl") }

func (e *natsEnv) config() string {
	var b strings.Builder
	fmt.Fprintf(&b, `[agent]
  flush_interval = "20ms"
  stats_interval = "1s"
  self_metrics = true
  state_dir = %q

[sampler]
  backend = "sim"
  drain_interval = "20ms"
  processes = false

[[outputs.record]]
  name = "witness"
  file = %q
`, filepath.Join(e.dir, "state"), e.witnessFile())
	for _, c := range e.cells {
		fmt.Fprintf(&b, `
[[outputs.nats]]
  name = %q
  servers = [%q]
  encoding = "protobuf"
  subject = "%s.{host}.{gpu}.{group}"
  event_subject = "%s.{host}.{gpu}.events"
  self_subject = "%s.{host}.self"
  reconnect_wait = "50ms"
  jetstream = true
  stream = %q
  create_stream = true
  write_timeout = %q
  flush_interval = "20ms"
  buffer = %q
  retry_initial = "10ms"
  retry_max = "100ms"
  buffer_close_timeout = "1m"
`, c.name(), e.url, c.prefix(), c.prefix(), c.prefix(), c.stream(), natsWriteTimeout, c.buf)
		if c.buf == "disk" {
			fmt.Fprintf(&b, "  ack_timeout = %q\n  buffer_dir = %q\n  buffer_fsync_interval = \"50ms\"\n",
				natsAckTimeout, filepath.Join(e.dir, c.name()+".buf"))
		}
		if c.mode == "agg" {
			fmt.Fprintf(&b, "  aggregate = %q\n", phaseSpan)
		}
	}
	return b.String()
}

// registry builds the NATS outputs in process, or (hop "shared") as
// instances in one recordplugin process serving the nats kind, the way
// `gpusampler plugin serve` serves the built-in network outputs.
func (e *natsEnv) registry() *outputs.Registry {
	reg := outputs.NewRegistry(conservation.RecordKind(), nats.Kind())
	if e.hop == "inproc" {
		return reg
	}
	return plugins.HostRegistry(reg, plugins.HostOptions{Executable: pluginPath, Shared: true,
		Args: func(string) []string { return []string{"shared"} }})
}

func (e *natsEnv) start(src *conservation.Script) *running {
	t := e.t
	t.Helper()
	cfg, err := appconfig.Parse(filepath.Join(e.dir, "gpusampler.toml"), []byte(e.config()), appconfig.Options{Registry: e.registry()})
	if err != nil {
		t.Fatal(err)
	}
	tw := &testWriter{t: t}
	log := slog.New(slog.NewTextHandler(tw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := agent.New(src, cfg, agent.Options{Registry: e.registry(), Hostname: "matrix", Logger: log, StatsWriter: &e.stats})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{e: &env{t: t, dir: e.dir}, src: src, a: a, cancel: cancel, done: make(chan error, 1),
		retired: map[string]*counts{}, problems: map[string][]string{}}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		if !r.stopped {
			cancel()
			select {
			case <-r.done:
			case <-time.After(settleWait):
			}
		}
		tw.mu.Lock()
		tw.done = true
		tw.mu.Unlock()
	})
	return r
}

// natsPhase releases the next phase, waits until the engine published it
// and emits one custom event (which every cell must also hold once).
func (r *running) natsPhase() {
	r.e.t.Helper()
	n := r.releasePhase()
	r.a.Engine().Emit(record.Event{Kind: "matrix_phase", Device: n % 2, StartNS: r.src.Start.UnixNano() + int64(n),
		EndNS: r.src.Start.UnixNano() + int64(n) + 5, Message: fmt.Sprintf("phase %d released", n),
		Attrs: []record.Attr{{Key: "phase", Value: strconv.Itoa(n)}}})
}

// natsDrained waits until every NATS cell's pump has handed on all that
// was published and its buffer has delivered everything it took.
func (r *running) natsDrained(cells []natsCell) bool {
	return waitFor(func() bool {
		var published uint64
		for _, d := range r.a.Engine().Stats().Devices {
			published += d.Published
		}
		outs := map[string]bool{}
		for _, o := range r.a.Engine().Stats().Outputs {
			if o.Lag > 0 || o.Pending > 0 || o.Delivered < published {
				return false
			}
			outs[o.Name] = true
		}
		for _, c := range cells {
			if !outs[c.name()] || r.a.Buffers()[c.name()].Stats().BufferedBatches > 0 {
				return false
			}
		}
		return true
	})
}

// TestNATSJetStreamRestartIntegration is the conservation matrix's NATS
// cell: JetStream outputs (memory and disk buffers, raw and aggregating),
// in the shared outputs process and in process, while nats-server is
// killed for longer than the host's call timeout and then started again on
// the same port and store. Every sample (aggregating: every summary of the
// published samples) and every custom event is in its stream exactly
// once; the final stats count what the stream holds (delivered samples or
// emitted summaries, the output's stored messages); the outage is
// counted (buffer retries, disconnects, reconnects); no output is taken
// for wedged and no process is restarted.
func TestNATSJetStreamRestartIntegration(t *testing.T) {
	for _, hop := range []string{"shared", "inproc"} {
		t.Run(hop, func(t *testing.T) { natsJetStreamRestart(t, hop) })
	}
}

func natsJetStreamRestart(t *testing.T, hop string) {
	storeDir := t.TempDir()
	srv := natstest.Start(t, natstest.WithStoreDir(storeDir))
	e := &natsEnv{t: t, dir: t.TempDir(), hop: hop, url: srv.ClientURL()}
	for _, b := range []string{"memory", "disk"} {
		for _, m := range modes {
			e.cells = append(e.cells, natsCell{hop, b, m})
		}
	}
	src := newScript()
	r := e.start(src)
	r.natsPhase()
	r.natsPhase()
	if !r.natsDrained(e.cells) {
		t.Fatalf("before the outage: not every NATS cell delivered: %+v", r.a.Engine().Stats().Outputs)
	}

	retries := map[string]uint64{}
	for _, c := range e.cells {
		retries[c.name()] = r.a.Buffers()[c.name()].Stats().Retries
	}
	srv.Kill()
	for range natsOutagePhases {
		r.natsPhase()
	}
	// Down until every cell failed natsOutageRetries Writes (each waited
	// for its acks up to its deadline) and at least three call timeouts
	// passed: a condition on the scenario, not an assertion on speed.
	down := time.Now()
	if !waitFor(func() bool {
		if time.Since(down) < 3*natsCallTimeout {
			return false
		}
		for _, c := range e.cells {
			if r.a.Buffers()[c.name()].Stats().Retries < retries[c.name()]+natsOutageRetries {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the NATS cells did not fail their writes while nats-server was down")
	}
	t.Logf("nats-server down for %v", time.Since(down).Round(100*time.Millisecond))
	srv = natstest.Start(t, natstest.WithPort(srv.Port()), natstest.WithStoreDir(storeDir))
	r.natsPhase()
	r.natsPhase()
	if !r.natsDrained(e.cells) {
		t.Fatalf("after the outage: not every NATS cell delivered: %+v", r.a.Engine().Stats().Outputs)
	}
	r.stop()

	witness, torn, err := conservation.ReadFile(e.witnessFile())
	if err != nil || torn > 0 {
		t.Fatalf("witness: %v (%d torn lines)", err, torn)
	}
	final := parseFinalStats(t, e.stats.String())
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range e.cells {
		t.Run(c.name(), func(t *testing.T) { checkNATSCell(t, js, c, witness, final[c.name()]) })
	}
}

// checkNATSCell compares one cell's stream with the witness and with the
// cell's final stats.
func checkNATSCell(t *testing.T, js jetstream.JetStream, c natsCell, witness []conservation.Batch, st map[string]uint64) {
	got, msgs := readStream(t, js, c.stream())
	want := bag{}
	var samples []record.Sample
	for _, b := range witness {
		samples = append(samples, b.Samples...)
		for _, ev := range b.Events {
			if ev.Kind == "matrix_phase" {
				want.add("event", ev)
			}
		}
	}
	if c.mode == "agg" {
		for _, s := range summarize(samples, phaseSpan) {
			want.add("summary", s)
		}
	} else {
		for _, s := range samples {
			want.add("sample", s)
		}
	}
	have := bag{}
	for _, b := range got {
		for _, s := range b.Samples {
			have.add("sample", s)
		}
		for _, s := range b.Summaries {
			have.add("summary", s)
		}
		for _, ev := range b.Events {
			if ev.Kind == "matrix_phase" {
				have.add("event", ev)
			}
		}
	}
	missing, extra := want.minus(have), have.minus(want)
	if len(missing)+len(extra) > 0 {
		t.Errorf("stream %s: %d records missing %v, %d extra (duplicates or altered) %v;\n\tmissing: %s\n\textra: %s",
			c.stream(), missing.len(), missing.byKind(), extra.len(), extra.byKind(), missing.sample(4), extra.sample(4))
	}
	if st == nil {
		t.Fatalf("no final stats for %s", c.name())
	}
	t.Logf("stream %s: %d messages, %d samples, %d summaries; final stats %v", c.stream(), msgs,
		have.byKind()["sample"], have.byKind()["summary"], st)

	// The final counters equal what the stream holds.
	if c.mode == "raw" {
		if n := uint64(have.byKind()["sample"]); st["delivered"] != n {
			t.Errorf("final stats: delivered %d samples, the stream holds %d", st["delivered"], n)
		}
	} else if n := uint64(have.byKind()["summary"]); st["aggregate_emitted"] != n {
		t.Errorf("final stats: the aggregate emitted %d summaries, the stream holds %d", st["aggregate_emitted"], n)
	}
	// So do the final self-metrics (sent after the outputs' final flush of
	// samples, before they close), as the witness received them.
	var last *record.Event
	for _, b := range witness {
		for i, ev := range b.Events {
			if ev.Kind == record.EventSelf && attrOf(ev, "scope") == "output" && attrOf(ev, "output") == c.name() &&
				(last == nil || ev.StartNS >= last.StartNS) {
				last = &b.Events[i]
			}
		}
	}
	if last == nil {
		t.Errorf("no self-metrics of %s reached the witness", c.name())
	} else if d := uint64(record.FieldValue(last.Fields, "delivered")); d != st["delivered"] {
		t.Errorf("final self-metrics: delivered %d, the final stats %d", d, st["delivered"])
	}
	if st["delivered"] != st["published"] || st["failed"]+st["dropped"] != 0 {
		t.Errorf("final stats: published %d delivered %d failed %d dropped %d: want every sample delivered",
			st["published"], st["delivered"], st["failed"], st["dropped"])
	}
	if st["stored"] != msgs {
		t.Errorf("final stats: stored %d messages (acked %d, duplicates %d, published %d), the stream holds %d",
			st["stored"], st["acked"], st["duplicates"], st["messages"], msgs)
	}
	// The outage is counted, as an outage: retried, never a wedge.
	if st["retries"] == 0 || st["disconnects"] == 0 || st["reconnects"] == 0 {
		t.Errorf("final stats: the outage is not counted (buffer retries %d, disconnects %d, reconnects %d)",
			st["retries"], st["disconnects"], st["reconnects"])
	}
	if st["plugin_wedges"]+st["plugin_restarts"]+st["plugin_crashes"] != 0 {
		t.Errorf("final stats: plugin_wedges %d plugin_restarts %d plugin_crashes %d: want none",
			st["plugin_wedges"], st["plugin_restarts"], st["plugin_crashes"])
	}
	if c.hop == "shared" && st["plugin_starts"] != 1 {
		t.Errorf("final stats: plugin_starts %d, want 1 (one process for the whole run)", st["plugin_starts"])
	}
}

// readStream returns the decoded records of every message in the named
// stream, and how many messages it holds.
func readStream(t *testing.T, js jetstream.JetStream, name string) ([]record.Batch, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), settleWait)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	var out []record.Batch
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("stream %s: message %d: %v", name, seq, err)
		}
		recs, err := stream.DecodeMsg(&natsgo.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
		if err != nil {
			t.Fatalf("stream %s: message %d: %v", name, seq, err)
		}
		out = append(out, recs.Batch)
	}
	return out, info.State.Msgs
}

// parseFinalStats reads the "gpusampler final stats:" block of the stats
// writer: per output, its published/delivered/dropped/failed counts and
// every name=value counter of its detail and buffer lines.
func parseFinalStats(t *testing.T, text string) map[string]map[string]uint64 {
	t.Helper()
	_, block, ok := strings.Cut(text, "gpusampler final stats:\n")
	if !ok {
		t.Fatalf("no final stats printed:\n%s", text)
	}
	out := map[string]map[string]uint64{}
	var cur map[string]uint64
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0:
		case f[0] == "output" && len(f) > 2:
			cur = map[string]uint64{}
			out[f[1]] = cur
			for i := 2; i+1 < len(f); i += 2 {
				if v, err := strconv.ParseUint(f[i+1], 10, 64); err == nil {
					cur[f[i]] = v
				}
			}
		case f[0] == "gpu":
			cur = nil
		case cur != nil:
			for _, kv := range f {
				if k, v, ok := strings.Cut(kv, "="); ok {
					if n, err := strconv.ParseUint(v, 10, 64); err == nil {
						cur[k] = n
					}
				}
			}
		}
	}
	return out
}

// attrOf returns the value of ev's attribute key ("" when absent).
func attrOf(ev record.Event, key string) string {
	for _, a := range ev.Attrs {
		if a.Key == key {
			return a.Value
		}
	}
	return ""
}
