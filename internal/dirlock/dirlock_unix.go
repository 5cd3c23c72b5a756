//go:build unix

package dirlock

import (
	"errors"
	"os"
	"syscall"
)

// Supported reports whether Lock excludes other processes here.
const Supported = true

const oNoFollow = syscall.O_NOFOLLOW

func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return ErrLocked
		}
		return err
	}
}
