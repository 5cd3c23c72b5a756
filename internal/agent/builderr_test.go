package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// typedNilRegistry has kind "tnil", whose Build hands back a nil *memOut
// in a record.Output: with an error when label is "err", without one
// otherwise (a buggy kind).
func typedNilRegistry() *outputs.Registry {
	return outputs.NewRegistry(outputs.Kind{
		Kind: "tnil",
		Parse: func(t *config.Table) any {
			var label string
			t.String("label", &label)
			return label
		},
		Build: func(o *outputs.Block, _ outputs.BuildEnv) (record.Output, error) {
			var m *memOut
			if o.Options.(string) == "err" {
				return m, errors.New("cannot connect")
			}
			return m, nil
		},
	}, outputs.Kind{
		Kind: "mem",
		Parse: func(t *config.Table) any {
			var label string
			t.String("label", &label)
			return label
		},
		Build: func(*outputs.Block, outputs.BuildEnv) (record.Output, error) { return &memOut{}, nil },
	})
}

// No output build error panics, at start (strict or not) or on a reload:
// a kind that hands back a typed nil (with or without an error) and an
// aggregate wrapper whose journal cannot be opened (a directory in its
// place) are each an error naming the output, and a reload that meets one
// is refused with the running config kept.
func TestOutputBuildErrorsDoNotPanic(t *testing.T) {
	reg := typedNilRegistry()
	journalDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(journalDir, "aggregate.journal"), 0o755); err != nil {
		t.Fatal(err)
	}
	const head = `
[agent]
stats_interval = "1h"
[sampler]
drain_interval = "20ms"
field_interval = "20ms"
[[outputs.mem]]
name = "steady"
`
	cases := []struct{ name, block, want string }{
		{"typed nil with an error", `
[[outputs.tnil]]
name = "broken"
label = "err"
`, "cannot connect"},
		{"typed nil without an error", `
[[outputs.tnil]]
name = "broken"
label = "ok"
`, "built no output"},
		{"unreadable aggregate journal", fmt.Sprintf(`
[[outputs.mem]]
name = "broken"
aggregate = "1s"
buffer = "disk"
buffer_dir = %q
`, journalDir), "aggregate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := head + tc.block
			newAgent := func(strict bool) (*agent.Agent, error) {
				src, err := sim.New(sim.Options{GPUs: 1, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				return agent.New(src, mustParse(t, reg, doc), agent.Options{Registry: reg, Strict: strict,
					Logger: slog.New(slog.DiscardHandler)})
			}
			checkErr := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: no error", what)
				}
				if !strings.Contains(err.Error(), "output broken") || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: error %q, want it to name output broken and say %q", what, err, tc.want)
				}
			}
			_, err := newAgent(true)
			checkErr("strict start", err)

			// Not strict: the agent runs, the output waits to be retried;
			// a reload that meets the error keeps the running config.
			a, err := newAgent(false)
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			if _, ok := a.Outputs()["broken"]; ok {
				t.Error("broken output running")
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			if err := a.Reload(mustParse(t, reg, head)); err != nil {
				t.Fatalf("reload without the broken output: %v", err)
			}
			err = a.Reload(mustParse(t, reg, doc))
			checkErr("reload", err)
			if _, ok := a.Outputs()["steady"]; !ok {
				t.Error("steady output gone after a refused reload")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
