package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config --check refuses tag values that line protocol cannot carry,
// naming file, line and key; run refuses such a --host.
func TestConfigCheckRefusesUnencodableTags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"empty", "[global_tags]\ncluster = \"c1\"\nrack = \"\"\n", `bad.toml:3: global_tags.rack: tag value "": empty`},
		{"newline", "[global_tags]\nrack = \"r1\\nr2\"\n", `bad.toml:2: global_tags.rack: tag value "r1\nr2": control character '\n' at byte 2`},
		{"hostname", "[agent]\nhostname = \"a\\tb\"\n", `bad.toml:2: agent.hostname: "a\tb": control character '\t' at byte 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "bad.toml")
			if err := os.WriteFile(path, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runCLI(t, "config", "--check", path)
			if code == 0 || stdout != "" || !strings.Contains(stderr, strings.Replace(tc.want, "bad.toml", path, 1)) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want a refusal containing %q", code, stdout, stderr, tc.want)
			}
		})
	}
	code, _, stderr := runCLI(t, "run", "--backend", "sim", "--host", "node\n1", "--duration", "1s")
	if code == 0 || !strings.Contains(stderr, `--host "node\n1": control character '\n' at byte 4`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
