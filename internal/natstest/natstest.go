// Package natstest runs a real nats-server for tests: Debian's nats-server
// package (the nats-server binary, 2.9 or newer) as a child process of the
// test, on a free loopback port, with JetStream in a temporary directory
// and a generated config file, the way internal/influxtest runs influxd.
// The server is a process rather than a library so that the main module
// does not depend on nats-server's code. Tests only.
//
// A test that needs the server fails when nats-server is missing, unless
// -short was asked for (then it is skipped).
package natstest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Binary is the server executable looked up in PATH.
const Binary = "nats-server"

// startTimeout bounds how long Start waits for the server to listen and
// Shutdown for it to exit after SIGTERM (then it is killed).
const startTimeout = 30 * time.Second

// Server is one nats-server process.
//
// Concurrency: the methods are called from the test's goroutine.
type Server struct {
	tb   testing.TB
	cmd  *exec.Cmd
	exit chan struct{} // closed once the process was waited for
	dir  string
	port int
}

type options struct {
	port       int
	storeDir   string
	user, pass string
	maxPayload int32
}

// Option adjusts the server's options before it starts.
type Option func(*options)

// WithPort sets the port (for a restart on the same port).
func WithPort(port int) Option { return func(o *options) { o.port = port } }

// WithStoreDir sets the JetStream store directory.
func WithStoreDir(dir string) Option { return func(o *options) { o.storeDir = dir } }

// WithAuth requires username/password.
func WithAuth(user, password string) Option {
	return func(o *options) { o.user, o.pass = user, password }
}

// WithMaxPayload sets max_payload.
func WithMaxPayload(n int32) Option { return func(o *options) { o.maxPayload = n } }

// Start starts a server with JetStream, waits until it accepts clients and
// stops it when the test ends.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		if testing.Short() {
			tb.Skipf("%s not installed (Debian package nats-server); skipped under -short", Binary)
		}
		tb.Fatalf("%s not installed: install Debian's nats-server package (as root: scripts/test-deps.sh, which make test runs first)", Binary)
	}
	o := options{port: -1}
	for _, f := range opts {
		f(&o)
	}
	dir := tb.TempDir()
	if o.storeDir == "" {
		o.storeDir = filepath.Join(dir, "jetstream")
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "host: \"127.0.0.1\"\nport: %d\nports_file_dir: %s\n", o.port, strconv.Quote(dir))
	fmt.Fprintf(&conf, "jetstream {\n  store_dir: %s\n}\n", strconv.Quote(o.storeDir))
	if o.user != "" {
		fmt.Fprintf(&conf, "authorization {\n  user: %s\n  password: %s\n}\n", strconv.Quote(o.user), strconv.Quote(o.pass))
	}
	if o.maxPayload > 0 {
		fmt.Fprintf(&conf, "max_payload: %d\n", o.maxPayload)
	}
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	logPath := filepath.Join(dir, "nats.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, "-c", confPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", Binary, err)
	}
	s := &Server{tb: tb, cmd: cmd, exit: make(chan struct{}), dir: dir}
	go func() {
		_ = cmd.Wait()
		close(s.exit)
	}()
	tb.Cleanup(s.Shutdown)
	fail := func(format string, a ...any) {
		s.Shutdown()
		log, _ := os.ReadFile(logPath)
		tb.Fatalf("%s: %s\n%s", Binary, fmt.Sprintf(format, a...), log)
	}
	// The server writes its ports file once it listens.
	portsFile := filepath.Join(dir, fmt.Sprintf("%s_%d.ports", filepath.Base(bin), cmd.Process.Pid))
	deadline := time.Now().Add(startTimeout)
	for s.port == 0 {
		select {
		case <-s.exit:
			fail("exited at start")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			fail("no ports file within %v", startTimeout)
		}
		s.port = readPort(portsFile)
	}
	// Listening is not yet serving: wait until a client connects.
	for {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(o.user, o.pass), nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return s
		}
		select {
		case <-s.exit:
			fail("exited at start")
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			fail("no client connection within %v: %v", startTimeout, err)
		}
	}
}

// readPort returns the client port from the server's ports file, 0 while
// the file is missing or incomplete.
func readPort(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var ports struct {
		Nats []string `json:"nats"`
	}
	if json.Unmarshal(data, &ports) != nil || len(ports.Nats) == 0 {
		return 0
	}
	u := ports.Nats[0]
	p, err := strconv.Atoi(u[strings.LastIndexByte(u, ':')+1:])
	if err != nil {
		return 0
	}
	return p
}

// ClientURL is the URL clients connect to.
func (s *Server) ClientURL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// Addr is the client listener's address.
func (s *Server) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: s.port} }

// Shutdown stops the server gracefully (SIGTERM: JetStream flushes its
// store) and waits for it to exit; a server that does not exit in time is
// killed. A second call returns at once.
func (s *Server) Shutdown() {
	select {
	case <-s.exit:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(startTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exit
		s.tb.Errorf("%s did not exit within %v of SIGTERM: killed", Binary, startTimeout)
	}
}

// Kill ends the server at once (SIGKILL: an outage as a crash or the OOM
// killer makes it, with no flush of JetStream's store) and waits for it to
// exit. Start again with WithPort and WithStoreDir to restart it where it
// was. A call after the process exited returns at once.
func (s *Server) Kill() {
	select {
	case <-s.exit:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.exit
}

// Port is the client listener's port.
func (s *Server) Port() int { return s.port }

// WaitForShutdown waits until the process has exited (Shutdown already
// waits; kept for tests written against the embedded server's API).
func (s *Server) WaitForShutdown() { <-s.exit }

// Connect connects a plain client to s, closed when the test ends.
func Connect(t testing.TB, s *Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
