package nats_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/natstest"
	"github.com/gpusampler/gpusampler/internal/registry"
	"github.com/gpusampler/gpusampler/outputs"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/record"
)

func TestUnreachableServer(t *testing.T) {
	cfg := natsout.DefaultConfig()
	cfg.Servers = []string{"nats://127.0.0.1:1"}
	cfg.ConnectTimeout = 500 * time.Millisecond
	_, err := natsout.New(cfg, natsout.WithName("fleet"))
	if err == nil || !strings.Contains(err.Error(), "nats: output fleet: connect to nats://127.0.0.1:1:") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

func TestBadCredentialsIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t, natstest.WithAuth("gpusampler", "right"))
	cfg := natsout.DefaultConfig()
	cfg.Servers = []string{s.ClientURL()}
	cfg.Username, cfg.Password = "gpusampler", "wrong"
	_, err := natsout.New(cfg, natsout.WithName("fleet"))
	if err == nil || !strings.Contains(err.Error(), "nats: output fleet: connect to") ||
		!strings.Contains(strings.ToLower(err.Error()), "authorization violation") || !strings.Contains(err.Error(), "check username/password") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
	cfg.Password = "right"
	out, err := natsout.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out.Close()
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ block, want string }{
		{"subject = \"gpusampler.{host}.{gpuid}\"", `cfg.toml:3: outputs.nats[0].subject: "gpusampler.{host}.{gpuid}": unknown placeholder {gpuid}`},
		{"event_subject = \"x.{group}\"", `cfg.toml:3: outputs.nats[0].event_subject: "x.{group}": unknown placeholder {group}`},
		{"subject = \"gpusampler.>.{host}\"", `cfg.toml:3: outputs.nats[0].subject: "gpusampler.>.{host}": token ">": wildcards`},
		{"subject = \"a..{host}\"", `cfg.toml:3: outputs.nats[0].subject: "a..{host}": empty token`},
		{"encoding = \"avro\"", `cfg.toml:3: outputs.nats[0].encoding: unknown value "avro"`},
		{"stream = \"S\"", `cfg.toml:3: outputs.nats[0].stream: set, but jetstream is false`},
		{"username = \"u\"", `cfg.toml:3: outputs.nats[0].username: username and password go together`},
		{"bogus = 1", `cfg.toml:3: outputs.nats[0].bogus: unknown key`},
	} {
		text := "[[outputs.nats]]\nservers = [\"nats://127.0.0.1:4222\"]\n" + tc.block + "\n"
		_, err := appconfig.Parse("cfg.toml", []byte(text), appconfig.Options{Registry: registry.Builtin()})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s", tc.block, err, tc.want)
		}
	}
}

func TestUnknownGlobalTag(t *testing.T) {
	cfg := natsout.DefaultConfig()
	cfg.Subject = "gpusampler.{tag:cluster}.{host}.{gpu}.{group}"
	_, err := natsout.New(cfg, natsout.WithGlobalTags(map[string]string{"rack": "r1"}))
	if err == nil || !strings.Contains(err.Error(), "{tag:cluster}: no such global tag") {
		t.Fatalf("err = %v", err)
	}
}

func TestSanitize(t *testing.T) {
	for in, want := range map[string]string{"node7": "node7", "node7.example.com": "node7_example_com", "a*b>c": "a_b_c",
		"a b\tc": "a_b_c", "$SYS": "_SYS", "a$b": "a$b", "": "_", "GPU-1234": "GPU-1234"} {
		if got := natsout.Sanitize(in); got != want {
			t.Errorf("Sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

// Built through the config (as the agent does, which adds "FILE:LINE:
// output NAME: "), errors carry neither the package nor the output name.
func TestBuildErrorUnprefixed(t *testing.T) {
	text := "[[outputs.nats]]\nservers = [\"nats://127.0.0.1:1\"]\nconnect_timeout = \"300ms\"\n"
	reg := registry.Builtin()
	cfg, err := appconfig.Parse("cfg.toml", []byte(text), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := reg.Lookup("nats")
	_, err = k.Build(&cfg.Outputs[0].Block, outputs.BuildEnv{Host: "h"})
	if err == nil || !strings.HasPrefix(err.Error(), "connect to nats://127.0.0.1:1: ") {
		t.Fatalf("err = %v, want it to start with \"connect to\"", err)
	}
}

// Close is not an outage: nothing is logged as a disconnect or counted.
func TestCloseQuietIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t)
	var logs strings.Builder
	var mu sync.Mutex
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil)
	cfg := natsout.DefaultConfig()
	cfg.Servers = []string{s.ClientURL()}
	out, err := natsout.New(cfg, natsout.WithLogger(slog.New(h)))
	if err != nil {
		t.Fatal(err)
	}
	// nats.go runs the connection's handlers one after another on its own
	// goroutine, the closed handler last: once it has run, so has any
	// disconnect handler that Close set off.
	closed := make(chan struct{})
	out.Conn().SetClosedHandler(func(*natsgo.Conn) { close(closed) })
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	<-closed
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "disconnected") || out.Stats().Disconnects != 0 {
		t.Errorf("Close logged or counted a disconnect: %q, %+v", logs.String(), out.Stats())
	}
	var fields []string
	for _, f := range out.ReportStats(nil) {
		fields = append(fields, f.Key)
	}
	if got := strings.Join(fields, " "); got != "messages bytes splits acked duplicates stored ack_errors disconnects reconnects held held_dropped identities" {
		t.Errorf("ReportStats keys: %s", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Credentials inside a server URL are refused, and the error does not
// print them.
func TestServerURLCredentialsRefused(t *testing.T) {
	for _, servers := range []string{`"nats://u:s3cret@127.0.0.1:4222"`, `"u:s3cret@127.0.0.1"`,
		`"nats://127.0.0.1:4222, nats://tok3n-s3cret@127.0.0.2:4222"`} {
		text := "[[outputs.nats]]\nservers = [" + servers + "]\n"
		_, err := appconfig.Parse("cfg.toml", []byte(text), appconfig.Options{Registry: registry.Builtin()})
		want := "cfg.toml:2: outputs.nats[0].servers: credentials in a server URL: use username/password, token, nkey_seed_file or credentials_file (with ${ENV})"
		if err == nil || err.Error() != want {
			t.Errorf("servers = [%s]:\n got %v\nwant %s", servers, err, want)
		}
	}
}

// A batch with a line line protocol cannot carry (a device identity with a
// newline in its name) is refused as permanent, so that the pump counts
// every record of it, instead of publishing the other lines and counting
// the skipped ones as delivered; nothing of it is published.
func TestUnencodableLineRefusedIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	s := natstest.Start(t)
	cfg := natsout.DefaultConfig()
	cfg.Servers = []string{s.ClientURL()}
	cfg.Encoding = natsout.EncodingInflux
	out, err := natsout.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	bad := record.Device{Index: 0, UUID: "GPU-1", Name: "bad\nname"}
	b := &record.Batch{Seq: 1, Devices: []record.Device{bad},
		Samples: []record.Sample{{TimeNS: 1, Value: 100, Device: 0, Metric: catalog.MetricPowerDraw}}}
	err = out.Write(context.Background(), b)
	if !record.IsPermanent(err) || !strings.Contains(err.Error(), "a line cannot be encoded") {
		t.Fatalf("Write = %v, want a permanent refusal naming the encoding", err)
	}
	if st := out.Stats(); st.Messages != 0 {
		t.Errorf("published %d messages of a refused batch", st.Messages)
	}
}
