package otelcol_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// outage is how long the collector is down in TestCollectorOutageDisk: the
// scenario's length, not a bound on anything.
const outage = 20 * time.Second

// The collector stopped for 20 s mid-run, the output behind a disk buffer:
// when it is back, it holds every sample the twin printed, once: nothing
// lost across the outage, nothing delivered twice.
func TestCollectorOutageDiskIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpusampler and a collector through a 20 s outage")
	}
	c := startCollector(t)
	buf := filepath.Join(t.TempDir(), "otel.buf")
	n := startNode(t, twinBlock+otelBlock(c, "grpc", fmt.Sprintf(`  buffer = "disk"
  buffer_dir = %q
  retry_initial = "50ms"
  retry_max = "1s"
  buffer_close_timeout = "2m"`, buf)))
	waitFor(t, "the collector's first points", func() bool {
		n.running()
		return c.Sink.Points() > 0
	})
	c.Stop()
	down := n.Samples()
	time.Sleep(outage)
	n.running()
	queued := n.Samples() - down
	c.Start()
	// Delivered again: the backlog first (a disk buffer delivers in
	// order), then what came after the restart.
	restarted := time.Now()
	waitFor(t, "a point sampled after the collector came back", func() bool {
		n.running()
		for _, p := range flatten(c.Sink.all()) {
			if p.TimeNS > restarted.UnixNano() {
				return true
			}
		}
		return false
	})
	n.Stop()
	tw := n.readTwin()
	ps := flatten(c.Sink.all())
	checkRaw(t, tw, ps)
	retries := n.finalStat("otel", "retries")
	if queued == 0 || retries == 0 {
		t.Fatalf("the twin printed %d samples during the outage and the buffer retried %v times: no outage seen", queued, retries)
	}
	t.Logf("%d samples printed during the %v outage, held on disk (%v retries) and delivered once", queued, outage, retries)
}

// resourceExhausted is the status a collector answers when it throttles:
// RESOURCE_EXHAUSTED with a RetryInfo of delay (OTLP: the client may retry,
// after at least that delay).
func resourceExhausted(t *testing.T, delay time.Duration) error {
	st, err := status.New(codes.ResourceExhausted, "test collector: throttled").
		WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

// A real collector throttling (its exporter refusing with
// RESOURCE_EXHAUSTED and a RetryInfo of 2 s: the OTLP receiver answers the
// gRPC status as is, and HTTP 429 with Retry-After: 2): the output counts
// the server's hint, offers the refused batch again no sooner than the
// hint says, and the collector ends up with every sample once.
func TestCollectorThrottlesIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("runs gpusampler and a collector")
	}
	const hint = 2 * time.Second
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "-"), func(t *testing.T) {
			c := startCollector(t)
			n := startNode(t, twinBlock+otelBlock(c, protocol, `  buffer = "memory"
  retry_initial = "10ms"
  retry_max = "10s"
  buffer_close_timeout = "2m"`))
			waitFor(t, "the collector's first points", func() bool {
				n.running()
				return c.Sink.Points() > 0
			})
			c.Sink.RefuseNext(2, resourceExhausted(t, hint))
			waitFor(t, "two refusals and a batch taken after them", func() bool {
				n.running()
				calls := c.Sink.Calls()
				refused := 0
				for _, c := range calls {
					if c.refused {
						refused++
					} else if refused == 2 {
						return true
					}
				}
				return false
			})
			n.Stop()
			// Each offer after a refusal came no sooner than the hint (a
			// lower bound: a loaded machine only waits longer).
			calls := c.Sink.Calls()
			for i := 1; i < len(calls); i++ {
				if calls[i-1].refused {
					if gap := calls[i].at.Sub(calls[i-1].at); gap < hint {
						t.Errorf("offered again %v after a refusal with a %v retry hint", gap, hint)
					}
				}
			}
			tw := n.readTwin()
			checkRaw(t, tw, flatten(c.Sink.all()))
			if hints := n.finalStat("otel", "retry_hints"); hints < 2 {
				t.Errorf("the output counted %v retry hints, the collector sent 2", hints)
			}
		})
	}
}
