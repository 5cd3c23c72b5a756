// Command readmegen rewrites every output's and plugin's README.md so that
// it shows its sample.conf as it is (see package readmegen). Run it from
// the repository root (`make generate` does).
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpusampler/gpusampler/internal/readmegen"
)

func main() {
	if err := run("."); err != nil {
		fmt.Fprintln(os.Stderr, "readmegen:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	dirs, err := readmegen.Dirs(root)
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		want, have, err := readmegen.File(root, dir)
		if err != nil {
			return err
		}
		if bytes.Equal(want, have) {
			continue
		}
		if err := os.WriteFile(filepath.Join(root, dir, "README.md"), want, 0o644); err != nil {
			return fmt.Errorf("write README: %w", err)
		}
		fmt.Printf("readmegen: %s/README.md updated\n", dir)
	}
	return nil
}
