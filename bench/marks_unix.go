//go:build unix

package bench

import (
	"os/exec"
	"syscall"
)

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }

// ownProcessGroup starts cmd in a process group of its own and makes
// cancelling it interrupt the whole group.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	}
}
