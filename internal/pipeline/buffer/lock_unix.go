//go:build unix

package buffer

import (
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive advisory lock on dir/LOCK so that two
// processes (or two outputs configured with one directory) never share a
// queue. The kernel releases it when the process dies.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir+"/"+lockName, os.O_RDWR|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock buffer dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock buffer dir %s: in use by another output or process: %w", dir, err)
	}
	return f, nil
}
