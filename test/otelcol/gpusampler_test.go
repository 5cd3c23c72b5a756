package otelcol_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testVersion is the version the test binary is built with
// (`gpusampler version` prints it; resources carry it as service.version).
const testVersion = "0.0.0-otelcol-test"

// gpusamplerBin is the gpusampler binary built from this checkout by
// TestMain.
var gpusamplerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpusampler-otelcol")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gpusamplerBin = filepath.Join(dir, "gpusampler")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-ldflags", "-X main.version="+testVersion, "-o", gpusamplerBin,
		"./cmd/gpusampler")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build gpusampler: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// node is one `gpusampler run` process over two simulated GPUs, its stdout
// (a stdout output, the twin) in a file.
type node struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdout string
	stderr *os.File
	exited chan struct{}
}

// startNode runs gpusampler with the config text (host node1, two
// simulated GPUs, its state in a temporary directory) and kills it if the
// test ends first.
func startNode(t testing.TB, config string) *node {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gpusampler.toml")
	config = fmt.Sprintf("[agent]\n  hostname = \"node1\"\n  state_dir = %q\n  stats_interval = \"1s\"\n\n%s", filepath.Join(dir, "state"), config)
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, stdout: filepath.Join(dir, "stdout.jsonl"), exited: make(chan struct{})}
	out, err := os.Create(n.stdout)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if n.stderr, err = os.Create(filepath.Join(dir, "stderr.log")); err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(gpusamplerBin, "run", "--config", cfg, "--backend", "sim", "--gpus", "2", "--profile", "training", "--stats")
	n.cmd.Stdout, n.cmd.Stderr = out, n.stderr
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.cmd.Wait(); close(n.exited) }()
	t.Cleanup(func() {
		select {
		case <-n.exited:
		default:
			n.cmd.Process.Kill()
			<-n.exited
		}
		n.stderr.Close()
	})
	return n
}

// running fails the test if the process has exited.
func (n *node) running() {
	n.t.Helper()
	select {
	case <-n.exited:
		n.t.Fatalf("gpusampler exited: %v\n%s", n.cmd.ProcessState, n.log())
	default:
	}
}

func (n *node) log() string {
	data, _ := os.ReadFile(n.stderr.Name())
	return string(data)
}

// Stop sends SIGTERM and waits until gpusampler has exited (its outputs
// flushed): it must exit cleanly.
func (n *node) Stop() {
	n.t.Helper()
	if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		n.t.Fatal(err)
	}
	select {
	case <-n.exited:
	case <-time.After(liveness):
		n.cmd.Process.Kill()
		n.t.Fatalf("gpusampler still running %v after SIGTERM:\n%s", liveness, n.log())
	}
	if !n.cmd.ProcessState.Success() {
		n.t.Fatalf("gpusampler: %v\n%s", n.cmd.ProcessState, n.log())
	}
}

// finalStat returns a counter of output name from the final stats that
// gpusampler prints to stderr at exit (--stats): a "key=value" of the
// output's section, 0 when the section does not list it (zero counters
// are left out). It fails the test when there is no such section.
func (n *node) finalStat(name, key string) float64 {
	n.t.Helper()
	log := n.log()
	i := strings.Index(log, "gpusampler final stats:")
	if i < 0 {
		n.t.Fatalf("no final stats in gpusampler's log:\n%s", log)
	}
	in := false
	for _, l := range strings.Split(log[i:], "\n")[1:] {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && (f[0] == "output" || f[0] == "gpu"):
			in = f[0] == "output" && f[1] == name
			if !in {
				continue
			}
		case !in:
			continue
		}
		for _, kv := range f {
			if v, ok := strings.CutPrefix(kv, key+"="); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					n.t.Fatalf("final stats %s: %v", kv, err)
				}
				return x
			}
		}
	}
	if !strings.Contains(log[i:], "output "+name+" ") {
		n.t.Fatalf("no final stats of output %s:\n%s", name, log[i:])
	}
	return 0
}

// twinLine is one line of the stdout output's json format.
type twinLine struct {
	Type string `json:"type"`
	Time int64  `json:"time"`
	Host string `json:"host"`
	// sample
	GPU       int     `json:"gpu"`
	UUID      string  `json:"uuid"`
	Metric    string  `json:"metric"`
	Value     float64 `json:"value"`
	PointRead bool    `json:"point_read"`
	// device
	Index         int    `json:"index"`
	Name          string `json:"name"`
	PCIBusID      string `json:"pci_bus_id"`
	Serial        string `json:"serial"`
	DriverVersion string `json:"driver_version"`
	VBIOSVersion  string `json:"vbios_version"`
	Simulated     bool   `json:"simulated"`
}

// selfLine is a self-metrics line of the json format.
type selfLine struct {
	Scope  string             `json:"scope"`
	Output string             `json:"output"`
	Fields map[string]float64 `json:"fields"`
}

// twin is what the stdout twin printed.
type twin struct {
	devices map[int]twinLine // by index, the newest identity
	samples []twinLine
	selfs   []selfLine
}

// Samples returns how many samples the twin has printed so far.
func (n *node) Samples() int {
	data, _ := os.ReadFile(n.stdout)
	return bytes.Count(data, []byte(`{"type":"sample"`))
}

// readTwin parses the twin's whole stdout.
func (n *node) readTwin() twin {
	n.t.Helper()
	f, err := os.Open(n.stdout)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	tw := twin{devices: map[int]twinLine{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l twinLine
		var self selfLine
		err := json.Unmarshal(sc.Bytes(), &self)
		if err == nil && !bytes.HasPrefix(sc.Bytes(), []byte(`{"type":"self"`)) {
			err = json.Unmarshal(sc.Bytes(), &l)
		}
		if err != nil {
			n.t.Fatalf("twin line %q: %v", sc.Text(), err)
		}
		switch l.Type {
		case "device":
			tw.devices[l.Index] = l
		case "sample":
			tw.samples = append(tw.samples, l)
		case "":
			tw.selfs = append(tw.selfs, self)
		}
	}
	if err := sc.Err(); err != nil {
		n.t.Fatal(err)
	}
	return tw
}

// outputStat returns the newest value of a self-metric field of output
// name (scope output or output_detail), and whether one was printed.
func (tw twin) outputStat(name, field string) (float64, bool) {
	v, ok := 0.0, false
	for _, s := range tw.selfs {
		if s.Output != name {
			continue
		}
		if x, has := s.Fields[field]; has {
			v, ok = x, true
		}
	}
	return v, ok
}

// diff reports, at most 10 each, the lines of want that got lacks and the
// lines of got that want lacks (repeats count), sorted.
func diff(want, got []string) (missing, extra []string) {
	n := map[string]int{}
	for _, l := range want {
		n[l]++
	}
	for _, l := range got {
		n[l]--
	}
	for _, l := range slices.Sorted(maps.Keys(n)) {
		for ; n[l] > 0 && len(missing) < 10; n[l]-- {
			missing = append(missing, l)
		}
		for ; n[l] < 0 && len(extra) < 10; n[l]++ {
			extra = append(extra, l)
		}
	}
	return missing, extra
}

// attrString renders attributes sorted by key.
func attrString(m map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%s", k, m[k])
	}
	return b.String()
}
