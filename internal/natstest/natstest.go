// Package natstest runs a real nats-server in the test process (DESIGN.md
// §6): a free loopback port, JetStream in a temporary directory. Tests only.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Option adjusts the server's options before it starts.
type Option func(*server.Options)

// WithPort sets the port (for a restart on the same port).
func WithPort(port int) Option { return func(o *server.Options) { o.Port = port } }

// WithStoreDir sets the JetStream store directory.
func WithStoreDir(dir string) Option { return func(o *server.Options) { o.StoreDir = dir } }

// WithAuth requires username/password.
func WithAuth(user, password string) Option {
	return func(o *server.Options) { o.Username, o.Password = user, password }
}

// WithMaxPayload sets max_payload.
func WithMaxPayload(n int32) Option { return func(o *server.Options) { o.MaxPayload = n } }

// Start starts a server with JetStream and stops it when the test ends.
func Start(t testing.TB, opts ...Option) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	for _, f := range opts {
		f(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect connects a plain client to s, closed when the test ends.
func Connect(t testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
