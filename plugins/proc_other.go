//go:build !linux

package plugins

import (
	"os/exec"
	"syscall"
)

// setProcessAttrs starts the plugin as the leader of a process group of its
// own (killGroup). A parent-death signal has no equivalent here; the SDK's
// parent watch ends orphaned plugins.
func setProcessAttrs(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// processExited is not known here without reaping the process: false, and
// endProcess waits out its timeout.
func processExited(int) bool { return false }

// processRSS is not measured here: the memory limit (Options.MemoryMax) is
// Linux only, and ok is always false.
func processRSS(int) (rss uint64, ok bool) { return 0, false }

// waitExited cannot wait without reaping here: false (Wait reaps at once;
// a kill racing the reap may then signal a reused pid).
func waitExited(int) bool { return false }
