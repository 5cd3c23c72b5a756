package nats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/natstest"
	"github.com/gpusampler/gpusampler/outputs/all"
	natsout "github.com/gpusampler/gpusampler/outputs/nats"
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
		t.Skip("embedded nats-server")
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
		_, err := config.Parse("cfg.toml", []byte(text), config.Options{Registry: all.Registry()})
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
