package agent_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

// [attribution] hpc_job_mapping_dir puts the job on the engine's device
// identity (from where every output carries it); changing the section is a
// restart, not a reload.
func TestAgentAttribution(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "1"), []byte("4711\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bs := &builds{outs: map[string][]*memOut{}}
	reg := bs.registry()
	doc := base + "[attribution]\nhpc_job_mapping_dir = \"" + dir + "\"\n"
	src, err := sim.New(sim.Options{GPUs: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(src, mustParse(t, reg, doc), agent.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for a.Engine().Devices()[1].HPCJob == "" {
		time.Sleep(5 * time.Millisecond)
	}
	devs := a.Engine().Devices()
	if got := [2]record.Attribution{devs[0].Attribution, devs[1].Attribution}; got != [2]record.Attribution{{}, {HPCJob: "4711"}} {
		t.Fatalf("attribution %+v", got)
	}
	err = a.Reload(mustParse(t, reg, base))
	if err == nil || !strings.Contains(err.Error(), "[attribution]") {
		t.Fatalf("reload changing [attribution]: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
