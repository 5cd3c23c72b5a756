package plugins

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin/runner"
)

// processRunner runs a plugin's command for go-plugin (its RunnerFunc), as
// go-plugin's own runner does, with two differences: Kill ends the
// plugin's whole process group (killGroup), and the plugin's stderr reaches
// go-plugin through the log rate limit, so that a line over the limit is
// dropped before go-plugin reads and decodes it (a plugin flooding its log
// costs the host a scan for the line's end, not a JSON decode).
type processRunner struct {
	cmd    *exec.Cmd
	limit  *logLimit
	log    *slog.Logger
	stdout io.ReadCloser
	stderr io.ReadCloser // the rate-limited copy go-plugin reads
	raw    io.ReadCloser // the plugin's stderr

	// mu orders kill before the reap: once the process is reaped its pid
	// (and group id) may name another process, which is never signalled.
	mu     sync.Mutex
	reaped bool
}

// running holds the plugin processes started and not reaped yet, by pid:
// killGroup signals only these.
var running struct {
	sync.Mutex
	m map[int]*processRunner
}

// killGroup SIGKILLs plugin pid's process group: the plugin, started as its
// leader, and every descendant still in it (a process a plugin started that
// holds the plugin's stdout or stderr keeps go-plugin waiting for their
// end). The plugin itself is killed by pid as well, in case it left its
// group. Only a plugin process this package started and has not reaped is
// signalled: a pid that is not (any more) one of them is left alone.
func killGroup(pid int) {
	running.Lock()
	r := running.m[pid]
	running.Unlock()
	if r != nil {
		r.kill()
	}
}

// kill SIGKILLs the plugin's process group and the plugin, unless it has
// been reaped.
func (r *processRunner) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid := r.cmd.Process.Pid; !r.reaped && pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

var _ runner.Runner = (*processRunner)(nil)

// runnerFunc returns go-plugin's RunnerFunc for cmd: go-plugin's command
// (spec) carries the environment it adds (handshake, AutoMTLS certificate,
// socket directory), which cmd gets beside its own.
func runnerFunc(cmd *exec.Cmd, limit *logLimit, log *slog.Logger) func(hclog.Logger, *exec.Cmd, string) (runner.Runner, error) {
	return func(_ hclog.Logger, spec *exec.Cmd, _ string) (runner.Runner, error) {
		cmd.Env = append(cmd.Env, spec.Env...)
		cmd.Stdin = nil // the host's stdin is not the plugin's (execd reads it)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		raw, err := cmd.StderrPipe()
		if err != nil {
			return nil, err
		}
		return &processRunner{cmd: cmd, limit: limit, log: log, stdout: stdout, raw: raw}, nil
	}
}

func (r *processRunner) Start(context.Context) error {
	if err := r.cmd.Start(); err != nil {
		return err
	}
	running.Lock()
	if running.m == nil {
		running.m = map[int]*processRunner{}
	}
	running.m[r.cmd.Process.Pid] = r
	running.Unlock()
	pr, pw := io.Pipe()
	r.stderr = pr
	go r.filter(pw)
	return nil
}

// filter copies the plugin's stderr lines that the log rate limit allows
// to w, until the plugin's stderr ends (every process holding it is gone).
// A line longer than the reader's buffer is allowed or dropped whole.
func (r *processRunner) filter(w *io.PipeWriter) {
	br := bufio.NewReaderSize(r.raw, 64<<10)
	inLine, dropping := false, false
	var err error
	for {
		var chunk []byte
		chunk, err = br.ReadSlice('\n')
		if len(chunk) > 0 {
			if !inLine { // a line starts
				ok, first := r.limit.allow(lineOutputRaw(chunk))
				if first {
					r.log.Warn("plugin log over its rate limit: lines dropped from now on, counted in plugin_log_dropped",
						"limit_per_s", LogRate, "burst", LogBurst)
				}
				dropping = !ok
			}
			if !dropping {
				if _, werr := w.Write(chunk); werr != nil {
					break
				}
			}
			inLine = chunk[len(chunk)-1] != '\n'
		}
		if err != nil && err != bufio.ErrBufferFull {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	_ = w.CloseWithError(err)
	_, _ = io.Copy(io.Discard, r.raw) // after a failed write: drain, so the plugin never blocks on its stderr
}

// lineOutputRaw returns the output a raw JSON log line names ("output":
// "NAME", as a shared process's lines do), "" when it names none.
func lineOutputRaw(line []byte) string {
	const key = `"output":"`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// Wait waits for the plugin to exit, ends what it left in its process
// group (while the plugin, not reaped yet, still holds its pid and group
// id), then reaps it.
func (r *processRunner) Wait(context.Context) error {
	pid := r.cmd.Process.Pid
	exited := waitExited(pid)
	if exited {
		r.mu.Lock() // held over the reap: no kill races it
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	err := r.cmd.Wait()
	if !exited {
		r.mu.Lock()
	}
	r.reaped = true
	r.mu.Unlock()
	running.Lock()
	if running.m[pid] == r {
		delete(running.m, pid)
	}
	running.Unlock()
	return err
}

func (r *processRunner) Kill(context.Context) error {
	if r.cmd.Process != nil {
		r.kill()
	}
	return nil
}

func (r *processRunner) ID() string {
	if r.cmd.Process == nil {
		return ""
	}
	return fmt.Sprint(r.cmd.Process.Pid)
}

func (r *processRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *processRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *processRunner) Name() string          { return r.cmd.Path }

func (r *processRunner) Diagnose(context.Context) string {
	return fmt.Sprintf("the plugin %s did not complete the handshake: not a gpusampler output plugin, built for another platform, or it printed to stdout", r.cmd.Path)
}

func (r *processRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *processRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
