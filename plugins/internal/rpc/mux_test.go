package rpc

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record"
)

// named records what reaches one instance's output.
type named struct {
	name string
	log  *muxLog
}

type muxLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *muxLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *muxLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

func (n *named) Write(_ context.Context, b *record.Batch) error {
	n.log.add(n.name + " write " + strconv.Itoa(int(b.Seq)) + " samples " + strconv.Itoa(len(b.Samples)))
	return nil
}

func (n *named) Close() error {
	n.log.add(n.name + " close")
	return nil
}

// codeOf is the status code behind a Client's error (codes.OK if none).
func codeOf(err error) codes.Code {
	var re *remoteError
	if errors.As(err, &re) {
		return re.code
	}
	return codes.OK
}

// muxConn serves a MuxServer whose instances are named outputs over an
// in-memory connection (key "fail" in a block is refused).
func muxConn(t *testing.T, log *muxLog) proto.OutputClient {
	oc, _ := muxServe(t, log)
	return oc
}

// muxServe is muxConn, with the MuxServer served.
func muxServe(t *testing.T, log *muxLog) (proto.OutputClient, *MuxServer) {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(ServerOptions()...)
	mux := NewMuxServer(func(tb *config.Table, env Env) (record.Output, error) {
		var fail bool
		tb.Bool("fail", &fail)
		if fail {
			tb.Errorf("fail", "refused")
		}
		tb.Finish()
		return &named{name: env.Name + "/" + env.Kind, log: log}, nil
	}, nil)
	proto.RegisterOutputServer(srv, mux)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", append(DialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return proto.NewOutputClient(conn), mux
}

// A closed instance is kept for one final Health; instances whose host
// never asks again (one given up as wedged) are not kept for good: the
// oldest go beyond maxClosed. The final Health still answers for a recent
// one.
func TestMuxServerForgetsClosedInstances(t *testing.T) {
	oc, mux := muxServe(t, &muxLog{})
	ctx := context.Background()
	var last *Client
	for i := range 3 * maxClosed {
		last = NewClient(Instance(oc, strconv.Itoa(i)), nil)
		if err := last.Configure(ctx, ConfigureInput{Name: "o", Kind: "k", Catalog: catalog.Default()}); err != nil {
			t.Fatal(err)
		}
		if err := last.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mux.mu.Lock()
	kept := len(mux.closed)
	mux.mu.Unlock()
	if kept > maxClosed {
		t.Fatalf("%d closed instances kept, want at most %d", kept, maxClosed)
	}
	if err := last.Health(ctx); err != nil {
		t.Fatalf("final Health of the last closed instance: %v", err)
	}
	if err := last.Health(ctx); status.Code(err) != codes.FailedPrecondition && codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("second Health after close: %v, want FailedPrecondition (forgotten)", err)
	}
}

// One process, several outputs: each instance is configured, written and
// closed on its own; closing one leaves the others serving; a refused
// block leaves no instance behind; a call that names no instance, or one
// that is not configured, is refused.
func TestMuxServerInstances(t *testing.T) {
	log := &muxLog{}
	oc := muxConn(t, log)
	ctx := context.Background()
	cfg := func(c *Client, name, kind string, block map[string]any) error {
		return c.Configure(ctx, ConfigureInput{Name: name, Kind: kind, Config: block, Catalog: catalog.Default()})
	}
	a := NewClient(Instance(oc, "1"), nil)
	b := NewClient(Instance(oc, "2"), nil)
	if err := cfg(a, "a", "influxdb", nil); err != nil {
		t.Fatal(err)
	}
	if err := cfg(b, "b", "nats", nil); err != nil {
		t.Fatal(err)
	}
	// the same instance twice is refused
	if err := cfg(NewClient(Instance(oc, "1"), nil), "a2", "influxdb", nil); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("second Configure of instance 1: %v, want FailedPrecondition", err)
	}
	// a refused block leaves no instance: the same name configures afterwards
	bad := NewClient(Instance(oc, "3"), nil)
	err := cfg(bad, "c", "telegraf", map[string]any{"fail": true})
	if ce, ok := err.(*ConfigError); !ok || !slices.Equal(ce.Errors, []KeyError{{Key: "fail", Msg: "refused"}}) {
		t.Fatalf("refused block: %v", err)
	}
	if err := bad.Write(ctx, &record.Batch{Seq: 1}); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("write to a refused instance: %v, want FailedPrecondition", err)
	}
	c := NewClient(Instance(oc, "3"), nil)
	if err := cfg(c, "c", "telegraf", nil); err != nil {
		t.Fatal(err)
	}
	samples := func(n int) []record.Sample { return make([]record.Sample, n) }
	for _, w := range []struct {
		c   *Client
		seq uint64
		n   int
	}{{a, 1, 3}, {b, 1, 5}, {c, 1, 1}, {a, 2, 2}} {
		if err := w.c.Write(ctx, &record.Batch{Seq: w.seq, Samples: samples(w.n)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Write(ctx, &record.Batch{Seq: 3}); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("write after close: %v, want FailedPrecondition", err)
	}
	if err := b.Write(ctx, &record.Batch{Seq: 2, Samples: samples(4)}); err != nil {
		t.Fatalf("the other instance after one closed: %v", err)
	}
	if err := b.Health(ctx); err != nil {
		t.Fatal(err)
	}
	// a call without an instance header is refused
	if _, err := oc.Write(ctx, &proto.WriteRequest{Seq: 1}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("write without instance: %v, want InvalidArgument", err)
	}
	// the refused block's output was built, then closed at once
	want := []string{"c/telegraf close", "a/influxdb write 1 samples 3", "b/nats write 1 samples 5", "c/telegraf write 1 samples 1",
		"a/influxdb write 2 samples 2", "a/influxdb close", "b/nats write 2 samples 4"}
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("outputs saw\n%q\nwant\n%q", got, want)
	}
}
