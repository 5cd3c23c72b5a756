// Package dirlock is the one owner lock of a directory that one process
// must own alone: the sampler's state directory and a disk buffer's
// directory. Lock takes an exclusive, non-blocking flock on a file in it;
// the kernel releases it when the holder closes the file or exits, a crash
// included, so a lock left by a dead process never blocks the next one.
// Off Unix there is no flock: Lock opens the file and excludes nothing
// (Supported is false), and two processes sharing a directory must not be
// run there.
package dirlock

import (
	"errors"
	"fmt"
	"os"
)

// ErrLocked is returned by Lock when another open file (another process,
// or another Lock in this one) holds the lock.
var ErrLocked = errors.New("dirlock: held by another process or open file")

// Lock opens path (created with mode 0600; a symbolic link is refused
// where the system can tell) and takes an exclusive lock on it without
// waiting. The lock lasts until the returned file is closed. It returns an
// error wrapping ErrLocked when the lock is held.
func Lock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
