package telegraf_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/telegraf/nvidiasmitest"
	"github.com/influxdata/telegraf"
)

// accumulator collects metrics (a stand-in for Telegraf's agent, without
// telegraf/testutil).
type accumulator = nvidiasmitest.Accumulator

// waitFor polls until cond holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// testLogger is a telegraf.Logger on t.Logf.
type testLogger struct{ t *testing.T }

func (testLogger) Level() telegraf.LogLevel    { return telegraf.Debug }
func (testLogger) AddAttribute(string, any)    {}
func (l testLogger) Errorf(f string, a ...any) { l.t.Logf("E! "+f, a...) }
func (l testLogger) Error(a ...any)            { l.t.Log(append([]any{"E!"}, a...)...) }
func (l testLogger) Warnf(f string, a ...any)  { l.t.Logf("W! "+f, a...) }
func (l testLogger) Warn(a ...any)             { l.t.Log(append([]any{"W!"}, a...)...) }
func (l testLogger) Infof(f string, a ...any)  { l.t.Logf("I! "+f, a...) }
func (l testLogger) Info(a ...any)             { l.t.Log(append([]any{"I!"}, a...)...) }
func (l testLogger) Debugf(f string, a ...any) { l.t.Logf("D! "+f, a...) }
func (l testLogger) Debug(a ...any)            { l.t.Log(append([]any{"D!"}, a...)...) }
func (l testLogger) Tracef(string, ...any)     {}
func (l testLogger) Trace(...any)              {}
func (l testLogger) String() string            { return fmt.Sprint("test logger") }
