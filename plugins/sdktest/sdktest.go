// Package sdktest runs a plugin's output in process, behind the real
// protocol (gRPC over an in-memory connection, the same client and server
// code as a plugin process), so that an author can test a plugin with go
// test alone:
//
//	func TestMySink(t *testing.T) {
//		out, err := sdktest.Start(t, mysink.New(), map[string]any{"url": srv.URL})
//		...
//		outputtest.Run(t, outputtest.Harness{New: ...}) // the conformance suite
//	}
//
// Start configures the output exactly as a host would: key errors come back
// as *KeyErrors. What it does not cover — the process, the handshake,
// supervision — `gpusampler plugin test PATH` checks on the built binary.
package sdktest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/gpusampler/gpusampler/plugins/internal/rpc"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/plugins/sdk"
	"github.com/gpusampler/gpusampler/record"
)

// KeyError is one key the plugin refused.
type KeyError = rpc.KeyError

// Options are optional settings of StartFactory.
type Options struct {
	// Name, Host and GlobalTags are handed to Configure (defaults
	// "sdktest", "sdktest-host").
	Name, Host string
	GlobalTags map[string]string
}

// Start configures out with cfg (the [outputs.plugin.config] table as TOML
// decodes it: string, int64, float64, bool, []any, map[string]any) and
// returns the host-side output that talks to it. The server stops when the
// test ends.
func Start(t testing.TB, out record.Output, cfg map[string]any) (record.Output, error) {
	return StartFactory(t, sdk.OutputFactory(out), cfg, Options{})
}

// StartFactory is Start for an sdk.Factory.
func StartFactory(t testing.TB, f sdk.Factory, cfg map[string]any, opts Options) (record.Output, error) {
	if opts.Name == "" {
		opts.Name = "sdktest"
	}
	if opts.Host == "" {
		opts.Host = "sdktest-host"
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(rpc.ServerOptions()...)
	proto.RegisterOutputServer(srv, rpc.NewServer(f, sdk.Logger()))
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///sdktest", append(rpc.DialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		srv.Stop()
		return nil, err
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	c := &output{rc: rpc.NewClient(proto.NewOutputClient(conn), nil)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.rc.Configure(ctx, rpc.ConfigureInput{Name: opts.Name, Kind: "plugin", Config: cfg, Host: opts.Host,
		GlobalTags: opts.GlobalTags}); err != nil {
		return nil, err
	}
	return c, nil
}

// KeyErrors returns the keys a Start error says the plugin refused.
func KeyErrors(err error) []KeyError {
	var ce *rpc.ConfigError
	if errors.As(err, &ce) {
		return ce.Errors
	}
	return nil
}

// output is the host side: record.Output over the protocol.
type output struct {
	rc     *rpc.Client
	closed bool
}

func (o *output) Write(ctx context.Context, b *record.Batch) error {
	if o.closed {
		return record.ErrClosed
	}
	return o.rc.Write(ctx, b)
}

func (o *output) Close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return o.rc.Close(ctx)
}

// Health asks the output's Health (nil when it has none).
func Health(out record.Output) error {
	o, ok := out.(*output)
	if !ok {
		return errors.New("sdktest: not an output from Start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return o.rc.Health(ctx)
}

// Stats returns the counters the output reports to the host with its
// Health answer (its record.StatsReporter, seen through the protocol; nil
// when it reports none).
func Stats(out record.Output) ([]record.Field, error) {
	o, ok := out.(*output)
	if !ok {
		return nil, errors.New("sdktest: not an output from Start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stats, err := o.rc.HealthStats(ctx)
	if errors.Is(err, rpc.ErrNotHealthy) {
		err = nil
	}
	return stats, err
}
