package agent

import (
	"log/slog"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// missedNotStarted is sink's missed_not_started in a's health with the
// engine at published samples, sink's pump (when attached) at attached.
func missedNotStarted(t *testing.T, a *Agent, published, attached uint64) uint64 {
	t.Helper()
	st := sampler.Stats{Devices: []sampler.DeviceStats{{Published: published}}}
	if _, ok := a.running["sink"]; ok {
		st.Outputs = []sampler.OutputStats{{Name: "sink", Published: attached}}
	}
	for _, ev := range a.healthEvents(time.Unix(1, 0), nil, st) {
		if ev.Attrs[1].Value == "sink" {
			return uint64(record.FieldValue(ev.Fields, "missed_not_started"))
		}
	}
	t.Fatal("no health for sink")
	return 0
}

func missedAgent(p *pendingOutput) *Agent {
	return &Agent{running: map[string]*appconfig.Output{}, pending: map[string]*pendingOutput{"sink": p},
		lateStart: map[string]uint64{}, log: slog.New(slog.DiscardHandler)}
}

// A block held after some failed attempts (its disk buffer took over at
// 300 samples, 200 after it was configured) missed those 200 for good: the
// figure stays 200 once its output starts, instead of going back to 0.
func TestMissedNotStartedAfterHeldStart(t *testing.T) {
	block := &appconfig.Output{Block: outputs.Block{Kind: "flaky", Name: "sink"}}
	p := &pendingOutput{block: block, published0: 100, held: &heldOutput{}, heldAt: 300}
	a := missedAgent(p)
	a.running["sink"] = block // the held block's pump runs
	if got := missedNotStarted(t, a, 1000, 700); got != 200 {
		t.Fatalf("held: missed_not_started %d, want 200", got)
	}
	a.startedLate(p)
	if got := missedNotStarted(t, a, 1000, 700); got != 200 {
		t.Errorf("started: missed_not_started %d, want 200 (published 100..300 before holding began)", got)
	}
	if got := missedNotStarted(t, a, 5000, 4700); got != 200 {
		t.Errorf("later: missed_not_started %d, want still 200", got)
	}
}

// A held block changed by a reload: what its old buffer held is not
// missed; what is published between the reload and the new block's
// holding is.
func TestMissedNotStartedAfterReloadOfHeldBlock(t *testing.T) {
	old := &appconfig.Output{Block: outputs.Block{Kind: "flaky", Name: "sink", Raw: map[string]any{"label": "1"}}}
	changed := &appconfig.Output{Block: outputs.Block{Kind: "flaky", Name: "sink", Raw: map[string]any{"label": "2"}}}
	p := &pendingOutput{block: old, published0: 100, held: &heldOutput{}, heldAt: 300}
	a := missedAgent(p)
	pending, _ := a.reloadPending(&appconfig.Config{Outputs: []*appconfig.Output{changed}}, false, 1000)
	a.pending = pending
	if got := missedNotStarted(t, a, 1000, 0); got != 200 {
		t.Errorf("right after the reload: missed_not_started %d, want 200 (the old buffer held 300..1000)", got)
	}
	if got := missedNotStarted(t, a, 1500, 0); got != 700 {
		t.Errorf("500 samples after the reload, not held yet: missed_not_started %d, want 700", got)
	}
	// The retry holds it again at 1500, then it starts.
	p2 := a.pending["sink"]
	p2.held, p2.heldAt = &heldOutput{}, 1500
	a.running["sink"] = changed
	a.startedLate(p2)
	if got := missedNotStarted(t, a, 3000, 1500); got != 700 {
		t.Errorf("started: missed_not_started %d, want 700", got)
	}
}
