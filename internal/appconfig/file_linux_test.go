package appconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/appconfig"
)

// A config file must be a regular file of at most MaxFileBytes: a device
// that never ends, a FIFO without a writer (refused at once, not waited
// on), a directory and a file over the limit are each an error naming the
// file; a symbolic link to a regular file is read.
func TestReadFileBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, appconfig.MaxFileBytes+1); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte("[agent]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.toml")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	zeroLink := filepath.Join(dir, "zero.toml")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string
		sentinel   error
	}{
		{"/dev/zero", "a character device", appconfig.ErrNotRegular},
		{zeroLink, "a character device", appconfig.ErrNotRegular},
		{fifo, "a FIFO", appconfig.ErrNotRegular},
		{dir, "a directory", appconfig.ErrNotRegular},
		{big, "at most", appconfig.ErrTooLarge},
		{good, "", nil},
		{link, "", nil},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := appconfig.Load(tc.path, appconfig.Options{})
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute): // liveness bound: a read that blocks
			t.Fatalf("%s: Load still reading after 2 minutes", tc.path)
		}
		if tc.sentinel == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.path, err)
			}
			continue
		}
		if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %v naming the file and saying %q", tc.path, err, tc.sentinel, tc.want)
		}
	}
}
