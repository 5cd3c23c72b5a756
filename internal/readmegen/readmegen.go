// Package readmegen keeps each output's and plugin's README showing its
// sample.conf as it is. A README beside a sample.conf embeds it in a
// fenced block opened by "```toml @sample.conf" (Telegraf's convention);
// Render replaces that block's content with the file, or appends a
// "Configuration" section holding it to a README that has none. `make
// generate` runs cmd/readmegen, which rewrites the READMEs; a test in
// package outputs fails when any README differs from what Render makes of
// it, so that a README cannot drift from its sample.conf.
package readmegen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Marker opens the fenced block that holds a sample.conf.
const Marker = "```toml @sample.conf\n"

const fence = "```\n"

// Dirs lists the directories, relative to the repository root, whose
// README embeds their sample.conf: every directory under outputs/ that
// has both files (a new output is picked up without a change here), the
// plugin client (plugins/) and the Telegraf input plugin.
func Dirs(root string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(root, "outputs", "*", "sample.conf"))
	if err != nil {
		return nil, fmt.Errorf("list outputs: %w", err)
	}
	var dirs []string
	for _, m := range append(matches,
		filepath.Join(root, "plugins", "sample.conf"),
		filepath.Join(root, "telegraf", "plugins", "inputs", "gpusampler", "sample.conf")) {
		dir := filepath.Dir(m)
		if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
			continue
		}
		if _, err := os.Stat(m); err != nil {
			continue
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return nil, fmt.Errorf("list outputs: %w", err)
		}
		dirs = append(dirs, rel)
	}
	slices.Sort(dirs)
	return slices.Compact(dirs), nil
}

// Render returns readme with its sample.conf block holding conf. A README
// without the block gets one in a "Configuration" section at its end.
func Render(readme, conf []byte) ([]byte, error) {
	if len(conf) > 0 && conf[len(conf)-1] != '\n' {
		conf = append(slices.Clip(conf), '\n')
	}
	if bytes.Contains(conf, []byte("```")) {
		return nil, fmt.Errorf("sample.conf holds a ``` fence")
	}
	before, rest, ok := bytes.Cut(readme, []byte(Marker))
	if !ok {
		out := bytes.TrimRight(slices.Clip(readme), "\n")
		out = append(out, "\n\n## Configuration\n\nThis directory's `sample.conf`:\n\n"+Marker...)
		out = append(out, conf...)
		return append(out, fence...), nil
	}
	// The block ends at the first line that is a fence.
	i := 0
	if !bytes.HasPrefix(rest, []byte(fence)) {
		if i = bytes.Index(rest, []byte("\n"+fence)); i < 0 {
			return nil, fmt.Errorf("the %q block is not closed", bytes.TrimSpace([]byte(Marker)))
		}
		i++
	}
	out := append(slices.Clip(before), Marker...)
	out = append(out, conf...)
	return append(out, rest[i:]...), nil
}

// File returns the README of dir (relative to root) as Render makes it,
// and as it is on disk.
func File(root, dir string) (want, have []byte, err error) {
	have, err = os.ReadFile(filepath.Join(root, dir, "README.md"))
	if err != nil {
		return nil, nil, err
	}
	conf, err := os.ReadFile(filepath.Join(root, dir, "sample.conf"))
	if err != nil {
		return nil, nil, err
	}
	want, err = Render(have, conf)
	if err != nil {
		return nil, nil, fmt.Errorf("%s/README.md: %w", dir, err)
	}
	return want, have, nil
}
