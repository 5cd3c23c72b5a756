package plugins

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// setProcessAttrs starts the plugin as the leader of a process group of its
// own, so that the host can end the plugin with every descendant that stays
// in its group (killGroup), and asks the kernel to SIGKILL the plugin when
// the host dies, so that a host killed with SIGKILL leaves no orphan. (The
// SDK's parent watch covers the rest: Pdeathsig follows the thread that
// started the child, not the whole process.)
func setProcessAttrs(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
}

// processExited reports whether process pid has exited (a zombie not yet
// reaped, or gone), from /proc/PID/stat.
func processExited(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	return i < 0 || i+2 >= len(data) || data[i+2] == 'Z' || data[i+2] == 'X'
}

// processRSS returns process pid's resident set size in bytes, from
// /proc/PID/statm; ok is false when it cannot be read.
func processRSS(pid int) (rss uint64, ok bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(data)
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}

// waitExited blocks until process pid (a child) has exited, without
// reaping it (waitid WNOWAIT): until it is reaped, its pid and process
// group id name it and its group and no other process. It reports false
// when it could not wait (the caller then reaps without that guarantee).
func waitExited(pid int) bool {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err == nil
		}
	}
}
