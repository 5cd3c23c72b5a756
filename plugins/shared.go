package plugins

import (
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	plugin "github.com/hashicorp/go-plugin"

	"github.com/gpusampler/gpusampler/plugins/proto"
)

// SharedProcess is one plugin process that serves the outputs of several
// Clients (Options.Shared), each as an instance of its own: a process
// serving sdk.ServeKinds, such as `gpusampler plugin serve` for the
// built-in network outputs. Every Go process costs its runtime, its heap
// and its own mapping of the executable (about 25 MB resident for
// gpusampler's outputs); one process for the built-in outputs costs that
// once.
//
// What stays isolated: the host and its sampling (another process), and
// each output's calls from the others' (an instance has its own lock, so a
// Write blocked in one output does not delay another's Write or health
// probe). A wedged output — a Write past its call timeout, or health
// probes unanswered, while the process itself still answers go-plugin's
// ping — is given up alone: its Client abandons its instance (the process
// forgets it; the blocked call ends whenever it ends), drops its
// reference, and restarts the output in a process of its own (isolated),
// where a later wedge kills only that process. The process is killed only
// when the wedged output is alone in it, or when it does not answer at
// all. What the outputs of one SharedProcess still share is a crash: when
// the process exits (a panic in an output's own goroutine, the kernel's
// OOM killer), every Client it serves finds it gone, keeps its batches
// (Write returns ErrUnavailable meanwhile) and reconfigures its output in
// a new process, each counting a crash (a panic in a Write is recovered
// and returned as a retryable error). External plugins ([[outputs.plugin]])
// never share: each runs in its own verified process.
//
// The process starts with the first Client that needs it and ends with
// the last Client's Close. Concurrency: safe for use by many Clients.
type SharedProcess struct {
	// MemoryMax is the resident memory (bytes) above which the process is
	// killed and every output in it restarted, each counting a memory
	// restart (their pumps keep their batches meanwhile): 0 means
	// DefaultSharedMemoryMax, a negative value no limit. Read at every
	// health probe of each Client on it (Linux only); set it before the
	// first Client starts.
	MemoryMax int64

	command func() *exec.Cmd
	env     []string
	logger  *slog.Logger
	logs    *logLimit     // the log rate limit of its processes
	ids     atomic.Uint64 // instance names handed out

	mu  sync.Mutex
	cur *sharedProc // the process new instances join; nil when none runs
}

// sharedProc is one started process of a SharedProcess.
type sharedProc struct {
	pc   *plugin.Client
	oc   proto.OutputClient
	pid  int
	refs int // Clients whose current conn is on this process; under SharedProcess.mu
	// overMemory is the resident memory the process was found at over
	// its limit, set (once) before it is killed for it: every Client on
	// it counts that restart as a memory restart, not a crash.
	overMemory atomic.Uint64
}

// DefaultSharedMemoryMax is SharedProcess.MemoryMax's default: twice a
// process of one output's (DefaultMemoryMax), as it serves several.
const DefaultSharedMemoryMax = 2 * DefaultMemoryMax

// memoryMax returns s's limit in bytes, 0 for none.
func (s *SharedProcess) memoryMax() uint64 {
	switch {
	case s.MemoryMax == 0:
		return DefaultSharedMemoryMax
	case s.MemoryMax < 0:
		return 0
	}
	return uint64(s.MemoryMax)
}

// overLimit reports whether p's process is over s's memory limit (now, or
// found so by another Client), with the resident memory found.
func (s *SharedProcess) overLimit(p *sharedProc) (rss uint64, over bool) {
	if rss := p.overMemory.Load(); rss > 0 {
		return rss, true
	}
	max := s.memoryMax()
	if max == 0 {
		return 0, false
	}
	if rss, ok := processRSS(p.pid); ok && rss > max {
		p.overMemory.CompareAndSwap(0, rss)
		return p.overMemory.Load(), true
	}
	return 0, false
}

// NewSharedProcess returns a SharedProcess whose process is started with
// command (called for every start; the process must serve a
// rpc.MuxServer, as sdk.ServeKinds does), handed the NAME=value variables
// env beside the minimal environment every plugin gets. The process's own
// log lines (go-plugin's, and lines of its outputs, which name their
// output) go to logger.
func NewSharedProcess(command func() *exec.Cmd, env []string, logger *slog.Logger) *SharedProcess {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &SharedProcess{command: command, env: env, logger: logger, logs: newLogLimit(nil)}
}

// instance returns a new instance name, unique within s.
func (s *SharedProcess) instance() string { return strconv.FormatUint(s.ids.Add(1), 10) }

// acquire returns the running process with one more reference, starting a
// process when none runs or the current one has exited.
func (s *SharedProcess) acquire(startTimeout, callTimeout time.Duration) (*sharedProc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.cur; p != nil && !p.pc.Exited() {
		p.refs++
		return p, nil
	}
	s.cur = nil
	p, err := s.start(startTimeout, callTimeout)
	if err != nil {
		return nil, err
	}
	p.refs = 1
	s.cur = p
	return p, nil
}

func (s *SharedProcess) start(startTimeout, callTimeout time.Duration) (*sharedProc, error) {
	cmd := s.command()
	path := cmd.Path
	cmd.Env = withParentPID(append(append(baseEnv(), cmd.Env...), s.env...))
	log := newHCLog(s.logger, path).(*slogHCLog)
	log.keepOutput = true
	pc := newPluginProcess(cmd, startTimeout, log, s.logs, s.logger)
	fail := func(err error) (*sharedProc, error) {
		killPluginProcess(pc, cmd, callTimeout)
		return nil, fmt.Errorf("start shared plugin process %s: %w", path, err)
	}
	cp, err := pc.Client()
	if err != nil {
		return fail(err)
	}
	oc, err := dispenseOutput(cp)
	if err != nil {
		return fail(err)
	}
	return &sharedProc{pc: pc, oc: oc, pid: cmd.Process.Pid}, nil
}

// release drops a reference to p; the last one ends the process (asked to
// exit, killed when it has not within timeout).
func (s *SharedProcess) release(p *sharedProc, timeout time.Duration) {
	s.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last && s.cur == p {
		s.cur = nil
	}
	s.mu.Unlock()
	if last && !endProcess(p.pc, p.pid, timeout) {
		s.logger.Warn(leftPipesHeld, "pid", p.pid)
	}
}

// others reports whether Clients other than the caller are on p.
func (s *SharedProcess) others(p *sharedProc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.refs > 1
}

// isolated returns a SharedProcess of its own for one Client: the same
// command, environment and logger as s, a process that no other output
// joins.
func (s *SharedProcess) isolated() *SharedProcess {
	i := NewSharedProcess(s.command, s.env, s.logger)
	i.MemoryMax = s.MemoryMax
	return i
}

// responsive reports whether p's process answers go-plugin's ping (its
// gRPC health service, which no output's call holds up) within timeout:
// the process serves, whatever one of its outputs does.
func (p *sharedProc) responsive(timeout time.Duration) bool {
	if p.pc.Exited() {
		return false
	}
	cp, err := p.pc.Client()
	if err != nil {
		return false
	}
	done := make(chan error, 1)
	go func() { done <- cp.Ping() }() // ends with the connection, if it hangs
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err == nil
	case <-t.C:
		return false
	}
}

// kill ends p at once, for a Client that found its instance wedged (or the
// process dead): no new instance joins p, and every Client on it finds it
// gone.
func (s *SharedProcess) kill(p *sharedProc) {
	s.mu.Lock()
	if s.cur == p {
		s.cur = nil
	}
	s.mu.Unlock()
	if !p.pc.Exited() {
		killGroup(p.pid)
	}
}

// endProcess ends a plugin process gracefully through go-plugin (the
// plugin exits when the host closes the connection). One still there after
// timeout is killed with its process group (killGroup), and so is the group
// of one that exited while go-plugin still waits for its stdout or stderr
// to close (a descendant holds them). endProcess returns within about twice
// timeout whatever the plugin did: when a process that left the group
// still holds the pipes after the kill, go-plugin's cleanup is left to end
// with that process, and endProcess returns false.
func endProcess(pc *plugin.Client, pid int, timeout time.Duration) bool {
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		pc.Kill()
	}()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(endPoll)
	defer poll.Stop()
	for waiting := true; waiting; {
		select {
		case <-exited:
			// Descendants the plugin left behind in its group went with
			// it (processRunner.Wait).
			return true
		case <-poll.C:
			waiting = pid <= 0 || !processExited(pid)
		case <-deadline.C:
			waiting = false
		}
	}
	killGroup(pid)
	deadline.Reset(timeout)
	select {
	case <-exited:
		return true
	case <-deadline.C:
		return false
	}
}

// endPoll is how often endProcess looks whether the plugin has exited
// while go-plugin still waits for its pipes.
const endPoll = 20 * time.Millisecond
