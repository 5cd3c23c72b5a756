package fleet

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// serverEnv names the environment variable that turns this program (the
// fleet-sim command or the test binary) into one cluster server: its value
// is the server's JSON serverConfig. See ServeIfChild.
const serverEnv = "GPUSAMPLER_FLEET_SERVER"

// serverConfig is one server of the cluster.
type serverConfig struct {
	Name        string `json:"name"`
	Port        int    `json:"port"`
	ClusterPort int    `json:"cluster_port"`
	HTTPPort    int    `json:"http_port"`
	Routes      string `json:"routes"`
	StoreDir    string `json:"store_dir"`
}

// ServeIfChild runs one NATS server and exits when this process was started
// as a cluster server (by Cluster); otherwise it returns at once. Call it
// first thing in main (and in TestMain). The server lives until its stdin
// closes (the parent died or stopped it) or it is killed.
func ServeIfChild() {
	v := os.Getenv(serverEnv)
	if v == "" {
		return
	}
	var c serverConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		fmt.Fprintln(os.Stderr, "fleet server:", err)
		os.Exit(2)
	}
	o := &server.Options{ServerName: c.Name, Host: "127.0.0.1", Port: c.Port, HTTPHost: "127.0.0.1", HTTPPort: c.HTTPPort,
		JetStream: true, StoreDir: c.StoreDir, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: "fleet", Host: "127.0.0.1", Port: c.ClusterPort},
		Routes:  server.RoutesFromStr(c.Routes)}
	s, err := server.NewServer(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet server:", err)
		os.Exit(2)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "fleet server: not ready after 30s")
		os.Exit(2)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Shutdown()
	s.WaitForShutdown()
	os.Exit(0)
}

// Cluster is three nats-server processes joined by routes, JetStream on
// each, every one a child of this process so that it can be killed for
// real and its CPU time read.
type Cluster struct {
	dir     string
	servers []*child
}

type child struct {
	cfg   serverConfig
	mu    sync.Mutex
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// cpu: CPU seconds of this server's earlier processes (killed ones).
	cpu float64
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// StartCluster starts three servers with their stores under dir and waits
// until each accepts clients.
func StartCluster(dir string) (*Cluster, error) {
	ports, err := freePorts(9)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	var routes []string
	for i := range 3 {
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(ports[3*i+1]))
	}
	for i := range 3 {
		cfg := serverConfig{Name: "n" + strconv.Itoa(i+1), Port: ports[3*i], ClusterPort: ports[3*i+1], HTTPPort: ports[3*i+2],
			Routes: strings.Join(routes, ","), StoreDir: filepath.Join(dir, "n"+strconv.Itoa(i+1))}
		c.servers = append(c.servers, &child{cfg: cfg})
	}
	for i := range c.servers {
		if err := c.start(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// URLs returns the client URLs of the servers.
func (c *Cluster) URLs() []string {
	var u []string
	for _, s := range c.servers {
		u = append(u, "nats://127.0.0.1:"+strconv.Itoa(s.cfg.Port))
	}
	return u
}

// MonitorURL returns server i's monitoring endpoint (/varz, /jsz).
func (c *Cluster) MonitorURL(i int) string {
	return "http://127.0.0.1:" + strconv.Itoa(c.servers[i].cfg.HTTPPort)
}

func (c *Cluster) start(i int) error {
	s := c.servers[i]
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	js, _ := json.Marshal(s.cfg)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serverEnv+"="+string(js))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("server %s: %w", s.cfg.Name, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("server %s did not start (%q, %v)", s.cfg.Name, line, err)
	}
	s.mu.Lock()
	s.cmd, s.stdin = cmd, stdin
	s.mu.Unlock()
	return nil
}

// Kill kills server i (SIGKILL: no shutdown, no flush).
func (c *Cluster) Kill(i int) error {
	s := c.servers[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("server not running")
	}
	cpu := procCPU(s.cmd.Process.Pid)
	if err := s.cmd.Process.Kill(); err != nil {
		return err
	}
	_ = s.cmd.Wait()
	if st := s.cmd.ProcessState; st != nil {
		cpu = (st.UserTime() + st.SystemTime()).Seconds()
	}
	s.cpu += cpu
	s.cmd = nil
	return nil
}

// Restart starts server i again on its ports and store.
func (c *Cluster) Restart(i int) error { return c.start(i) }

// CPU returns the CPU seconds all server processes used so far.
func (c *Cluster) CPU() float64 {
	var t float64
	for _, s := range c.servers {
		s.mu.Lock()
		t += s.cpu
		if s.cmd != nil {
			t += procCPU(s.cmd.Process.Pid)
		}
		s.mu.Unlock()
	}
	return t
}

// Stop stops every server (closing stdin: a clean shutdown).
func (c *Cluster) Stop() {
	for _, s := range c.servers {
		s.mu.Lock()
		if s.cmd != nil {
			s.stdin.Close()
			_ = s.cmd.Wait()
			s.cmd = nil
		}
		s.mu.Unlock()
	}
}

// procCPU returns the user+system CPU seconds of process pid from
// /proc/PID/stat (0 where that cannot be read).
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields count from after ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100
