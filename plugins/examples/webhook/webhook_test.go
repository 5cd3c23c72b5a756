package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/plugins/examples/webhook"
	"github.com/gpusampler/gpusampler/plugins/sdktest"
	"github.com/gpusampler/gpusampler/record"
)

// hook is a webhook target that records posted messages; the first fail
// posts answer 503.
type hook struct {
	mu    sync.Mutex
	texts []string
	fail  int
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fail > 0 {
		h.fail--
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var m struct{ Text string }
	json.Unmarshal(body, &m)
	h.texts = append(h.texts, m.Text)
}

func (h *hook) all() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.texts, "\n")
}

func alertBatches(t0 int64) []*record.Batch {
	temp := func(i int, v float64) record.Sample {
		return record.Sample{TimeNS: t0 + int64(i)*1e8, Value: v, Metric: catalog.MetricTempGPU}
	}
	dev := outputtest.Device
	return []*record.Batch{
		{Seq: 1, Devices: []record.Device{dev}, Samples: []record.Sample{temp(0, 70), temp(1, 86), temp(2, 88)}},
		{Seq: 2, Samples: []record.Sample{temp(3, 80)}, Events: []record.Event{
			{Kind: record.EventXID, Device: 0, StartNS: t0, Message: "xid 79: GPU has fallen off the bus"},
			{Kind: record.EventSelf, Device: -1, StartNS: t0, Message: "self metrics"}}},
	}
}

// In process, through the protocol: conformance, key errors, alerts.
func TestWebhookSDK(t *testing.T) {
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	cfg := func() map[string]any {
		return map[string]any{"url": srv.URL, "batch_interval": "1h", "thresholds": []any{"temperature_gpu > 85"}}
	}
	outputtest.Run(t, outputtest.Harness{New: func(t *testing.T) record.Output {
		out, err := sdktest.Start(t, webhook.New(), cfg())
		if err != nil {
			t.Fatal(err)
		}
		return out
	}})

	_, err := sdktest.Start(t, webhook.New(), map[string]any{"url": "ftp://x", "thresholds": []any{"temp > 85", "power_draw >> x"},
		"colour": "red"})
	var keys []string
	for _, k := range sdktest.KeyErrors(err) {
		keys = append(keys, k.Key)
	}
	slices.Sort(keys)
	if got := strings.Join(keys, " "); got != "colour thresholds[0] thresholds[1] url" {
		t.Errorf("key errors %q (%v)", got, err)
	}

	out, err := sdktest.Start(t, webhook.New(), cfg())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range alertBatches(1_700_000_000_000_000_000) {
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Close(); err != nil { // Close posts what is queued
		t.Fatal(err)
	}
	got := h.all()
	for _, want := range []string{"[sdktest-host] GPU 0 Test GPU ALERT: temperature_gpu > 85 (now 86)",
		"GPU 0 Test GPU resolved: temperature_gpu > 85 (now 80)", "GPU 0 Test GPU xid: xid 79: GPU has fallen off the bus"} {
		if !strings.Contains(got, want) {
			t.Errorf("posted %q\nlacks %q", got, want)
		}
	}
	if strings.Count(got, "ALERT") != 1 || strings.Contains(got, "self metrics") {
		t.Errorf("posted %q: want one ALERT (88 stays above), no self event", got)
	}
}

// Built as a binary and run under the real supervisor: alerts reach the
// webhook, with retries on 503.
func TestWebhookPluginIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("integration: builds the plugin")
	}
	bin := filepath.Join(t.TempDir(), "gpusampler-webhook")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/gpusampler-webhook").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	h := &hook{fail: 1}
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := plugins.Start(plugins.Options{Name: "alerts", Kind: "plugin", Host: "node7",
		Command: func() *exec.Cmd { return exec.Command(bin) },
		Config:  map[string]any{"url": srv.URL, "batch_interval": "50ms", "thresholds": []any{"temperature_gpu > 85"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range alertBatches(time.Now().UnixNano()) {
		if err := c.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Minute) // a hang, not a slow machine
	for !strings.Contains(h.all(), "xid 79") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := h.all()
	if !strings.Contains(got, "[node7] GPU 0 Test GPU ALERT: temperature_gpu > 85") || !strings.Contains(got, "xid 79") {
		t.Fatalf("posted %q", got)
	}
}

// A simulated device's alert names it once as simulated: the simulator's
// name already says "(simulated)" and is not marked a second time.
func TestWebhookMarksSimulatedOnce(t *testing.T) {
	h := &hook{}
	srv := httptest.NewServer(h)
	defer srv.Close()
	out, err := sdktest.Start(t, webhook.New(), map[string]any{"url": srv.URL, "batch_interval": "1h", "thresholds": []any{"temperature_gpu > 85"}})
	if err != nil {
		t.Fatal(err)
	}
	dev := outputtest.Device
	dev.Name, dev.Simulated = "NVIDIA H200 (simulated)", true
	t0 := int64(1_700_000_000_000_000_000)
	b := &record.Batch{Seq: 1, Devices: []record.Device{dev}, Samples: []record.Sample{{TimeNS: t0, Value: 90, Metric: catalog.MetricTempGPU}}}
	if err := out.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	got := h.all()
	if !strings.Contains(got, "GPU 0 NVIDIA H200 (simulated) ALERT") || strings.Count(got, "(simulated)") != 1 {
		t.Errorf("posted %q: want the device named \"NVIDIA H200 (simulated)\", marked once", got)
	}
}

// Alerts whose post fails for good (the receiver is down past the retries)
// are reported through the error contract: the next Write is refused as
// permanent, naming them (the host counts that batch as failed), or, when
// no Write comes after, Close does; alerts_lost counts them.
func TestWebhookReportsLostAlerts(t *testing.T) {
	h := &hook{fail: 1 << 30} // down for good
	srv := httptest.NewServer(h)
	defer srv.Close()
	cfg := map[string]any{"url": srv.URL, "batch_interval": "20ms", "max_retries": 0, "thresholds": []any{"temperature_gpu > 85"}}
	out, err := sdktest.Start(t, webhook.New(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	batches := alertBatches(1_700_000_000_000_000_000)
	if err := out.Write(context.Background(), batches[0]); err != nil {
		t.Fatal(err)
	}
	// the next post fails; a later Write says so
	var werr error
	for seq, deadline := uint64(10), time.Now().Add(2*time.Minute); werr == nil; seq++ { // a hang, not a slow machine
		if time.Now().After(deadline) {
			t.Fatal("no Write reported the lost alerts within 2 minutes")
		}
		werr = out.Write(context.Background(), &record.Batch{Seq: seq})
		time.Sleep(5 * time.Millisecond)
	}
	if !record.IsPermanent(werr) || !strings.Contains(werr.Error(), "alerts lost") {
		t.Fatalf("Write after a lost post: %v, want a permanent error naming the lost alerts", werr)
	}
	if err := out.Write(context.Background(), &record.Batch{Seq: 1000}); err != nil {
		t.Fatalf("the loss is reported once: %v", err)
	}

	// lost at the final flush: Close reports it
	out2, err := sdktest.Start(t, webhook.New(), map[string]any{"url": srv.URL, "batch_interval": "1h", "max_retries": 0,
		"thresholds": []any{"temperature_gpu > 85"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := out2.Write(context.Background(), batches[0]); err != nil {
		t.Fatal(err)
	}
	if err := out2.Close(); err == nil || !strings.Contains(err.Error(), "alerts lost") {
		t.Fatalf("Close with alerts lost at the final flush: %v, want an error naming them", err)
	}
	var _ record.StatsReporter = webhook.New()
}
