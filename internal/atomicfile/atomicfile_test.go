package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// names lists dir's entries.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}

// writers are WriteFile and Replace: they differ only in the fsyncs, which
// a test cannot see; both must replace the content the same way.
var writers = map[string]func(string, []byte, os.FileMode) error{"WriteFile": WriteFile, "Replace": Replace}

func TestWriteFile(t *testing.T) {
	for name, write := range writers {
		t.Run(name, func(t *testing.T) { testWriteFile(t, write) })
	}
}

func testWriteFile(t *testing.T, WriteFile func(string, []byte, os.FileMode) error) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	for i, tc := range []struct {
		content string
		perm    os.FileMode
	}{{"first\n", 0o600}, {"second, longer\n", 0o644}, {"", 0o600}} {
		if err := WriteFile(path, []byte(tc.content), tc.perm); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != tc.content {
			t.Fatalf("write %d: read %q, %v; want %q", i, got, err, tc.content)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != tc.perm {
			t.Fatalf("write %d: mode %v, %v; want %v", i, fi.Mode().Perm(), err, tc.perm)
		}
		if n := names(t, dir); len(n) != 1 || n[0] != "state" {
			t.Fatalf("write %d: directory holds %q, want only the file (no temporary left)", i, n)
		}
	}
}

func TestWriteFileFailureKeepsOld(t *testing.T) {
	for name, write := range writers {
		t.Run(name, func(t *testing.T) { testWriteFileFailureKeepsOld(t, write) })
	}
}

func testWriteFileFailureKeepsOld(t *testing.T, WriteFile func(string, []byte, os.FileMode) error) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "missing", "state"), []byte("x"), 0o600); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	// The target is a directory: the rename fails, the old content stays
	// and the temporary file is removed.
	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "keep"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(target, []byte("new"), 0o600); err == nil {
		t.Fatal("replacing a non-empty directory succeeded")
	}
	if n := names(t, dir); len(n) != 1 || n[0] != "target" {
		t.Fatalf("directory holds %q after a failed write, want only the target", n)
	}
	if b, err := os.ReadFile(filepath.Join(target, "keep")); err != nil || string(b) != "old" {
		t.Fatalf("old content %q, %v", b, err)
	}
}
