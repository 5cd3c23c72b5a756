package nats_test

import (
	"cmp"
	"slices"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// collector subscribes to a subject pattern and decodes what arrives.
type collector struct {
	t   testing.TB
	nc  *natsgo.Conn
	sub *natsgo.Subscription

	mu       sync.Mutex
	subjects []string
	recs     []*stream.Records
}

func collect(t testing.TB, s *natstest.Server, pattern string) *collector {
	t.Helper()
	c := &collector{t: t, nc: natstest.Connect(t, s)}
	sub, err := c.nc.SubscribeSync(pattern)
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	c.sub = sub
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// drain decodes every message that arrived up to now (after out's
// connection and ours round-tripped the server).
func (c *collector) drain(out *natsout.Output) []*stream.Records {
	c.t.Helper()
	if out != nil {
		if err := out.Conn().Flush(); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.nc.Flush(); err != nil {
		c.t.Fatal(err)
	}
	for {
		m, err := c.sub.NextMsg(20 * time.Millisecond)
		if err != nil {
			break
		}
		r, err := stream.DecodeMsg(m)
		if err != nil {
			c.t.Fatalf("decode %s: %v", m.Subject, err)
		}
		c.mu.Lock()
		c.subjects = append(c.subjects, m.Subject)
		c.recs = append(c.recs, r)
		c.mu.Unlock()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.recs)
}

func (c *collector) samples(out *natsout.Output) []record.Sample {
	var all []record.Sample
	for _, r := range c.drain(out) {
		all = append(all, r.Batch.Samples...)
	}
	return all
}

func newOutput(t testing.TB, s *natstest.Server, cfg natsout.Config, opts ...natsout.Option) *natsout.Output {
	t.Helper()
	cfg.Servers = []string{s.ClientURL()}
	out, err := natsout.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	return out
}

func sortSamples(s []record.Sample) {
	slices.SortStableFunc(s, func(a, b record.Sample) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Metric, b.Metric), cmp.Compare(a.TimeNS, b.TimeNS))
	})
}
