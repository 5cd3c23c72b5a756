package accounting

import (
	"time"

	"github.com/gpusampler/gpusampler/record"
)

// Engine is what the attribution resolver sets attribution on
// (*sampler.Engine; attribution.ProcessTarget).
type Engine interface {
	Devices() []record.Device
	SetAttribution(index int, a record.Attribution) bool
	ProcessPIDs(index int) []uint32
	SetProcessAttribution(index int, byPID map[uint32]record.Attribution)
}

// Target wraps an Engine for the attribution resolver: every device
// attribution it sets reaches the accountant first, with the time it took
// effect (now, on the engine's clock), so that samples taken before it
// stay with the previous owner however late they are drained.
type Target struct {
	Engine
	acct *Accountant
	now  func() time.Time
}

// Target returns eng wrapped for the resolver; now is the engine's clock
// (time.Now when nil).
func (a *Accountant) Target(eng Engine, now func() time.Time) *Target {
	if now == nil {
		now = time.Now
	}
	return &Target{Engine: eng, acct: a, now: now}
}

// SetAttribution records the change with the accountant, then sets it on
// the engine.
func (t *Target) SetAttribution(index int, a record.Attribution) bool {
	t.acct.SetOwner(index, a, t.now().UnixNano())
	return t.Engine.SetAttribution(index, a)
}
