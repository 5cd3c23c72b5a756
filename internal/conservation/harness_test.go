package conservation_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/internal/pipeline/aggregate"
	"github.com/gpusampler/gpusampler/internal/pipeline/buffer"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/outputs/stdout"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
)

// pluginPath is the record plugin, built once per test binary; pluginSum
// its sha256 (hex).
var pluginPath, pluginSum string

func TestMain(m *testing.M) {
	if os.Getenv(kill9Env) != "" { // the kill -9 child: the parent built the plugin
		pluginPath, pluginSum = os.Getenv(kill9Env+"_PLUGIN"), os.Getenv(kill9Env+"_SUM")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "gpusampler-conservation")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pluginPath = filepath.Join(dir, "recordplugin")
	if out, err := exec.Command("go", "build", "-o", pluginPath, "./recordplugin").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build recordplugin: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	data, err := os.ReadFile(pluginPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sum := sha256.Sum256(data)
	pluginSum = hex.EncodeToString(sum[:])
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Matrix dimensions.
var (
	hops    = []string{"inproc", "plugin"}
	buffers = []string{"none", "memory", "disk"}
	modes   = []string{"raw", "agg"}
)

// Script shape: phases of one aggregate window each, perPhase samples per
// buffer per device per phase.
const (
	phaseSpan = time.Second
	perPhase  = 50
	// settleWait bounds how long a run waits for its cells to take what was
	// published (a liveness bound, never an assertion on speed: it is far
	// above what a loaded machine needs, and a run that reaches it fails
	// naming what it waited for).
	settleWait = 10 * time.Minute
)

// cell is one output of the matrix.
type cell struct {
	hop, buf, mode string
}

func (c cell) name() string { return c.hop + "-" + c.buf + "-" + c.mode }

func allCells(keep func(cell) bool) []cell {
	var out []cell
	for _, h := range hops {
		for _, b := range buffers {
			for _, m := range modes {
				c := cell{h, b, m}
				if keep == nil || keep(c) {
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// env is one scenario's files: record and control files per cell, disk
// buffer dirs, the config.
type env struct {
	t     *testing.T
	dir   string
	cells []cell
	// run numbers record files, so that a restart starts new ones.
	run int
	// flush is the cells' flush_interval and drain the sampler's
	// drain_interval (a reload changes them).
	flush, drain string
	// ring is the sampler's ring_size (0: the default); maxRecords the
	// memory buffers' buffer_max_records (0: the default).
	ring, maxRecords int
	// fsync is the disk buffers' buffer_fsync_interval.
	fsync string
	// stdout, when set, is the process's stdout handed to a [[outputs.stdout]]
	// block named "stdout".
	stdout *os.File
	// tails follow the record files (by path) while the test polls them.
	tails map[string]*tail
	// accounting turns [attribution] accounting on (job and job_end
	// records, package internal/accounting), reporting every second.
	accounting bool
	// stats, when set, takes the agent's stats reports (StatsWriter),
	// the final one included.
	stats *lockedBuffer
	// health is the plugin cells' health_interval (empty: 100ms);
	// timeout their write_timeout and buffer_close_timeout (empty: 2s).
	health, timeout string
	// otlp are the OTLP cells' receivers, by cell name (otlp_test.go).
	otlp map[string]*otlpSink
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in
// different goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail follows one record file: each poll parses only the complete lines
// appended since the last, so that polling costs what was written since,
// not the file's whole length.
type tail struct {
	path string
	off  int64
	// states counts the batches per state; markers holds the matrix
	// markers of ok batches; self is whether an ok batch held
	// self-metrics.
	states  map[string]int
	markers map[string]bool
	self    bool
}

// follow returns the tail of the record file at path.
func (e *env) follow(path string) *tail {
	if e.tails == nil {
		e.tails = map[string]*tail{}
	}
	tl := e.tails[path]
	if tl == nil {
		tl = &tail{path: path, states: map[string]int{}, markers: map[string]bool{}}
		e.tails[path] = tl
	}
	if err := tl.poll(); err != nil {
		e.t.Fatal(err)
	}
	return tl
}

// poll parses the complete lines written since the last poll. A line that
// does not parse (a plugin killed mid-write leaves a torn line that the
// next process's first line continues) is skipped: the final read of the
// file (ReadFile) judges torn lines.
func (tl *tail) poll() error {
	f, err := os.Open(tl.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, tl.off, math.MaxInt64-tl.off))
	if err != nil {
		return fmt.Errorf("%s: %w", tl.path, err)
	}
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return nil
	}
	for line := range bytes.SplitSeq(data[:end], []byte("\n")) {
		var b conservation.Batch
		if len(line) == 0 || json.Unmarshal(line, &b) != nil {
			continue
		}
		tl.states[b.State]++
		if b.State != conservation.StateOK {
			continue
		}
		for _, ev := range b.Events {
			switch ev.Kind {
			case "matrix_marker":
				tl.markers[ev.Message] = true
			case record.EventSelf:
				tl.self = true
			}
		}
	}
	tl.off += int64(end + 1)
	return nil
}

func newEnv(t *testing.T, cells []cell) *env {
	return &env{t: t, dir: t.TempDir(), cells: cells, flush: "20ms", drain: "20ms", fsync: "50ms"}
}

func (e *env) recordFile(name string, run int) string {
	return filepath.Join(e.dir, fmt.Sprintf("%s.run%d.jsonl", name, run))
}

func (e *env) controlFile(name string) string { return filepath.Join(e.dir, name+".ctl") }

// setControl writes the control words of every cell matching keep.
func (e *env) setControl(keep func(cell) bool, words ...string) {
	for _, c := range e.cells {
		if keep == nil || keep(c) {
			if err := os.WriteFile(e.controlFile(c.name()), []byte(strings.Join(words, "\n")), 0o644); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// configText returns the config of the current run: the witness and every
// cell.
func (e *env) configText() string {
	var b strings.Builder
	fmt.Fprintf(&b, `[agent]
  flush_interval = "20ms"
  stats_interval = "1s"
  self_metrics = true
  state_dir = %q

[sampler]
  backend = "sim"
  drain_interval = %q
  processes = true
  process_interval = "1s"
  process_cmdline = true

[[outputs.record]]
  name = "witness"
  file = %q
`, filepath.Join(e.dir, "state"), e.drain, e.recordFile("witness", e.run))
	if e.ring > 0 {
		// [sampler] is above the outputs: ring_size goes there.
		text := b.String()
		b.Reset()
		b.WriteString(strings.Replace(text, "[sampler]\n", fmt.Sprintf("[sampler]\n  ring_size = %d\n", e.ring), 1))
	}
	if e.accounting {
		text := b.String()
		b.Reset()
		b.WriteString(strings.Replace(text, "\n[[outputs.record]]\n", "\n[attribution]\n  accounting = true\n  accounting_interval = \"1s\"\n\n[[outputs.record]]\n", 1))
	}
	if e.stdout != nil {
		b.WriteString("\n[[outputs.stdout]]\n  name = \"stdout\"\n  write_timeout = \"2s\"\n")
	}
	for _, c := range e.cells {
		n := c.name()
		timeout := cmp.Or(e.timeout, "2s")
		common := fmt.Sprintf("  name = %q\n  flush_interval = %q\n  write_timeout = %q\n", n, e.flush, timeout)
		if c.mode == "agg" {
			common += fmt.Sprintf("  aggregate = %q\n", phaseSpan)
		}
		switch c.buf {
		case "memory":
			if e.maxRecords > 0 {
				common += fmt.Sprintf("  buffer_max_records = %d\n", e.maxRecords)
			}
			common += fmt.Sprintf("  buffer = \"memory\"\n  retry_initial = \"10ms\"\n  retry_max = \"50ms\"\n  buffer_close_timeout = %q\n", timeout)
		case "disk":
			common += fmt.Sprintf("  buffer = \"disk\"\n  buffer_dir = %q\n  buffer_fsync_interval = %q\n"+
				"  retry_initial = \"10ms\"\n  retry_max = \"50ms\"\n  buffer_close_timeout = %q\n", filepath.Join(e.dir, n+".buf"), e.fsync, timeout)
		}
		switch c.hop {
		case "inproc":
			fmt.Fprintf(&b, "\n[[outputs.record]]\n%s  file = %q\n  control = %q\n", common, e.recordFile(n, e.run), e.controlFile(n))
		case "otlp", "otlphttp", "otlpshared":
			b.WriteString(e.otlpBlock(c, common))
		case "shared":
			// write_timeout 10s: a call timeout of 9s and 8s for the
			// output, a margin of 1s for a slow write's answer
			common = strings.Replace(common, fmt.Sprintf("write_timeout = %q", timeout), `write_timeout = "10s"`, 1)
			fmt.Fprintf(&b, "\n[[outputs.sharedrecord]]\n%s  file = %q\n  control = %q\n", common, e.recordFile(n, e.run), e.controlFile(n))
		default:
			health := cmp.Or(e.health, "100ms")
			fmt.Fprintf(&b, "\n[[outputs.plugin]]\n%s  path = %q\n  sha256 = %q\n  health_interval = %q\n  [outputs.plugin.config]\n    file = %q\n    control = %q\n",
				common, pluginPath, pluginSum, health, e.recordFile(n, e.run), e.controlFile(n))
		}
	}
	return b.String()
}

// registry has the in-process "record" kind, the plugin kind, stdout, and
// "sharedrecord", whose outputs run as instances of one recordplugin
// process (the shared hop, as the built-in network outputs run).
func registry() *outputs.Registry {
	return plugins.HostRegistry(outputs.NewRegistry(conservation.RecordKind(), conservation.SharedRecordKind(),
		plugins.Kind(), stdout.Kind(), opentelemetry.Kind(), otlpInprocKind()), plugins.HostOptions{Executable: pluginPath, Shared: true,
		Args: func(string) []string { return []string{"shared"} }})
}

// sharedCells are the cells of the shared hop (every buffer and mode): the
// scenarios that name them run them, the others do not.
func sharedCells() []cell {
	var out []cell
	for _, b := range buffers {
		for _, m := range modes {
			out = append(out, cell{"shared", b, m})
		}
	}
	return out
}

func (e *env) parse(text string) (*appconfig.Config, error) {
	return appconfig.Parse(filepath.Join(e.dir, "gpusampler.toml"), []byte(text), appconfig.Options{Registry: registry()})
}

// running is one agent run.
type running struct {
	e      *env
	src    *conservation.Script
	a      *agent.Agent
	cancel context.CancelFunc
	done   chan error
	events int // custom events emitted
	// stats of outputs replaced by a reload, per cell, summed in counts
	retired map[string]*counts
	// problems found while running, per cell
	problems map[string][]string
	markers  int
	stopped  bool
}

// start builds and runs the agent over src with the env's config.
func (e *env) start(src *conservation.Script) *running {
	e.t.Helper()
	e.run++
	cfg, err := e.parse(e.configText())
	if err != nil {
		e.t.Fatal(err)
	}
	tw := &testWriter{t: e.t}
	log := slog.New(slog.NewTextHandler(tw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := agent.Options{Registry: registry(), Hostname: "matrix", Logger: log}
	if e.stdout != nil {
		opts.Stdout = e.stdout
	}
	if e.stats != nil {
		opts.StatsWriter = e.stats
	}
	a, err := agent.New(src, cfg, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{e: e, src: src, a: a, cancel: cancel, done: make(chan error, 1), retired: map[string]*counts{}, problems: map[string][]string{}}
	go func() { r.done <- a.Run(ctx) }()
	e.t.Cleanup(func() {
		// A test that failed half-way still stops its agent before its
		// files go.
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

// testWriter sends log lines to t.Log while the test runs.
type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// waitFor polls cond until it holds or the settle bound passes; it reports
// whether it held.
func waitFor(cond func() bool) bool {
	began := time.Now()
	deadline := began.Add(settleWait)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(began); d > 5*time.Second && testing.Verbose() {
		_, file, line, _ := runtime.Caller(1)
		fmt.Printf("waited %v at %s:%d\n", d.Round(time.Millisecond), filepath.Base(file), line)
	}
	return true
}

// phase releases the script's next phase, waits until the engine has
// published it, and emits one custom event with fields.
func (r *running) phase() {
	r.e.t.Helper()
	n := r.releasePhase()
	r.events++
	r.a.Engine().Emit(record.Event{Kind: "matrix_phase", Device: n % 2, StartNS: r.src.Start.UnixNano() + int64(n),
		EndNS: r.src.Start.UnixNano() + int64(n) + 5, Message: fmt.Sprintf("phase %d released", n),
		Attrs:  []record.Attr{{Key: "phase", Value: fmt.Sprint(n)}, {Key: "run", Value: fmt.Sprint(r.e.run)}},
		Fields: []record.Field{{Key: "samples", Value: float64(perPhase * 4), Int: true}, {Key: "ratio", Value: 0.375}}})
}

// releasePhase releases the script's next phase and waits until the engine
// has published it; it returns the phase's number.
func (r *running) releasePhase() int {
	r.e.t.Helper()
	n := r.src.Release()
	want := uint64((n - r.src.First) * perPhase * 2)
	if !waitFor(func() bool {
		for _, d := range r.a.Engine().Stats().Devices {
			if d.Published < want {
				return false
			}
		}
		return true
	}) {
		r.e.t.Fatalf("phase %d: the engine did not publish the released samples", n)
	}
	return n
}

// awaitDown waits until every cell's sink has refused n writes as down.
func (r *running) awaitDown(n int) {
	r.e.t.Helper()
	if !waitFor(func() bool {
		for _, c := range r.e.cells {
			if r.e.lines(r.e.recordFile(c.name(), r.e.run), conservation.StateDown) < n {
				return false
			}
		}
		return true
	}) {
		r.e.t.Errorf("not every sink saw %d writes while down", n)
	}
}

// awaitSelf waits until the witness has received self-metrics.
func (r *running) awaitSelf() {
	r.e.t.Helper()
	if !waitFor(func() bool {
		return r.e.follow(r.e.recordFile("witness", r.e.run)).self
	}) {
		r.e.t.Errorf("no self-metrics reached the witness")
	}
}

// settle emits a marker event and waits until every cell (and the
// witness) has received it and every disk buffer among them has been seen
// empty since, except the cells skip names; it fails the test naming the
// cells that did not settle within the liveness bound, and returns them.
// The marker travels with every sample published before it (a pump reads
// the event log, then the rings, into one batch), and pumps and buffers
// deliver in order: a sink that has the marker has everything published
// before it. (More may follow: self-metrics keep coming, which is why a
// disk buffer need only be seen empty once.)
func (r *running) settle(skip func(cell) bool) []string {
	r.e.t.Helper()
	var names []string
	for _, c := range r.e.cells {
		if skip == nil || !skip(c) {
			names = append(names, c.name())
		}
	}
	names = append(names, "witness")
	// A marker may be lost with its batch (a buffer dropping at its cap, a
	// pump failing the batch): then the output counted a drop, and a new
	// marker, emitted after it, is waited for instead.
	var marker string
	drops := map[string]uint64{}
	var drained map[string]bool
	emit := func() {
		r.markers++
		marker = fmt.Sprintf("settle %d run %d", r.markers, r.e.run)
		for _, n := range names {
			drops[n] = r.countsOf(n).dropped()
		}
		drained = map[string]bool{}
		r.a.Engine().Emit(record.Event{Kind: "matrix_marker", Device: -1, StartNS: r.src.Start.UnixNano() - int64(r.markers),
			EndNS: r.src.Start.UnixNano() - int64(r.markers), Message: marker})
	}
	emit()
	var left []string
	waitFor(func() bool {
		left = left[:0]
		lost := false
		for _, n := range names {
			if !r.hasMarker(n, marker) {
				left = append(left, n+" (no marker)")
				lost = lost || r.countsOf(n).dropped() > drops[n]
				continue
			}
			if b := r.a.Buffers()[n]; b != nil && !drained[n] {
				if s := b.Stats(); s.Kind == buffer.KindDisk && s.BufferedRecords > 0 {
					left = append(left, fmt.Sprintf("%s (%d records on disk)", n, s.BufferedRecords))
					continue
				}
				drained[n] = true
			}
		}
		if lost {
			r.e.t.Logf("%s lost with a batch an output counted dropped; waiting for the next marker", marker)
			emit()
		}
		return len(left) == 0
	})
	if len(left) > 0 {
		r.e.t.Errorf("%s: not settled within %v: %v", marker, settleWait, left)
		for i, l := range left {
			left[i], _, _ = strings.Cut(l, " ")
		}
	}
	return left
}

// hasMarker reports whether the named output's sink received the marker.
func (r *running) hasMarker(name, marker string) bool {
	return r.e.follow(r.e.recordFile(name, r.e.run)).markers[marker]
}

// counts are what a cell's counters say about records that did not reach
// its sink.
type counts struct {
	RingDropped, PumpFailed, EventsDropped uint64
	BufferDropped                          buffer.Drops
	OnDisk                                 int64
	Late                                   uint64
	// AggDropped are summaries and events the aggregate wrapper dropped
	// because its output refused them.
	AggDropped uint64
}

// dropped is total less what is still on disk (not lost, and not final
// while the output runs).
func (c counts) dropped() uint64 { return c.total() - uint64(c.OnDisk) }

func (c counts) total() uint64 {
	return c.RingDropped + c.PumpFailed + c.EventsDropped + c.BufferDropped.Total() + uint64(c.OnDisk) + c.Late + c.AggDropped
}

func (c *counts) add(o counts) {
	c.RingDropped += o.RingDropped
	c.PumpFailed += o.PumpFailed
	c.EventsDropped += o.EventsDropped
	c.BufferDropped.Cap += o.BufferDropped.Cap
	c.BufferDropped.Malformed += o.BufferDropped.Malformed
	c.BufferDropped.Corrupt += o.BufferDropped.Corrupt
	c.BufferDropped.Shutdown += o.BufferDropped.Shutdown
	c.OnDisk += o.OnDisk
	c.Late += o.Late
	c.AggDropped += o.AggDropped
}

// countsOf reads the named output's counters now.
func (r *running) countsOf(name string) counts {
	var c counts
	for _, o := range r.a.Engine().Stats().Outputs {
		if o.Name == name {
			c.RingDropped, c.PumpFailed, c.EventsDropped = o.Dropped, o.Failed, o.EventsDropped
		}
	}
	if b := r.a.Buffers()[name]; b != nil {
		s := b.Stats()
		c.BufferDropped = s.DroppedRecords
		if s.Kind == buffer.KindDisk {
			c.OnDisk = s.BufferedRecords
		}
	}
	if ag, ok := r.a.Outputs()[name].(*aggregate.Output); ok {
		st := ag.Stats()
		c.Late, c.AggDropped = st.Late, st.Dropped+st.EventsDropped
		// The aggregate takes every sample the pump offers into its
		// windows, even when its Write fails: samples the pump counts as
		// failed are accounted for, as summaries, by the aggregate's own
		// counters.
		c.PumpFailed = 0
	}
	return c
}

// reload applies text as a SIGHUP would (the file is written, then
// loaded), keeping the replaced outputs' counters.
func (r *running) reload(text string) error {
	outs, bufs := r.a.Outputs(), r.a.Buffers()
	path := filepath.Join(r.e.dir, "gpusampler.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		r.e.t.Fatal(err)
	}
	err := r.a.ReloadFile(path, appconfig.Options{Registry: registry()})
	after := r.a.Outputs()
	for _, c := range r.e.cells {
		if n := c.name(); outs[n] != after[n] {
			// Replaced: the engine's counters carry over to the new pump
			// and a queue to the new buffer; the buffer's and the
			// aggregate's own counters start again. The old ones' are read
			// now, closed: their close counts too.
			if r.retired[n] == nil {
				r.retired[n] = &counts{}
			}
			var old counts
			if b := bufs[n]; b != nil {
				old.BufferDropped = b.Stats().DroppedRecords
			}
			if ag, ok := outs[n].(*aggregate.Output); ok {
				st := ag.Stats()
				old.Late, old.AggDropped = st.Late, st.Dropped+st.EventsDropped
			}
			r.retired[n].add(old)
		}
	}
	return err
}

// stop ends the run (as SIGTERM does) and returns every cell's final
// counts. It fails the test if Run does not return within the settle
// bound.
func (r *running) stop() map[string]counts {
	r.e.t.Helper()
	r.cancel()
	r.stopped = true
	began := time.Now()
	defer func() {
		if d := time.Since(began); d > 5*time.Second && testing.Verbose() {
			fmt.Printf("stopping took %v\n", d.Round(time.Millisecond))
		}
	}()
	select {
	case err := <-r.done:
		if err != nil {
			r.e.t.Logf("run ended with: %v", err)
		}
	case <-time.After(settleWait):
		r.e.t.Fatalf("the agent did not stop within %v of being told to", settleWait)
	}
	out := map[string]counts{}
	for _, c := range r.e.cells {
		n := c.name()
		cs := r.countsOf(n)
		if old := r.retired[n]; old != nil {
			cs.add(*old)
		}
		out[n] = cs
	}
	// The witness's own counters: the matrix compares every cell with
	// what the witness received, which is all that was published only
	// if the witness dropped nothing.
	out["witness"] = r.countsOf("witness")
	return out
}

// received is what one sink's record files hold.
type received struct {
	ok, down, refused []conservation.Batch
	torn              int
	duplicates        int // ok batches identical (seq and content) to an earlier one, dropped from ok
	// sessions are the ok batches of each record file (one per agent run)
	sessions [][]conservation.Batch
}

func readReceived(t *testing.T, files ...string) received {
	var r received
	seen := map[string]bool{}
	for _, f := range files {
		bs, torn, err := conservation.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r.torn += torn
		var session []conservation.Batch
		for _, b := range bs {
			if b.State == conservation.StateOK {
				session = append(session, b)
			}
			switch b.State {
			case conservation.StateOK:
				pid := b.PID
				b.PID = 0
				key, _ := json.Marshal(b)
				b.PID = pid
				if seen[string(key)] {
					r.duplicates++
					continue
				}
				seen[string(key)] = true
				r.ok = append(r.ok, b)
			case conservation.StateDown:
				r.down = append(r.down, b)
			case conservation.StateRefused:
				r.refused = append(r.refused, b)
			}
		}
		r.sessions = append(r.sessions, session)
	}
	return r
}

// recordKey is one record of any kind, as a comparable key: its kind and its
// whole content.
type recordKey struct {
	kind string // device, sample, summary, event
	key  string
}

func keyOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// bag is a multiset of records.
type bag map[recordKey]int

func (b bag) add(kind string, v any) { b[recordKey{kind, keyOf(v)}]++ }

func (b bag) len() int {
	n := 0
	for _, c := range b {
		n += c
	}
	return n
}

// minus returns b − o.
func (b bag) minus(o bag) bag {
	out := bag{}
	for r, n := range b {
		if d := n - o[r]; d > 0 {
			out[r] = d
		}
	}
	return out
}

func (b bag) byKind() map[string]int {
	out := map[string]int{}
	for r, n := range b {
		out[r.kind] += n
	}
	return out
}

// sample returns a few of b's records, for failure messages.
func (b bag) sample(n int) string {
	var keys []string
	for r := range b {
		keys = append(keys, r.kind+" "+r.key)
	}
	slices.Sort(keys)
	if len(keys) > n {
		keys = append(keys[:n], fmt.Sprintf("... %d more", len(keys)-n))
	}
	return strings.Join(keys, "\n\t")
}

// contents returns the records of batches: samples, summaries and events
// as multisets; devices as a set (an identity may be sent again).
func contents(batches []conservation.Batch) bag {
	b := bag{}
	devs := map[string]bool{}
	for _, x := range batches {
		for _, d := range x.Devices {
			if k := keyOf(d); !devs[k] {
				devs[k] = true
				b.add("device", d)
			}
		}
		for _, s := range x.Samples {
			b.add("sample", s)
		}
		for _, s := range x.Summaries {
			b.add("summary", s)
		}
		for _, e := range x.Events {
			b.add("event", e)
		}
	}
	return b
}

// summarize computes the summaries an aggregating output must emit for
// samples: per device, metric and window, in timestamp order, the same
// arithmetic as internal/pipeline/aggregate.
func summarize(samples []record.Sample, interval time.Duration) []record.Summary {
	iv := int64(interval)
	s := slices.Clone(samples)
	slices.SortStableFunc(s, func(a, b record.Sample) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Metric, b.Metric), cmp.Compare(a.TimeNS, b.TimeNS))
	})
	var out []record.Summary
	var sum float64
	for _, x := range s {
		start := x.TimeNS / iv * iv
		cur := len(out) - 1
		if cur < 0 || out[cur].Device != x.Device || out[cur].Metric != x.Metric || out[cur].StartNS != start {
			out = append(out, record.Summary{StartNS: start, IntervalNS: iv, Min: x.Value, Max: x.Value, Device: x.Device, Metric: x.Metric})
			cur++
			sum = 0
		}
		w := &out[cur]
		w.Min, w.Max, w.Last = min(w.Min, x.Value), max(w.Max, x.Value), x.Value
		sum += x.Value
		w.Count++
		w.Mean = sum / float64(w.Count)
	}
	return out
}
