// Command natsrollup is an example stream processor: it subscribes to the
// power subjects that gpusampler nodes publish to NATS, keeps the newest
// power draw of every GPU, and every interval republishes a roll-up — watts
// per host and per cluster (the "cluster" global tag) — as JSON on its own
// subject. Copy it as the pattern for your own processors: subscribe with a
// queue group (so that several instances share the work), decode with
// package stream whatever the encoding, publish the result.
//
//	natsrollup -server nats://nats:4222 -subject 'gpusampler.*.*.power' -out gpusampler.rollup.power
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/stream"
)

// Rollup is what the processor publishes.
type Rollup struct {
	// Time is when the roll-up was made (Unix ns).
	Time int64 `json:"time"`
	// Clusters maps cluster → watts; Hosts maps host → watts.
	Clusters map[string]float64 `json:"clusters"`
	Hosts    map[string]float64 `json:"hosts"`
	// GPUs counts the GPUs summed.
	GPUs int `json:"gpus"`
	// Windows holds, per GPU ("host/uuid"), the power samples this
	// instance received since its previous roll-up: several instances in a
	// queue group each report the windows of the messages they got.
	Windows map[string]Window `json:"windows,omitempty"`
}

// Window summarizes one GPU's power samples over a roll-up interval.
type Window struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
}

// Options configure a processor.
type Options struct {
	Subject, Queue, Out string
	Interval            time.Duration
	// MaxAge drops GPUs not heard from for longer (default 3 intervals).
	MaxAge time.Duration
	Now    func() time.Time
}

type gpuKey struct {
	host string
	uuid string
}

type window struct {
	n             int
	sum, min, max float64
}

type gpuPower struct {
	cluster string
	watts   float64
	timeNS  int64
}

// Processor holds the newest power per GPU.
type Processor struct {
	opts Options
	mu   sync.Mutex
	gpus map[gpuKey]gpuPower
	wins map[gpuKey]*window
}

// Handle folds one message into the state (a nats.MsgHandler).
func (p *Processor) Handle(m *nats.Msg) {
	recs, err := stream.DecodeMsg(m)
	if err != nil {
		return // not ours, or a newer schema: skip
	}
	p.fold(recs)
}

// fold adds one message's records to the state.
func (p *Processor) fold(recs *stream.Records) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range recs.Batch.Samples {
		if s.Metric != catalog.MetricPowerDraw {
			continue
		}
		k := gpuKey{recs.Host, recs.UUID(int(s.Device))}
		w := p.wins[k]
		if w == nil {
			w = &window{min: s.Value, max: s.Value}
			p.wins[k] = w
		}
		w.n++
		w.sum += s.Value
		w.min, w.max = min(w.min, s.Value), max(w.max, s.Value)
		if old, ok := p.gpus[k]; !ok || s.TimeNS >= old.timeNS {
			p.gpus[k] = gpuPower{cluster: recs.Tags["cluster"], watts: s.Value, timeNS: s.TimeNS}
		}
	}
}

// Rollup sums the current state.
func (p *Processor) Rollup() Rollup {
	now := p.opts.Now()
	r := Rollup{Time: now.UnixNano(), Clusters: map[string]float64{}, Hosts: map[string]float64{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, w := range p.wins {
		if r.Windows == nil {
			r.Windows = map[string]Window{}
		}
		r.Windows[k.host+"/"+k.uuid] = Window{Count: w.n, Mean: w.sum / float64(w.n), Min: w.min, Max: w.max}
	}
	clear(p.wins) // the next window starts now
	for k, g := range p.gpus {
		if now.Sub(time.Unix(0, g.timeNS)) > p.opts.MaxAge {
			delete(p.gpus, k) // gone quiet: not part of the fleet's power now
			continue
		}
		r.Hosts[k.host] += g.watts
		r.Clusters[g.cluster] += g.watts
		r.GPUs++
	}
	return r
}

func newProcessor(opts Options) *Processor {
	return &Processor{opts: opts, gpus: map[gpuKey]gpuPower{}, wins: map[gpuKey]*window{}}
}

// Run subscribes on nc and publishes a roll-up every interval until ctx
// ends.
func Run(ctx context.Context, nc *nats.Conn, opts Options) error {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = 3 * opts.Interval
	}
	p := newProcessor(opts)
	sub, err := nc.QueueSubscribe(opts.Subject, opts.Queue, p.Handle)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", opts.Subject, err)
	}
	defer sub.Unsubscribe()
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			data, _ := json.Marshal(p.Rollup())
			if err := nc.Publish(opts.Out, data); err != nil {
				return fmt.Errorf("publish %s: %w", opts.Out, err)
			}
		}
	}
}

func main() {
	server := flag.String("server", nats.DefaultURL, "NATS server URL")
	var o Options
	flag.StringVar(&o.Subject, "subject", "gpusampler.*.*.power", "subjects to roll up")
	flag.StringVar(&o.Queue, "queue", "natsrollup", "queue group (instances share the work)")
	flag.StringVar(&o.Out, "out", "gpusampler.rollup.power", "subject the roll-up is published on")
	flag.DurationVar(&o.Interval, "interval", 5*time.Second, "roll-up interval")
	flag.Parse()
	nc, err := nats.Connect(*server, nats.Name("natsrollup"), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Run(ctx, nc, o); err != nil {
		log.Fatal(err)
	}
}
