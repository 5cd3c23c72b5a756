package telegraf_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/influxdata/telegraf"
	"github.com/influxdata/telegraf/metric"
)

// accumulator collects metrics (a stand-in for Telegraf's agent, without
// telegraf/testutil).
type accumulator struct {
	mu      sync.Mutex
	metrics []telegraf.Metric
	errs    []error
}

func (a *accumulator) add(m string, f map[string]any, tags map[string]string, t ...time.Time) {
	tm := time.Now()
	if len(t) > 0 {
		tm = t[0]
	}
	a.AddMetric(metric.New(m, tags, f, tm))
}

func (a *accumulator) AddFields(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}
func (a *accumulator) AddGauge(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}
func (a *accumulator) AddCounter(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}
func (a *accumulator) AddSummary(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}
func (a *accumulator) AddHistogram(m string, f map[string]any, t map[string]string, ts ...time.Time) {
	a.add(m, f, t, ts...)
}
func (a *accumulator) AddMetric(m telegraf.Metric) {
	a.mu.Lock()
	a.metrics = append(a.metrics, m)
	a.mu.Unlock()
}
func (*accumulator) SetPrecision(time.Duration) {}
func (a *accumulator) AddError(err error) {
	a.mu.Lock()
	a.errs = append(a.errs, err)
	a.mu.Unlock()
}
func (*accumulator) WithTracking(int) telegraf.TrackingAccumulator { panic("tracking not used") }

func (a *accumulator) snapshot() ([]telegraf.Metric, []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]telegraf.Metric(nil), a.metrics...), append([]error(nil), a.errs...)
}

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
