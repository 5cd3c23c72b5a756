package plugins_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/plugins"
)

// A plugin flooding its log reaches the host's log only up to the rate
// limit: with the clock stopped, exactly LogBurst of its lines are logged,
// every other one is counted dropped (Stats.LogDropped, plugin_log_dropped),
// and the drops are said once.
func TestPluginLogFloodRateLimited(t *testing.T) {
	const flood = 5000
	opts := fastOptions(t, "flood", map[string]any{"log_flood": flood})
	log, logs := testLogger(t, "flood")
	opts.Logger = log
	stopped := time.Unix(1_000_000, 0)
	opts.Now = func() time.Time { return stopped }
	c, err := plugins.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	logged := func() int { return strings.Count(logs.String(), "msg=flood") }
	for deadline := time.Now().Add(2 * time.Minute); logged()+int(c.Stats().LogDropped) < flood; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // liveness bound
			t.Fatalf("after 2 minutes: %d flood lines logged, %d dropped, want %d in all", logged(), c.Stats().LogDropped, flood)
		}
	}
	if got, want := logged(), plugins.LogBurst; got != want {
		t.Errorf("%d flood lines logged with the clock stopped, want the burst, %d", got, want)
	}
	dropped := uint64(flood - plugins.LogBurst)
	if got := c.Stats().LogDropped; got != dropped {
		t.Errorf("Stats.LogDropped = %d, want %d", got, dropped)
	}
	if v, ok := fieldValue(c.ReportStats(nil), "plugin_log_dropped"); !ok || v != float64(dropped) {
		t.Errorf("plugin_log_dropped = %v (present %v), want %d", v, ok, dropped)
	}
	if n := warnLines(logs.String(), "plugin log over its rate limit"); n != 1 {
		t.Errorf("the drops were said %d times, want once", n)
	}
}
