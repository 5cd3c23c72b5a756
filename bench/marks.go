package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MarksEnv is the environment variable that names the step-mark FIFO in
// the benchmarked program's environment.
const MarksEnv = "GPUSAMPLER_MARKS"

// Mark is one step mark: the program says phase Name starts at TimeNS
// (its own clock, Unix ns). A phase lasts until the next mark or the end of
// the run.
type Mark struct {
	Name   string
	TimeNS int64
	// Received is set when the line carried no timestamp and the reception
	// time was used instead (later than the program's moment).
	Received bool
}

// ParseMark parses one mark line: "NAME... UNIX_SECONDS" (the last field
// a decimal Unix time, e.g. "step 12 1732960000.123456"), a JSON object
// {"name": "step 12", "t": 1732960000.123456}, or a bare "NAME" (then
// recvNS is used and the mark flagged Received).
func ParseMark(line string, recvNS int64) (Mark, error) {
	line = strings.TrimSpace(line)
	if line == "" {
		return Mark{}, errors.New("empty mark")
	}
	if strings.HasPrefix(line, "{") {
		var j struct {
			Name string      `json:"name"`
			T    json.Number `json:"t"`
		}
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			return Mark{}, fmt.Errorf("mark %q: %v", line, err)
		}
		if j.Name == "" {
			return Mark{}, fmt.Errorf("mark %q: no name", line)
		}
		if j.T == "" {
			return Mark{Name: j.Name, TimeNS: recvNS, Received: true}, nil
		}
		ns, ok := parseUnixSeconds(j.T.String())
		if !ok {
			return Mark{}, fmt.Errorf("mark %q: t %s is not a Unix time in seconds", line, j.T)
		}
		return Mark{Name: j.Name, TimeNS: ns}, nil
	}
	fields := strings.Fields(line)
	if len(fields) >= 2 {
		last := fields[len(fields)-1]
		if ns, ok := parseUnixSeconds(last); ok {
			return Mark{Name: strings.Join(fields[:len(fields)-1], " "), TimeNS: ns}, nil
		}
	}
	return Mark{Name: strings.Join(fields, " "), TimeNS: recvNS, Received: true}, nil
}

// parseUnixSeconds parses a decimal Unix time in seconds ("1732960000.123456")
// exactly to ns; times before 2001 are refused (not a Unix time).
func parseUnixSeconds(s string) (int64, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || sec < 1e9 || sec > math.MaxInt64/int64(time.Second)-1 {
		return 0, false
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	var ns int64
	if frac != "" {
		n, err := strconv.ParseUint(frac, 10, 64)
		if err != nil {
			return 0, false
		}
		ns = int64(n)
		for i := len(frac); i < 9; i++ {
			ns *= 10
		}
	}
	return sec*1e9 + ns, true
}

// MarkReader reads step marks from a FIFO it creates in a private
// temporary directory. Marks are grouped per run: Begin starts a run's
// collection, End returns what arrived up to the moment the run's process
// exited (every line written before exit is read: End waits for a sentinel
// it writes through the same pipe).
//
// Concurrency: one goroutine reads the FIFO; Begin, End and Close are
// called by the runner's goroutine.
type MarkReader struct {
	dir  string
	path string
	f    *os.File

	mu      sync.Mutex
	marks   []Mark
	bad     int
	synced  map[string]chan struct{}
	seq     int
	stopped chan struct{}
}

// NewMarkReader creates the FIFO and starts reading it.
func NewMarkReader() (*MarkReader, error) {
	dir, err := os.MkdirTemp("", "gpusampler-marks-")
	if err != nil {
		return nil, fmt.Errorf("step marks: %w", err)
	}
	path := filepath.Join(dir, "marks")
	if err := mkfifo(path); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("step marks: create fifo: %w", err)
	}
	// Read-write: opening never blocks, and the pipe never reports EOF
	// between writers.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("step marks: open fifo: %w", err)
	}
	m := &MarkReader{dir: dir, path: path, f: f, synced: map[string]chan struct{}{}, stopped: make(chan struct{})}
	go m.read()
	return m, nil
}

// Path is the FIFO's path (the value of MarksEnv).
func (m *MarkReader) Path() string { return m.path }

const syncPrefix = "\x00gpusampler-sync "

func (m *MarkReader) read() {
	defer close(m.stopped)
	sc := bufio.NewScanner(m.f)
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		now := time.Now().UnixNano()
		m.mu.Lock()
		if tok, ok := strings.CutPrefix(line, syncPrefix); ok {
			if ch := m.synced[tok]; ch != nil {
				close(ch)
				delete(m.synced, tok)
			}
			m.mu.Unlock()
			continue
		}
		if strings.TrimSpace(line) != "" {
			if mk, err := ParseMark(line, now); err == nil {
				m.marks = append(m.marks, mk)
			} else {
				m.bad++
			}
		}
		m.mu.Unlock()
	}
}

// Begin discards marks written before now (between runs). It waits up
// to a second for the pipe to be read up to now.
func (m *MarkReader) Begin() {
	m.sync(time.Second)
	m.mu.Lock()
	m.marks, m.bad = nil, 0
	m.mu.Unlock()
}

// End returns the marks written since Begin (in arrival order) and how
// many lines could not be parsed. It waits (up to timeout) until the pipe
// has been read up to now.
func (m *MarkReader) End(timeout time.Duration) ([]Mark, int) {
	m.sync(timeout)
	m.mu.Lock()
	defer m.mu.Unlock()
	out, bad := m.marks, m.bad
	m.marks, m.bad = nil, 0
	return out, bad
}

// sync writes a sentinel line through the pipe and waits until the reader
// has seen it: every line written before is then read.
func (m *MarkReader) sync(timeout time.Duration) {
	m.mu.Lock()
	m.seq++
	tok := strconv.Itoa(m.seq)
	ch := make(chan struct{})
	m.synced[tok] = ch
	m.mu.Unlock()
	if _, err := io.WriteString(m.f, syncPrefix+tok+"\n"); err == nil {
		select {
		case <-ch:
		case <-time.After(timeout):
		case <-m.stopped:
		}
	}
	m.mu.Lock()
	delete(m.synced, tok)
	m.mu.Unlock()
}

// Close stops reading and removes the FIFO.
func (m *MarkReader) Close() error {
	err := m.f.Close()
	<-m.stopped
	os.RemoveAll(m.dir)
	return err
}
