package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// node is one simulated gpusampler node: a real agent (engine, pumps,
// buffer, the real NATS output) over simulated GPUs.
type node struct {
	host   string
	agent  *agent.Agent
	dialer *partitionDialer
	count  *counter
	mu     sync.Mutex
	out    *natsout.Output
	err    error
	done   chan struct{}
}

// nodeConfig is a node's configuration file: the NATS output with
// JetStream into the fleet's stream and a memory buffer (so that an outage
// costs nothing), beside the counting output that sees what the engine
// produced.
func nodeConfig(host string, urls []string, encoding string, flush time.Duration) string {
	agentFlush := ""
	if flush > 0 {
		agentFlush = fmt.Sprintf("flush_interval = %q\n", flush.String())
	}
	return fmt.Sprintf(`
[agent]
hostname = %q
%s
[[outputs.nats]]
servers = ["%s"]
encoding = %q
jetstream = true
stream = %q
reconnect_wait = "250ms"
ack_timeout = "5s"
buffer = "memory"
retry_initial = "100ms"
retry_max = "1s"

[[outputs.fleetcount]]
`, host, agentFlush, strings.Join(urls, `", "`), encoding, streamName)
}

// newNode builds a node; o.Keep asks its counter to keep every sample.
func newNode(host string, o Options, urls []string) (*node, error) {
	n := &node{host: host, dialer: &partitionDialer{}, count: newCounter(host, o.Keep), done: make(chan struct{})}
	if o.Encoding == "influx" {
		// Line protocol carries the performance state as a tag, not as a
		// sample (Telegraf's schema; see package stream): what goes in is
		// what that encoding can bring out.
		n.count.skip = catalog.MetricPState
	}
	nk := natsout.Kind()
	nk.Build = func(o *outputs.Block, env outputs.BuildEnv) (record.Output, error) {
		c, err := outputs.OptionsOf[natsout.Config](o)
		if err != nil {
			return nil, err
		}
		out, err := natsout.New(c, natsout.WithName(o.Name), natsout.WithHost(env.Host), natsout.WithLogger(env.Logger),
			natsout.WithCatalog(env.Catalog), natsout.WithNATSOptions(natsgo.SetCustomDialer(n.dialer)))
		if err != nil {
			return nil, err
		}
		n.mu.Lock()
		n.out = out
		n.mu.Unlock()
		return out, nil
	}
	ck := outputs.Kind{Kind: "fleetcount", Build: func(*outputs.Block, outputs.BuildEnv) (record.Output, error) {
		return n.count, nil
	}}
	reg := outputs.NewRegistry(nk, ck)
	cfg, err := appconfig.Parse(host+".toml", []byte(nodeConfig(host, urls, o.Encoding, o.FlushInterval)), appconfig.Options{Registry: reg})
	if err != nil {
		return nil, err
	}
	src, err := sim.New(sim.Options{GPUs: o.GPUs, Seed: hash(host)})
	if err != nil {
		return nil, err
	}
	n.agent, err = agent.New(src, cfg, agent.Options{Registry: reg, Hostname: host, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", host, err)
	}
	return n, nil
}

func (n *node) run(ctx context.Context) {
	defer close(n.done)
	if err := n.agent.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		n.err = fmt.Errorf("node %s: %w", n.host, err)
	}
}

// stats returns the NATS output's counters.
func (n *node) stats() natsout.Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.out == nil {
		return natsout.Stats{}
	}
	return n.out.Stats()
}

// counter is an output that counts (and fingerprints) every sample the
// engine hands it: what went in. It never fails.
type counter struct {
	host string
	hh   uint64
	keep bool
	skip catalog.MetricID // a metric not counted (0: none)
	mu   sync.Mutex
	n    uint64
	fp   uint64
	kept []Record
}

func newCounter(host string, keep bool) *counter {
	return &counter{host: host, hh: hash(host), keep: keep}
}

// Write counts b's samples.
func (c *counter) Write(_ context.Context, b *record.Batch) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range b.Samples {
		if c.skip != 0 && s.Metric == c.skip {
			continue
		}
		c.n++
		c.fp += fingerprint(c.hh, s)
		if c.keep {
			c.kept = append(c.kept, Record{Host: c.host, Sample: s})
		}
	}
	return nil
}

// Close does nothing.
func (c *counter) Close() error { return nil }

func (c *counter) totals() (n, fp uint64, kept []Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.fp, c.kept
}

// Record is one sample with the host that sent it.
type Record struct {
	Host string
	record.Sample
}

// hash is FNV-1a of s.
func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// fingerprint identifies a sample of host (hashed: hh) whole: device,
// metric, flags, time and value. The sum of the fingerprints of a set of
// samples is the same whatever their order, and differs (but for a 2^-64
// chance) when one is missing, doubled or altered.
func fingerprint(hh uint64, s record.Sample) uint64 {
	h := mix(hh ^ uint64(s.Device)<<48 ^ uint64(s.Metric)<<32 ^ uint64(s.Flags))
	h = mix(h ^ uint64(s.TimeNS))
	return mix(h ^ math.Float64bits(s.Value))
}

// partitionDialer dials the node's NATS connections; Partition closes them
// and refuses new ones until Heal — the node's client is cut off from
// every server, as by a firewall rule that resets its connections.
type partitionDialer struct {
	d       net.Dialer
	mu      sync.Mutex
	blocked bool
	conns   []net.Conn
}

// Dial dials unless partitioned.
func (p *partitionDialer) Dial(network, addr string) (net.Conn, error) {
	p.mu.Lock()
	blocked := p.blocked
	p.mu.Unlock()
	if blocked {
		return nil, errors.New("fleet: partitioned")
	}
	c, err := p.d.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		c.Close()
		return nil, errors.New("fleet: partitioned")
	}
	p.conns = append(p.conns, c)
	return c, nil
}

// Partition cuts the node off.
func (p *partitionDialer) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Heal lets the node reconnect.
func (p *partitionDialer) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blocked = false
}

// waitDone waits for every node's Run to return, at most d.
func waitDone(nodes []*node, d time.Duration) error {
	deadline := time.After(d)
	for _, n := range nodes {
		select {
		case <-n.done:
		case <-deadline:
			return fmt.Errorf("node %s still running %v after the end", n.host, d)
		}
	}
	return nil
}
