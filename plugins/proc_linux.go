package plugins

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal asks the kernel to SIGKILL the plugin when the host
// dies, so that a host killed with SIGKILL leaves no orphan. (The SDK's
// parent watch covers the rest: Pdeathsig follows the thread that started
// the child, not the whole process.)
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
