package dirlock_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpusampler/gpusampler/internal/dirlock"
)

// A second Lock of the same file fails with ErrLocked while the first is
// held, and succeeds once it is closed.
func TestLockExcludes(t *testing.T) {
	if !dirlock.Supported {
		t.Skip("no flock on this system")
	}
	path := filepath.Join(t.TempDir(), "LOCK")
	f, err := dirlock.Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := dirlock.Lock(path); !errors.Is(err, dirlock.ErrLocked) {
		if g != nil {
			g.Close()
		}
		t.Fatalf("second Lock while held: %v, want ErrLocked", err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("lock file: %v, %v; want mode 0600", st, err)
	}
	f.Close()
	g, err := dirlock.Lock(path)
	if err != nil {
		t.Fatalf("Lock after the holder closed: %v", err)
	}
	g.Close()
}

// A symbolic link in the lock file's place is refused, not followed.
func TestLockRefusesSymlink(t *testing.T) {
	if !dirlock.Supported {
		t.Skip("no O_NOFOLLOW on this system")
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "LOCK")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if f, err := dirlock.Lock(link); err == nil {
		f.Close()
		t.Fatal("Lock followed a symbolic link")
	}
}
