// Package atomicfile replaces a small file's content at once: a reader, or
// the next process after a crash, sees the old content or the new, never a
// mix or an empty file.
//
// Durability: WriteFile writes a temporary file in the same directory,
// fsyncs it, renames it over the target and fsyncs the directory. When it
// returns nil the new content survives a crash or power loss on a file
// system that honours fsync; when it returns an error no temporary file is
// left behind and the old content (or no file) is in place — unless only
// the final directory fsync failed, after the rename: then the new content
// is in place but may not survive a power loss.
//
// The package is a leaf (standard library only), so any layer may use it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with b, mode perm, as the package doc says. It is
// safe to call from several goroutines or processes at once (each writes its
// own temporary file; the last rename wins).
func WriteFile(path string, b []byte, perm os.FileMode) error {
	return write(path, b, perm, true)
}

// Replace replaces path with b, mode perm, like WriteFile but without the
// fsyncs: a reader, or the next process after this one crashed (killed,
// out of memory), sees the old content or the new, never a mix; after a
// power loss or kernel crash the file may hold either, or be empty. For
// state that a reboot makes void anyway and that is replaced often.
func Replace(path string, b []byte, perm os.FileMode) error {
	return write(path, b, perm, false)
}

func write(path string, b []byte, perm os.FileMode, sync bool) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("set mode: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("write temporary file: %w", err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("sync temporary file: %w", err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close temporary file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename temporary file: %w", err)
	}
	if !sync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
