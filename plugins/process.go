package plugins

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/gpusampler/gpusampler/plugins/internal/rpc"
	"github.com/gpusampler/gpusampler/plugins/proto"
)

// withParentPID returns env with this process's PID appended as the
// plugin's parent (rpc.ParentPIDEnv), which a plugin watches to exit when
// the host is gone.
func withParentPID(env []string) []string {
	return append(env, rpc.ParentPIDEnv+"="+strconv.Itoa(os.Getpid()))
}

// newPluginProcess returns the go-plugin client that starts cmd (its
// environment already set; the leader of a process group of its own, which
// dies with the host where the platform allows) and speaks the output protocol over gRPC with AutoMTLS, within
// startTimeout for the handshake. The plugin's stdout and stderr reach
// only log: stdout carries the handshake, stderr is the plugin's log, its
// lines through limit (processRunner; the first drop is said on slogger).
// Both the per-output client and the shared process start plugins this
// way.
func newPluginProcess(cmd *exec.Cmd, startTimeout time.Duration, log hclog.Logger, limit *logLimit, slogger *slog.Logger) *plugin.Client {
	setProcessAttrs(cmd)
	return plugin.NewClient(&plugin.ClientConfig{
		SkipHostEnv:      true,
		HandshakeConfig:  rpc.Handshake,
		Plugins:          plugin.PluginSet{rpc.PluginName: &rpc.GRPCPlugin{}},
		RunnerFunc:       runnerFunc(cmd, limit, slogger),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     startTimeout,
		Logger:           log,
		GRPCDialOptions:  rpc.DialOptions(),
		Stderr:           io.Discard,
		SyncStdout:       io.Discard,
		SyncStderr:       io.Discard,
	})
}

// dispenseOutput returns the output protocol's client from a started
// plugin's connection.
func dispenseOutput(cp plugin.ClientProtocol) (proto.OutputClient, error) {
	raw, err := cp.Dispense(rpc.PluginName)
	if err != nil {
		return nil, err
	}
	oc, ok := raw.(proto.OutputClient)
	if !ok {
		return nil, fmt.Errorf("unexpected client %T", raw)
	}
	return oc, nil
}

// killPluginProcess ends a plugin process that must go at once (a failed
// start, a wedged or crashed plugin): its process group is SIGKILLed first
// (go-plugin's own Kill tries a graceful shutdown first and can block on a
// stopped process, and waits for the plugin's stderr to close, which a
// descendant may hold), then go-plugin's cleanup, waited for up to timeout
// (endProcess).
func killPluginProcess(pc *plugin.Client, cmd *exec.Cmd, timeout time.Duration) {
	pid := 0
	if cmd.Process != nil {
		pid = cmd.Process.Pid
		if !pc.Exited() {
			killGroup(pid)
		}
	}
	endProcess(pc, pid, timeout)
}
