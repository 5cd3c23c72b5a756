package nvml

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// procRoot is where process names and command lines are read from; tests
// point it elsewhere. NVML reports host PIDs: inside a container they
// resolve only with the host PID namespace (hostPID: true).
var procRoot = "/proc"

// procComm returns /proc/PID/comm (the kernel's 15-byte process name), or
// "" when the process is gone or not visible.
func procComm(pid uint32) string {
	b, err := os.ReadFile(procRoot + "/" + strconv.FormatUint(uint64(pid), 10) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// procCmdline returns /proc/PID/cmdline with arguments joined by spaces,
// reading at most max+1 bytes (the caller truncates to max), or "" when the
// process is gone or not visible.
func procCmdline(pid uint32, max int) string {
	f, err := os.Open(procRoot + "/" + strconv.FormatUint(uint64(pid), 10) + "/cmdline")
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, max+1)
	n, _ := f.Read(buf)
	b := bytes.TrimRight(buf[:n], "\x00")
	for i, c := range b {
		if c == 0 {
			b[i] = ' '
		}
	}
	return string(b)
}
