package prometheus

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/record"
)

func healthEvent(output string, failing, started, failures float64, t int64) record.Event {
	return record.Event{Kind: record.EventSelf, Device: -1, StartNS: t, EndNS: t,
		Attrs: []record.Attr{{Key: "scope", Value: "output_health"}, {Key: "output", Value: output}},
		Fields: []record.Field{{Key: "failing", Value: failing, Int: true}, {Key: "started", Value: started, Int: true},
			{Key: "start_failures", Value: failures, Int: true}}}
}

// /healthz names the outputs the agent's self-metrics report failing: by
// default it still answers as the devices say (200), with
// health_fail_on_outputs it answers 503; once they recover, neither lists
// them.
func TestHealthNamesFailingOutputs(t *testing.T) {
	for _, failOn := range []bool{false, true} {
		o, clk := newTest(t, Options{HealthFailOnOutputs: failOn})
		now := clk.Now().UnixNano()
		b := fullBatch(devices(1), now)
		degraded := healthEvent("nats", 1, 1, 0, now)
		degraded.Fields = append(degraded.Fields, record.Field{Key: "buffer_degraded", Value: 1, Int: true})
		b.Events = append(b.Events, healthEvent("stdout", 0, 1, 0, now), healthEvent("webhook", 1, 0, 3, now),
			healthEvent("influx", 1, 1, 0, now), degraded)
		if err := o.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		code, head := http.StatusOK, "ok: 1 devices sampled within 10s\n"
		if failOn {
			code, head = http.StatusServiceUnavailable, "1 devices sampled within 10s, but outputs are failing:\n"
		}
		want := head + "output influx: failing (plugin crash storm)\n" +
			"output nats: disk buffer cannot write to disk; new batches held in memory (lost on a crash)\n" +
			"output webhook: not started, 3 failed attempts\n"
		if got := get(t, o, "/healthz", code); got != want {
			t.Errorf("health_fail_on_outputs=%v: /healthz\n%q\nwant\n%q", failOn, got, want)
		}
		// Recovered: listed no more.
		clk.Add(time.Second)
		now = clk.Now().UnixNano()
		b = fullBatch(devices(1), now)
		b.Events = append(b.Events, healthEvent("stdout", 0, 1, 0, now), healthEvent("webhook", 0, 1, 0, now),
			healthEvent("influx", 0, 1, 0, now), healthEvent("nats", 0, 1, 0, now))
		if err := o.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if got := get(t, o, "/healthz", http.StatusOK); got != "ok: 1 devices sampled within 10s\n" {
			t.Errorf("health_fail_on_outputs=%v: after recovery /healthz %q", failOn, got)
		}
		o.Close()
	}
}
