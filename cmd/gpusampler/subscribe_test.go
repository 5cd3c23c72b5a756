package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/natstest"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
)

var updateSubscribe = flag.Bool("update-subscribe", false, "rewrite testdata/subscribe_*.golden")

// syncBuffer is a bytes.Buffer safe for the subscriber and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// fleetBase is the fixed stream's clock: samples at fleetBase+…, the table
// rendered at fleetBase+5s.
var fleetBase = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// publishFleet publishes a fixed stream from three nodes, each in another
// encoding, and returns how many messages it published.
func publishFleet(t *testing.T, url string) uint64 {
	t.Helper()
	ns := func(d time.Duration) int64 { return fleetBase.Add(d).UnixNano() }
	var msgs uint64
	for i, node := range []struct{ host, enc string }{{"node1", "json"}, {"node2.example", "protobuf"}, {"node3", "influx"}} {
		cfg := natsout.DefaultConfig()
		cfg.Servers, cfg.Encoding = []string{url}, node.enc
		out, err := natsout.New(cfg, natsout.WithHost(node.host), natsout.WithGlobalTags(map[string]string{"cluster": "c1"}))
		if err != nil {
			t.Fatal(err)
		}
		b := &record.Batch{Seq: 1}
		for g := range 2 {
			b.Devices = append(b.Devices, record.Device{Index: g, UUID: "GPU-" + strings.Repeat(string(rune('a'+i)), 8) + "-" + string(rune('0'+g)),
				Name: "NVIDIA H200", MemoryTotalMiB: 143771})
			f := float64(i*10 + g)
			dev := uint16(g)
			at := time.Duration(i*1000+g*500) * time.Millisecond
			b.Samples = append(b.Samples,
				record.Sample{TimeNS: ns(at - time.Second), Value: 100 + f, Device: dev, Metric: catalog.MetricPowerDraw},
				record.Sample{TimeNS: ns(at), Value: 612.5 + f, Device: dev, Metric: catalog.MetricPowerDraw},
				record.Sample{TimeNS: ns(at), Value: 90 + f/2, Device: dev, Metric: catalog.MetricUtilGPU},
				record.Sample{TimeNS: ns(at - 200*time.Millisecond), Value: 70 + f, Device: dev, Metric: catalog.MetricTempGPU},
				record.Sample{TimeNS: ns(at - 200*time.Millisecond), Value: 80 + f, Device: dev, Metric: catalog.MetricTempMemory},
				record.Sample{TimeNS: ns(at - 300*time.Millisecond), Value: 99328 + f, Device: dev, Metric: catalog.MetricMemoryUsed},
			)
		}
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		msgs += out.Stats().Messages
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

func runSubscribeFor(t *testing.T, url, format string) string {
	s := &syncBuffer{}
	var handled atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	o := subscribeOptions{server: url, subject: "gpusampler.>", format: format, interval: time.Hour,
		now: func() time.Time { return fleetBase.Add(5 * time.Second) }, handled: func() { handled.Add(1) }}
	go func() {
		// Subscribed once the first message can arrive: publish after a
		// probe message round-trips.
		done <- runSubscribe(ctx, o, s, os.Stderr)
	}()
	probe, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	deadline := time.Now().Add(2 * time.Minute) // a hang, not a slow machine
	for handled.Load() == 0 && time.Now().Before(deadline) {
		probe.Publish("gpusampler.probe", []byte("not a record"))
		probe.Flush()
		time.Sleep(10 * time.Millisecond)
	}
	before := handled.Load()
	want := publishFleet(t, url)
	for handled.Load() < before+want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if handled.Load() < before+want {
		t.Fatalf("subscriber handled %d messages, want %d", handled.Load()-before, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return s.String()
}

func TestSubscribeFleetTableIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	srv := natstest.Start(t)
	got := runSubscribeFor(t, srv.ClientURL(), "table")
	golden(t, "testdata/subscribe_table.golden", got)
}

func TestSubscribeReEmitsJSONIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	srv := natstest.Start(t)
	got := runSubscribeFor(t, srv.ClientURL(), "json")
	for _, want := range []string{`"host":"node1"`, `"host":"node2.example"`, `"host":"node3"`, `"uuid":"GPU-cccccccc-1"`,
		`"metric":"power_draw","value":632.5`} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	if n := strings.Count(got, `"type":"sample"`); n != 36 {
		t.Errorf("%d samples re-emitted, want 36", n)
	}
}

func TestSubscribeUnreachable(t *testing.T) {
	code, _, stderr := runCLI(t, "subscribe", "--server", "nats://127.0.0.1:1")
	if code != 1 || !strings.Contains(stderr, "gpusampler subscribe: connect to nats://127.0.0.1:1:") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "subscribe", "--format", "xml")
	if code != 2 || !strings.Contains(stderr, `unknown format "xml"`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *updateSubscribe {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update-subscribe)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update-subscribe to accept):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// --user/--password and --token authenticate; secrets may come from the
// environment instead of the command line.
func TestSubscribeAuthIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	srv := natstest.Start(t, natstest.WithAuth("gs", "right"))
	url := srv.ClientURL()
	code, _, stderr := runCLI(t, "subscribe", "--server", url, "--user", "gs", "--password", "wrong")
	if code != 1 || !strings.Contains(strings.ToLower(stderr), "authorization violation") {
		t.Errorf("wrong password: exit %d, stderr %q", code, stderr)
	}
	// The right password from $NATS_PASSWORD: connects, and returns when
	// the context ends.
	t.Setenv("NATS_PASSWORD", "right")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	if code := Main(ctx, []string{"subscribe", "--server", url, "--user", "gs"}, strings.NewReader(""), &out, &errb); code != 0 {
		t.Errorf("right password: exit %d, stderr %q", code, errb.String())
	}
	for _, args := range [][]string{{"--user", "a", "--token", "t"}, {"--password", "p"}} {
		t.Setenv("NATS_PASSWORD", "")
		code, _, stderr := runCLI(t, append([]string{"subscribe", "--server", url}, args...)...)
		if code != 2 {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
