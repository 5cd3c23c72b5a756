package rpc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record"
)

// deadlineOutput records the deadline of each Write's context.
type deadlineOutput struct{ got []time.Time }

func (d *deadlineOutput) Write(ctx context.Context, _ *record.Batch) error {
	dl, _ := ctx.Deadline()
	d.got = append(d.got, dl)
	return nil
}

func (d *deadlineOutput) Close() error { return nil }

// The plugin side hands its output the call's deadline less the hop's
// margin (the deadline budget), so that a slow sink's error reaches the
// host before the host's call times out; a call without a deadline passes
// none on.
func TestServerWriteKeepsHopMargin(t *testing.T) {
	out := &deadlineOutput{}
	s := NewServer(func(t *config.Table, _ Env) (record.Output, error) { t.Finish(); return out, nil }, nil)
	ctx := context.Background()
	if _, err := s.Configure(ctx, &proto.ConfigureRequest{ProtocolVersion: proto.ProtocolVersion_PROTOCOL_VERSION_1}); err != nil {
		t.Fatal(err)
	}
	call := time.Now().Add(time.Hour)
	cctx, cancel := context.WithDeadline(ctx, call)
	defer cancel()
	if _, err := s.Write(cctx, &proto.WriteRequest{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, &proto.WriteRequest{Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if len(out.got) != 2 || !out.got[0].Equal(call.Add(-time.Second)) || !out.got[1].IsZero() {
		t.Fatalf("output deadlines %v; want %v (the call's less 1 s), then none", out.got, call.Add(-time.Second))
	}
}

type panicOutput struct{}

func (panicOutput) Write(context.Context, *record.Batch) error { panic("boom") }
func (panicOutput) Close() error                               { return nil }

// A panic in an output's Write is returned as a retryable error: in a
// process shared by several outputs it must not end the others.
func TestServerWriteRecoversPanic(t *testing.T) {
	s := NewServer(func(t *config.Table, _ Env) (record.Output, error) { t.Finish(); return panicOutput{}, nil }, nil)
	ctx := context.Background()
	if _, err := s.Configure(ctx, &proto.ConfigureRequest{ProtocolVersion: proto.ProtocolVersion_PROTOCOL_VERSION_1}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the lock is released: a second Write is answered too
		_, err := s.Write(ctx, &proto.WriteRequest{Seq: 1})
		if err == nil || record.Classify(statusError(err)) != record.KindRetryable || !strings.Contains(err.Error(), "write panicked: boom") {
			t.Fatalf("Write: %v, want a retryable error naming the panic", err)
		}
	}
}
