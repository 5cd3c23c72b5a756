package readmegen

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRender(t *testing.T) {
	conf := "[[outputs.x]]\n  a = 1\n"
	for _, c := range []struct{ name, in, want string }{
		{"replaces the block", "# X\n\n" + Marker + "old\nstale\n```\n\nAfter.\n", "# X\n\n" + Marker + conf + "```\n\nAfter.\n"},
		{"empty block", "# X\n" + Marker + "```\n", "# X\n" + Marker + conf + "```\n"},
		{"keeps other blocks", "```toml\nkeep\n```\n" + Marker + "x\n```\n```go\nkeep\n```\n", "```toml\nkeep\n```\n" + Marker + conf + "```\n```go\nkeep\n```\n"},
		{"appends a section", "# X\n\nText.\n\n", "# X\n\nText.\n\n## Configuration\n\nThis directory's `sample.conf`:\n\n" + Marker + conf + "```\n"},
	} {
		got, err := Render([]byte(c.in), []byte(conf))
		if err != nil || string(got) != c.want {
			t.Errorf("%s: got %q, %v\nwant %q", c.name, got, err, c.want)
		}
		// Rendering is idempotent.
		if again, err := Render(got, []byte(conf)); err != nil || string(again) != string(got) {
			t.Errorf("%s: second render differs: %q, %v", c.name, again, err)
		}
	}
	if _, err := Render([]byte(Marker+"never closed\n"), []byte(conf)); err == nil {
		t.Error("an unclosed block was accepted")
	}
	if _, err := Render([]byte("# X\n"), []byte("a\n```\n")); err == nil {
		t.Error("a sample.conf holding a fence was accepted")
	}
}

// A directory under outputs/ with a README and a sample.conf is picked up
// without being named anywhere.
func TestDirsFindsNewOutputs(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"outputs/new/README.md", "outputs/new/sample.conf", "outputs/noreadme/sample.conf", "plugins/README.md", "plugins/sample.conf"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dirs, err := Dirs(root)
	if err != nil || len(dirs) != 2 || dirs[0] != "outputs/new" || dirs[1] != "plugins" {
		t.Fatalf("Dirs = %q, %v; want outputs/new and plugins", dirs, err)
	}
}
