package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// listener stands in for an output that binds an address.
type listener struct {
	addrs *sync.Map
	addr  string
}

func (l *listener) Write(context.Context, *record.Batch) error { return nil }
func (l *listener) Close() error                               { l.addrs.Delete(l.addr); return nil }

// An exclusive output (it holds its address) is closed before its
// replacement is built on reload; a refused reload restores it.
func TestReloadExclusiveOutput(t *testing.T) {
	var addrs sync.Map
	reg := outputs.NewRegistry(outputs.Kind{
		Kind:      "listen",
		Exclusive: true,
		Parse: func(t *config.Table) any {
			var addr, fail string
			t.String("addr", &addr)
			t.String("fail", &fail)
			return [2]string{addr, fail}
		},
		Build: func(o *outputs.Block, _ outputs.BuildEnv) (record.Output, error) {
			opts := o.Options.([2]string)
			if opts[1] != "" {
				return nil, errors.New(opts[1])
			}
			if _, taken := addrs.LoadOrStore(opts[0], true); taken {
				return nil, fmt.Errorf("address %s in use", opts[0])
			}
			return &listener{addrs: &addrs, addr: opts[0]}, nil
		},
	})
	doc := func(extra string) *appconfig.Config {
		return mustParse(t, reg, "[sampler]\nbackend = \"sim\"\n[[outputs.listen]]\naddr = \":9400\"\n"+extra)
	}
	src, _ := sim.New(sim.Options{GPUs: 1})
	a, err := agent.New(src, doc(""), agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(doc("max_batch = 100\n")); err != nil {
		t.Fatalf("changing an exclusive output: %v", err)
	}
	if err := a.Reload(doc("fail = \"cannot start\"\n")); err == nil {
		t.Fatal("unbuildable reload accepted")
	}
	if _, ok := addrs.Load(":9400"); !ok {
		t.Fatal("the running output was not restored after a refused reload")
	}
	if n := len(a.Engine().Stats().Outputs); n != 1 {
		t.Fatalf("%d outputs after a refused reload, want 1", n)
	}
}
