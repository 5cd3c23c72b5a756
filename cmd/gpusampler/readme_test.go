package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The README's bench examples are copied by users: bench's own flags (--vs
// above all) must come before the "--" that starts the benchmarked command,
// or the command receives them.
func TestReadmeBenchExamplesPutFlagsBeforeCommand(t *testing.T) {
	own := map[string]bool{}
	for _, name := range []string{"vs", "runs", "warmup", "baseline", "export-json", "export-markdown",
		"export-csv", "export-svg", "fail-if-slower", "devices", "show-output", "ignore-failure"} {
		own["--"+name] = true
	}
	seen := 0
	for _, doc := range []string{"../../README.md", "../../bench/README.md"} {
		f, err := os.Open(doc)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			i := strings.Index(line, "gpusampler bench ")
			if i < 0 || strings.HasPrefix(line[i:], "gpusampler bench compare") {
				continue
			}
			seen++
			args := strings.Fields(strings.SplitN(line[i:], "#", 2)[0])
			inCommand, quoted := false, false
			for _, a := range args {
				if a == "&&" || a == "|" || a == ";" {
					inCommand = false // the next command of a shell chain
					continue
				}
				if strings.Count(a, "'")%2 == 1 {
					quoted = !quoted
					continue
				}
				if quoted {
					continue
				}
				if a == "--" {
					inCommand = true
					continue
				}
				if name, _, _ := strings.Cut(a, "="); inCommand && own[name] {
					t.Errorf("%s:%d: %s comes after \"--\", so the benchmarked command receives it: %s",
						filepath.Base(doc), n, name, line)
				}
			}
		}
		f.Close()
	}
	if seen < 3 {
		t.Fatalf("found only %d bench examples: has the README moved?", seen)
	}
}
