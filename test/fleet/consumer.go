package fleet

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpusampler/gpusampler/stream"
)

// ledger is the consumer side's record of what came out of the stream:
// de-duplicated by Nats-Msg-Id, so that a message stored twice (a
// duplicate JetStream's window did not catch) is counted, and a message
// delivered twice (redelivered after a consumer died before its ack) is
// not mistaken for one.
type ledger struct {
	keep bool
	mu   sync.Mutex
	// seen: message id → stream sequence of its first copy.
	seen map[string]uint64
	// Unique messages and samples, their fingerprint sum.
	msgs, samples, fp uint64
	// Bytes of unique messages: payload, and payload + headers + subject.
	payload, wire uint64
	// Stream duplicates (a second stream sequence for one id): messages
	// and samples. Redeliveries of one stream sequence.
	dupMsgs, dupSamples, redelivered uint64
	// floor: the durable's ack floor when the consumer was restarted;
	// reread: messages delivered after that at or below it.
	floor, reread uint64
	decodeErrs    uint64
	firstErr      error
	// lat: end-to-end latency (driver timestamp → here) per sample, in
	// milliseconds, capped at the last bucket.
	lat   []uint64
	since int64 // only samples from this time on count for latency
	kept  []Record
	// perHost: unique samples per host (the subscribe table's figure).
	perHost map[string]uint64
}

const latBuckets = 600_000 // 10 minutes in ms

func newLedger(keep bool) *ledger {
	return &ledger{keep: keep, seen: map[string]uint64{}, lat: make([]uint64, latBuckets), perHost: map[string]uint64{}}
}

// handle records m; the caller acks it afterwards.
func (l *ledger) handle(m jetstream.Msg, now time.Time) {
	meta, err := m.Metadata()
	if err != nil {
		l.fail(err)
		return
	}
	h := m.Headers()
	id := h.Get(natsgo.MsgIdHdr)
	l.mu.Lock()
	if l.floor > 0 && meta.Sequence.Stream <= l.floor {
		l.reread++
	}
	first, dup := l.seen[id]
	if !dup {
		l.seen[id] = meta.Sequence.Stream
	}
	l.mu.Unlock()
	if dup && first == meta.Sequence.Stream {
		l.mu.Lock()
		l.redelivered++
		l.mu.Unlock()
		return
	}
	recs, err := stream.Decode(h, m.Data())
	if err != nil {
		l.fail(err)
		return
	}
	host := recs.Host
	if host == "" {
		if t := strings.Split(m.Subject(), "."); len(t) > 1 {
			host = t[1]
		}
	}
	hh := hash(host)
	nowNS := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	if dup {
		l.dupMsgs++
		l.dupSamples += uint64(len(recs.Batch.Samples))
		return
	}
	l.msgs++
	l.payload += uint64(len(m.Data()))
	l.wire += uint64(len(m.Data()) + len(m.Subject()) + headerBytes(h))
	for _, s := range recs.Batch.Samples {
		l.samples++
		l.fp += fingerprint(hh, s)
		if s.TimeNS >= l.since {
			ms := (nowNS - s.TimeNS) / 1e6
			l.lat[min(max(ms, 0), latBuckets-1)]++
		}
		if l.keep {
			l.kept = append(l.kept, Record{Host: host, Sample: s})
		}
	}
	l.perHost[host] += uint64(len(recs.Batch.Samples))
}

func (l *ledger) setSince(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since = t.UnixNano()
}

func (l *ledger) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.decodeErrs++
	if l.firstErr == nil {
		l.firstErr = err
	}
}

// headerBytes is the size of h as NATS sends it ("NATS/1.0\r\n", a
// "Key: value\r\n" line each, a closing "\r\n").
func headerBytes(h natsgo.Header) int {
	n := 12
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// quantile returns the q-quantile of the latency histogram in ms.
func (l *ledger) quantile(q float64) int {
	var total uint64
	for _, c := range l.lat {
		total += c
	}
	if total == 0 {
		return 0
	}
	want := uint64(q * float64(total))
	var acc uint64
	for ms, c := range l.lat {
		acc += c
		if acc > want {
			return ms
		}
	}
	return latBuckets - 1
}

// consumerGroup is W workers sharing one durable pull consumer: the
// messages are spread over them, each acked after it is recorded.
type consumerGroup struct {
	urls    []string
	durable string
	workers int
	led     *ledger
	mu      sync.Mutex
	conns   []*natsgo.Conn
	wg      sync.WaitGroup
	cancel  context.CancelFunc
}

// start connects the workers and starts fetching.
func (g *consumerGroup) start() error {
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	for range g.workers {
		nc, err := natsgo.Connect(strings.Join(g.urls, ","), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(250*time.Millisecond))
		if err != nil {
			cancel()
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			cancel()
			return err
		}
		// Right after a server restart the consumer's lookup can time out
		// while its replicas elect a leader: try for a while.
		cons, err := retry(ctx, 2*time.Minute, func(c context.Context) (jetstream.Consumer, error) {
			return js.Consumer(c, streamName, g.durable)
		})
		if err != nil {
			cancel()
			nc.Close()
			return err
		}
		g.mu.Lock()
		g.conns = append(g.conns, nc)
		g.mu.Unlock()
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for ctx.Err() == nil {
				batch, err := cons.Fetch(256, jetstream.FetchMaxWait(500*time.Millisecond))
				if err != nil {
					if nc.IsClosed() {
						return
					}
					time.Sleep(100 * time.Millisecond) // a server restarting: try again
					continue
				}
				for m := range batch.Messages() {
					g.led.handle(m, time.Now())
					_ = m.Ack()
				}
			}
		}()
	}
	return nil
}

// kill drops every worker's connection without acking what it holds (as
// when the consumer process dies).
func (g *consumerGroup) kill() {
	g.cancel()
	g.mu.Lock()
	for _, nc := range g.conns {
		nc.Close()
	}
	g.conns = nil
	g.mu.Unlock()
	g.wg.Wait()
}

// ensureConsumer creates the durable consumer (idempotent).
func ensureConsumer(ctx context.Context, js jetstream.JetStream, durable string) error {
	_, err := js.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{Durable: durable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxAckPending: 20_000,
		DeliverPolicy: jetstream.DeliverAllPolicy, Replicas: 3})
	return err
}

// sortRecords orders records by host, device, metric, time, value.
func sortRecords(r []Record) {
	sort.Slice(r, func(i, j int) bool {
		a, b := r[i], r[j]
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.Device != b.Device {
			return a.Device < b.Device
		}
		if a.Metric != b.Metric {
			return a.Metric < b.Metric
		}
		if a.TimeNS != b.TimeNS {
			return a.TimeNS < b.TimeNS
		}
		return a.Value < b.Value
	})
}

var errNotDrained = errors.New("fleet: the consumer did not catch up with the stream")
