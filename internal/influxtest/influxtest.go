// Package influxtest starts a real InfluxDB 1.x server (Debian's influxdb
// package, the influxd binary) for tests: on free loopback ports (HTTP and
// the RPC bind-address), with its meta, data and WAL directories and a
// generated config in the test's temp dir, reporting disabled. It can be
// stopped (the process is killed) and restarted on the same port and data.
//
// A test that needs the server fails when influxd is missing, unless -short
// was given (then it skips): CI installs the package (.ci/run).
package influxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Binary is the server binary looked up in PATH.
const Binary = "influxd"

// Server is one influxd process (and its restarts).
type Server struct {
	// URL is the HTTP base URL ("http://127.0.0.1:PORT").
	URL string
	// Dir holds the config, data and log.
	Dir string

	tb      testing.TB
	bin     string
	conf    string
	cmd     *exec.Cmd
	exited  chan struct{}
	logFile *os.File
}

// Options configure the server.
type Options struct {
	// AuthEnabled turns on HTTP authentication ([http] auth-enabled); then
	// create an admin user first (CreateAdmin).
	AuthEnabled bool
}

// Start starts influxd and waits until it answers /ping. The server is
// stopped when the test ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	bin, err := exec.LookPath(Binary)
	if err != nil {
		if testing.Short() {
			tb.Skipf("%s not installed (Debian package influxdb); skipped under -short", Binary)
		}
		tb.Fatalf("%s not installed: install Debian's influxdb package (as root: scripts/test-deps.sh, which make test runs first)", Binary)
	}
	dir := tb.TempDir()
	httpPort, rpcPort := FreePort(tb), FreePort(tb)
	conf := fmt.Sprintf(`reporting-disabled = true
bind-address = "127.0.0.1:%d"
[meta]
  dir = %q
  logging-enabled = false
[data]
  dir = %q
  wal-dir = %q
  query-log-enabled = false
  trace-logging-enabled = false
[coordinator]
  log-queries-after = "0s"
[http]
  enabled = true
  bind-address = "127.0.0.1:%d"
  auth-enabled = %t
  log-enabled = false
  max-body-size = 0
[monitor]
  store-enabled = false
[subscriber]
  enabled = false
[continuous_queries]
  enabled = false
[logging]
  level = "warn"
`, rpcPort, filepath.Join(dir, "meta"), filepath.Join(dir, "data"), filepath.Join(dir, "wal"), httpPort, opts.AuthEnabled)
	s := &Server{URL: "http://127.0.0.1:" + strconv.Itoa(httpPort), Dir: dir, tb: tb, bin: bin,
		conf: filepath.Join(dir, "influxdb.conf")}
	if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	lf, err := os.Create(filepath.Join(dir, "influxd.log"))
	if err != nil {
		tb.Fatal(err)
	}
	s.logFile = lf
	tb.Cleanup(func() {
		s.Stop()
		lf.Close()
	})
	s.Restart()
	return s
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Restart starts the server (again) on the same ports and directories and
// waits for /ping.
func (s *Server) Restart() {
	s.tb.Helper()
	if s.cmd != nil {
		s.tb.Fatal("influxtest: Restart while running")
	}
	cmd := exec.Command(s.bin, "-config", s.conf)
	cmd.Stdout, cmd.Stderr = s.logFile, s.logFile
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start %s: %v", s.bin, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(s.exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
		}
		select {
		case <-s.exited:
			log, _ := os.ReadFile(s.logFile.Name())
			s.tb.Fatalf("influxd exited at start:\n%s", tail(log))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.logFile.Name())
			s.tb.Fatalf("influxd did not answer /ping within 30s:\n%s", tail(log))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: an outage, not a clean shutdown) and
// waits for it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Result is one statement's result of /query.
type Result struct {
	Series []struct {
		Name    string            `json:"name"`
		Tags    map[string]string `json:"tags"`
		Columns []string          `json:"columns"`
		Values  [][]any           `json:"values"`
	} `json:"series"`
	Error string `json:"error"`
}

// Query runs q (InfluxQL) against db with epoch=ns timestamps; numbers
// decode as json.Number. user/password may be empty.
func (s *Server) Query(db, q string, auth ...string) (Result, error) {
	v := url.Values{"q": {q}, "epoch": {"ns"}}
	if db != "" {
		v.Set("db", db)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, s.URL+"/query", nil)
	if err != nil {
		return Result{}, err
	}
	req.URL.RawQuery = v.Encode()
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out struct {
		Results []Result `json:"results"`
		Error   string   `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return Result{}, fmt.Errorf("query %q: %d: %s", q, resp.StatusCode, body)
	}
	if out.Error != "" {
		return Result{}, fmt.Errorf("query %q: %s", q, out.Error)
	}
	if len(out.Results) == 0 {
		return Result{}, fmt.Errorf("query %q: no result", q)
	}
	if out.Results[0].Error != "" {
		return out.Results[0], fmt.Errorf("query %q: %s", q, out.Results[0].Error)
	}
	return out.Results[0], nil
}

// MustQuery is Query that fails the test on error.
func (s *Server) MustQuery(db, q string) Result {
	s.tb.Helper()
	r, err := s.Query(db, q)
	if err != nil {
		s.tb.Fatal(err)
	}
	return r
}

// CreateDatabase creates db.
func (s *Server) CreateDatabase(db string, auth ...string) {
	s.tb.Helper()
	if _, err := s.Query("", "CREATE DATABASE "+strconv.Quote(db), auth...); err != nil {
		s.tb.Fatal(err)
	}
}

// WriteLP posts raw line protocol to /write?db=&precision=ns and returns
// the status and body.
func (s *Server) WriteLP(db string, lp []byte) (int, string, error) {
	resp, err := http.Post(s.URL+"/write?precision=ns&db="+url.QueryEscape(db), "text/plain", bytes.NewReader(lp))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// Count returns count(field) over measurement in db (0 when empty).
func (s *Server) Count(db, measurement, field string) int64 {
	s.tb.Helper()
	r := s.MustQuery(db, fmt.Sprintf("SELECT count(%q) FROM %q", field, measurement))
	if len(r.Series) == 0 || len(r.Series[0].Values) == 0 {
		return 0
	}
	n, err := r.Series[0].Values[0][1].(json.Number).Int64()
	if err != nil {
		s.tb.Fatal(err)
	}
	return n
}
