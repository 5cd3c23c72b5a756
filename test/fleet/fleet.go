// Package fleet simulates a fleet of gpusampler nodes publishing to a NATS
// cluster, and proves what arrives: N real agents (engine, pumps, memory
// buffer, the real NATS output with JetStream) over simulated GPUs, each
// with its own host name, publish into one stream with three replicas on a
// three-server cluster (routes, JetStream; each server a child process so
// that it can be killed and its CPU time read); a durable pull consumer
// shared by several workers reads the stream back. Every sample the engines
// produced is fingerprinted on the way in (a second output on every node)
// and on the way out, so that loss and duplicates are counted exactly.
// Faults on request: the stream leader killed and restarted, the consumer
// killed and restarted on its durable, one node's client partitioned.
//
// It is a nested module so that the main module never depends on the
// NATS server.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// streamName is the fleet's stream.
const streamName = "GPUSAMPLER"

// Options configure a run.
type Options struct {
	// Nodes (default 100), GPUs per node (default 8).
	Nodes, GPUs int
	// Duration of publishing (default 30s).
	Duration time.Duration
	// Encoding of the NATS output (default "protobuf").
	Encoding string
	// FlushInterval of the nodes' outputs (0: gpusampler's default).
	FlushInterval time.Duration
	// Workers sharing the durable consumer (default 2).
	Workers int
	// Faults: kill and restart the stream leader, kill and restart the
	// consumer, partition one node's client — at fixed points of the run.
	Faults bool
	// Dir holds the servers' stores (required).
	Dir string
	// Keep keeps every sample on both sides (Result.In, Result.Out), for
	// small runs that compare whole records.
	Keep bool
	// Log receives progress lines (nil: none).
	Log io.Writer
}

// Result is what a run measured.
type Result struct {
	Options
	// SamplesIn: what the engines produced; SamplesOut: unique samples read
	// back from the stream. Lost = In − Out (negative would be extra).
	SamplesIn, SamplesOut int64
	Lost                  int64
	// Where the lost went, as the nodes counted them (gpusampler's own
	// drop counters, summed over the NATS outputs): ring lanes full
	// (RingDropped), batches the pump gave up (PumpFailed), memory buffer
	// over its cap (BufferCap) or still queued when Close gave up at the
	// end (BufferShutdown).
	RingDropped, PumpFailed, BufferCap, BufferShutdown int64
	// FingerprintsMatch: the multiset of samples out equals the multiset
	// in, value by value (not just the counts).
	FingerprintsMatch bool
	// DupSamples, DupMessages: stored twice in the stream (a retry outside
	// the duplicate window). CaughtDups: retried publishes the stream's
	// duplicate window dropped. Redelivered: messages delivered again to
	// the consumer (not acked before it died).
	DupSamples, DupMessages, CaughtDups, Redelivered int64
	// Reread: messages delivered after the consumer restarted from below
	// its durable acknowledged position (must be 0).
	Reread int64
	// MessagesIn: messages the outputs published (acked);
	// MessagesOut: unique messages read.
	MessagesIn, MessagesOut int64
	// Elapsed: publishing time; Drain: from the end of publishing until
	// the consumer had everything.
	Elapsed, Drain time.Duration
	// PayloadPerSample, WirePerSample: bytes per sample, payload only and
	// with subject and headers.
	PayloadPerSample, WirePerSample float64
	// LatencyP50, LatencyP99: driver timestamp → consumer, milliseconds,
	// of the samples taken after the nodes started (the first drain also
	// returns the driver's history from before).
	LatencyP50, LatencyP99 int
	// LagMax: the consumer's largest backlog (pending + unacked messages)
	// sampled every second while publishing.
	LagMax int64
	// CPU seconds per million samples in: this process (engines, outputs,
	// and the verifying consumer) and the three servers.
	PubCPUPerM, ClusterCPUPerM float64
	// Faults: what was done and seen, in words.
	Faults []string
	// Partitioned: the partitioned node's samples in and out.
	PartitionedIn, PartitionedOut int64
	// Varz, Jsz: a few figures of server 1's /varz and /jsz at the end.
	Varz, Jsz map[string]any
	// In, Out: every sample, sorted (Keep only).
	In, Out []Record
}

func (o *Options) defaults() {
	if o.Nodes <= 0 {
		o.Nodes = 100
	}
	if o.GPUs <= 0 {
		o.GPUs = 8
	}
	if o.Duration <= 0 {
		o.Duration = 30 * time.Second
	}
	if o.Encoding == "" {
		o.Encoding = "protobuf"
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Run runs the fleet and reads everything back.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts.defaults()
	if opts.Dir == "" {
		return nil, errors.New("fleet: no store directory")
	}
	log := func(f string, a ...any) { fmt.Fprintf(opts.Log, "fleet: "+f+"\n", a...) }
	cl, err := StartCluster(opts.Dir)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	log("cluster of 3 servers up: %s", strings.Join(cl.URLs(), ","))
	nc, err := natsgo.Connect(strings.Join(cl.URLs(), ","), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	// The cluster elects its JetStream meta leader after the routes form:
	// creating the stream fails until then.
	st, err := retry(ctx, 60*time.Second, func(ctx context.Context) (jetstream.Stream, error) {
		return js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{"gpusampler.>"},
			Replicas: 3, Storage: jetstream.FileStorage, MaxBytes: 4 << 30, Duplicates: 2 * time.Minute})
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: create stream: %w", err)
	}
	if _, err := retry(ctx, 60*time.Second, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, ensureConsumer(ctx, js, "fleet")
	}); err != nil {
		return nil, fmt.Errorf("fleet: create consumer: %w", err)
	}
	res := &Result{Options: opts}
	led := newLedger(opts.Keep)
	group := &consumerGroup{urls: cl.URLs(), durable: "fleet", workers: opts.Workers, led: led}
	if err := group.start(); err != nil {
		return nil, err
	}
	cur := &current{g: group}
	defer func() { cur.get().kill() }()

	var nodes []*node
	for i := range opts.Nodes {
		n, err := newNode(fmt.Sprintf("node%04d", i+1), opts, cl.URLs())
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
	}
	log("%d nodes × %d GPUs built; publishing for %v", opts.Nodes, opts.GPUs, opts.Duration)
	cpu0, ccpu0 := selfCPU(), cl.CPU()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	led.setSince(start)
	for _, n := range nodes {
		go n.run(runCtx)
	}
	lagDone := make(chan struct{})
	go func() {
		defer close(lagDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				if info, err := infoOf(runCtx, js); err == nil {
					res.LagMax = max(res.LagMax, int64(info.NumPending)+int64(info.NumAckPending))
				}
			}
		}
	}()
	var faultsDone <-chan error
	if opts.Faults {
		faultsDone = faults(runCtx, opts, cl, js, st, cur, nodes[0], led, res, log)
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Until(start.Add(opts.Duration))):
	}
	stop()
	<-lagDone
	if faultsDone != nil {
		if err := <-faultsDone; err != nil {
			return nil, err
		}
	}
	if err := waitDone(nodes, 2*time.Minute); err != nil {
		return nil, err
	}
	res.Elapsed = time.Since(start)
	for _, n := range nodes {
		if n.err != nil {
			return nil, n.err
		}
	}
	log("published; draining")
	drained := time.Now()
	if err := waitDrained(ctx, js, st, 5*time.Minute); err != nil {
		return nil, err
	}
	res.Drain = time.Since(drained)
	cpu1, ccpu1 := selfCPU(), cl.CPU()

	var fpIn uint64
	for _, n := range nodes {
		c, fp, kept := n.count.totals()
		res.SamplesIn += int64(c)
		fpIn += fp
		res.In = append(res.In, kept...)
		for _, o := range n.agent.Engine().Stats().Outputs {
			if o.Name == "nats" {
				res.RingDropped += int64(o.Dropped)
				res.PumpFailed += int64(o.Failed)
			}
		}
		if b := n.agent.Buffers()["nats"]; b != nil {
			d := b.Stats().DroppedRecords
			res.BufferCap += int64(d.Cap)
			res.BufferShutdown += int64(d.Shutdown)
		}
		s := n.stats()
		res.MessagesIn += int64(s.Acked - s.Duplicates)
		res.CaughtDups += int64(s.Duplicates)
	}
	if opts.Faults {
		c, _, _ := nodes[0].count.totals()
		res.PartitionedIn = int64(c)
	}
	cur.get().kill()
	led.mu.Lock()
	res.SamplesOut = int64(led.samples)
	res.MessagesOut = int64(led.msgs)
	res.DupSamples, res.DupMessages = int64(led.dupSamples), int64(led.dupMsgs)
	res.Redelivered = int64(led.redelivered)
	res.Reread = int64(led.reread)
	res.FingerprintsMatch = led.fp == fpIn && led.samples == uint64(res.SamplesIn)
	if led.samples > 0 {
		res.PayloadPerSample = float64(led.payload) / float64(led.samples)
		res.WirePerSample = float64(led.wire) / float64(led.samples)
	}
	res.LatencyP50, res.LatencyP99 = led.quantile(0.50), led.quantile(0.99)
	if opts.Faults {
		res.PartitionedOut = int64(led.perHost[nodes[0].host])
	}
	res.Out = led.kept
	decodeErr := led.firstErr
	led.mu.Unlock()
	if decodeErr != nil {
		return nil, fmt.Errorf("fleet: consumer: %w", decodeErr)
	}
	res.Lost = res.SamplesIn - res.SamplesOut
	if res.SamplesIn > 0 {
		res.PubCPUPerM = (cpu1 - cpu0) / float64(res.SamplesIn) * 1e6
		res.ClusterCPUPerM = (ccpu1 - ccpu0) / float64(res.SamplesIn) * 1e6
	}
	sortRecords(res.In)
	sortRecords(res.Out)
	res.Varz = monitor(cl.MonitorURL(0)+"/varz", "in_msgs", "in_bytes", "out_msgs", "out_bytes", "slow_consumers", "mem", "cpu", "routes")
	res.Jsz = monitor(cl.MonitorURL(0)+"/jsz", "messages", "bytes", "streams", "consumers", "memory", "storage")
	return res, nil
}

// faults runs the fault schedule in the background: the stream leader is
// killed at 20% of the run and restarted at 35%; the consumer is killed at
// 45% and restarted on its durable at 55%; the first node's client is
// partitioned from 65% to 80%. When ctx ends first, what is down comes back
// at once (a fault is never left in place). The channel reports the end.
func faults(ctx context.Context, opts Options, cl *Cluster, js jetstream.JetStream, st jetstream.Stream,
	cur *current, victim *node, led *ledger, res *Result, log func(string, ...any)) <-chan error {
	at := func(f float64) <-chan time.Time { return time.After(time.Duration(f * float64(opts.Duration))) }
	note := func(f string, a ...any) {
		s := fmt.Sprintf(f, a...)
		log("%s", s)
		res.Faults = append(res.Faults, s)
	}
	// wait waits for c; false when ctx ended first.
	wait := func(c <-chan time.Time) bool {
		select {
		case <-c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			t20, t35, t45, t55, t65, t80 := at(.20), at(.35), at(.45), at(.55), at(.65), at(.80)
			if !wait(t20) {
				return nil
			}
			leader := -1
			if info, err := st.Info(ctx); err == nil && info.Cluster != nil {
				leader = slices.IndexFunc(cl.servers, func(c *child) bool { return c.cfg.Name == info.Cluster.Leader })
			}
			if leader < 0 {
				leader = 0
			}
			if err := cl.Kill(leader); err != nil {
				return fmt.Errorf("fleet: kill server n%d: %w", leader+1, err)
			}
			note("server n%d (the stream leader) killed (SIGKILL)", leader+1)
			wait(t35)
			if err := cl.Restart(leader); err != nil {
				return fmt.Errorf("fleet: restart server n%d: %w", leader+1, err)
			}
			note("server n%d restarted on its store", leader+1)
			if !wait(t45) {
				return nil
			}
			group := cur.get()
			group.kill()
			var floor uint64
			if info, err := infoOf(ctx, js); err == nil {
				floor = info.AckFloor.Stream
			}
			note("consumer killed (its %d workers' connections dropped, unacked messages held); durable ack floor at stream seq %d", opts.Workers, floor)
			wait(t55)
			led.mu.Lock()
			led.floor = floor
			led.mu.Unlock()
			group2 := &consumerGroup{urls: group.urls, durable: group.durable, workers: group.workers, led: led}
			if err := group2.start(); err != nil {
				return fmt.Errorf("fleet: consumer restart: %w", err)
			}
			cur.set(group2)
			note("consumer restarted on durable %q", group.durable)
			if !wait(t65) {
				return nil
			}
			victim.dialer.Partition()
			note("node %s partitioned from every server", victim.host)
			wait(t80)
			victim.dialer.Heal()
			note("node %s healed", victim.host)
			return nil
		}()
	}()
	return done
}

// current is the consumer group now running (replaced when the consumer
// is restarted).
type current struct {
	mu sync.Mutex
	g  *consumerGroup
}

func (c *current) get() *consumerGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.g
}

func (c *current) set(g *consumerGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.g = g
}

func infoOf(ctx context.Context, js jetstream.JetStream) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, streamName, "fleet")
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}

// waitDrained waits until the consumer has acknowledged every message of
// the stream.
func waitDrained(ctx context.Context, js jetstream.JetStream, st jetstream.Stream, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		si, err1 := st.Info(sctx)
		cancel()
		ci, err2 := infoOf(ctx, js)
		if err1 == nil && err2 == nil && ci.NumPending == 0 && ci.NumAckPending == 0 && ci.AckFloor.Stream >= si.State.LastSeq {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w within %v (stream %v, consumer %v; errors %v, %v)", errNotDrained, limit, si, ci, err1, err2)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// retry calls f until it succeeds or limit passes.
func retry[T any](ctx context.Context, limit time.Duration, f func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(limit)
	for {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := f(c)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return v, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// selfCPU returns this process's CPU seconds (user + system).
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// monitor fetches url and keeps keys of its JSON object.
func monitor(url string, keys ...string) map[string]any {
	c := http.Client{Timeout: 5 * time.Second}
	r, err := c.Get(url)
	if err != nil {
		return map[string]any{"error": err.Error()}
	}
	defer r.Body.Close()
	var all map[string]any
	if err := json.NewDecoder(r.Body).Decode(&all); err != nil {
		return map[string]any{"error": err.Error()}
	}
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Summary is the run in one line of words.
func (r *Result) Summary() string {
	dup := r.DupSamples
	s := fmt.Sprintf("fleet: %d nodes × %d GPUs for %v: %d samples in, %d samples out, %d lost, %d duplicated",
		r.Nodes, r.GPUs, r.Duration, r.SamplesIn, r.SamplesOut, r.Lost, dup)
	if !r.FingerprintsMatch {
		s += " — CONTENT MISMATCH: the samples out are not the samples in"
	}
	if r.Options.Faults {
		s += fmt.Sprintf(" (through a server kill, a consumer kill and a partitioned node: %d retried publishes dropped by the duplicate window, %d redelivered messages ignored, %d re-read below the durable position)",
			r.CaughtDups, r.Redelivered, r.Reread)
	}
	return s
}

// Table returns the figures as "name: value" lines.
func (r *Result) Table() string {
	secs := r.Elapsed.Seconds()
	var b strings.Builder
	row := func(k, f string, a ...any) { fmt.Fprintf(&b, "%-34s "+f+"\n", append([]any{k + ":"}, a...)...) }
	flush := "default"
	if r.FlushInterval > 0 {
		flush = r.FlushInterval.String()
	}
	row("nodes × GPUs", "%d × %d (%s, flush_interval %s)", r.Nodes, r.GPUs, r.Encoding, flush)
	row("messages/s in, out", "%.0f, %.0f", float64(r.MessagesIn)/secs, float64(r.MessagesOut)/(secs+r.Drain.Seconds()))
	row("samples/s in, out", "%.0f, %.0f", float64(r.SamplesIn)/secs, float64(r.SamplesOut)/(secs+r.Drain.Seconds()))
	row("bytes/sample payload, wire", "%.1f, %.1f", r.PayloadPerSample, r.WirePerSample)
	row("latency p50, p99 (ms)", "%d, %d", r.LatencyP50, r.LatencyP99)
	row("consumer lag max (msgs), drain", "%d, %v", r.LagMax, r.Drain.Round(time.Millisecond))
	row("CPU s/1M samples: nodes+consumer", "%.2f", r.PubCPUPerM)
	row("CPU s/1M samples: 3-server cluster", "%.2f", r.ClusterCPUPerM)
	row("lost, duplicated (samples)", "%d, %d", r.Lost, r.DupSamples)
	row("dups caught by window, redelivered", "%d, %d", r.CaughtDups, r.Redelivered)
	if r.Lost != 0 || r.RingDropped+r.PumpFailed+r.BufferCap+r.BufferShutdown != 0 {
		row("counted by the nodes", "%d ring drops, %d failed in the pump, %d over the buffer cap, %d left in the buffer at shutdown",
			r.RingDropped, r.PumpFailed, r.BufferCap, r.BufferShutdown)
	}
	if r.Options.Faults {
		row("partitioned node in, out", "%d, %d", r.PartitionedIn, r.PartitionedOut)
		for _, f := range r.Faults {
			row("fault", "%s", f)
		}
	}
	row("/varz (n1)", "%v", r.Varz)
	row("/jsz (n1)", "%v", r.Jsz)
	return b.String()
}
