package appconfig

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxFileBytes is the largest config file Load reads (1 MiB): a config of
// hundreds of output blocks is a few tens of KiB, and a path that does not
// end (a device, a FIFO) must not make the agent read forever.
const MaxFileBytes = 1 << 20

// ErrNotRegular is returned by ReadFile for a path that is not a regular
// file (a device such as /dev/zero, a FIFO, a socket, a directory).
var ErrNotRegular = errors.New("appconfig: not a regular file")

// ErrTooLarge is returned by ReadFile for a file over MaxFileBytes.
var ErrTooLarge = errors.New("appconfig: file too large")

// ReadFile reads a config file: a regular file (symbolic links are
// followed) of at most MaxFileBytes. The file is opened without blocking,
// so a FIFO with no writer is refused at once instead of waiting for one,
// and the size is checked on what is read, so a file that grows while it is
// read is refused too. Errors name the file.
func ReadFile(name string) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("read config %s: %w (%s)", name, ErrNotRegular, fileType(st.Mode()))
	}
	if st.Size() > MaxFileBytes {
		return nil, fmt.Errorf("read config %s: %w: %d bytes, at most %d", name, ErrTooLarge, st.Size(), MaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", name, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("read config %s: %w: more than %d bytes", name, ErrTooLarge, MaxFileBytes)
	}
	return data, nil
}

// fileType names the type of a file that is not regular.
func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "mode " + m.Type().String()
}
