package appconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
)

// Check checks a parsed config for what Parse cannot see without reading
// the machine, for gpusampler config --check: each block's kind Check
// (files, binaries and their checksums; see outputs.Kind.Check), that a
// disk buffer's directory can be created and written, and, as
// warnings, a config without outputs and two blocks that would both write
// every line to the process's stdout. It opens no network connection.
// The error, when not nil, is an Errors of the problems; warnings are
// returned either way.
func Check(c *Config, r *outputs.Registry) (warnings config.Errors, err error) {
	var problems config.Errors
	if len(c.Outputs) == 0 {
		warnings = append(warnings, &config.Error{File: c.File, Line: 1,
			Msg: "no [[outputs.KIND]] block: samples are taken and go nowhere (gpusampler config prints every kind)"})
	}
	var stdoutBlocks []*Output
	for _, o := range c.Outputs {
		if o.Kind == "stdout" || o.Kind == "execd" {
			stdoutBlocks = append(stdoutBlocks, o)
		}
		if o.Buffer.Kind == "disk" && o.Buffer.Dir != "" {
			if err := checkBufferDir(o.Buffer.Dir); err != nil {
				problems = append(problems, o.ErrorAt("buffer_dir", err.Error()))
			}
		}
		k, ok := r.Lookup(o.Kind)
		if !ok || k.Check == nil {
			continue
		}
		p, w := k.Check(&o.Block)
		problems, warnings = append(problems, p...), append(warnings, w...)
	}
	if len(stdoutBlocks) > 1 {
		first := stdoutBlocks[0]
		for _, o := range stdoutBlocks[1:] {
			warnings = append(warnings, o.ErrorAt("", fmt.Sprintf(
				"writes to stdout, as outputs.%s %q (line %d) does: every record would be written there twice; keep one",
				first.Kind, first.Name, first.Line)))
		}
	}
	if len(problems) > 0 {
		return warnings, problems
	}
	return warnings, nil
}

// checkBufferDir reports why dir cannot hold a disk buffer: the nearest part
// of its path that exists must be a directory in which files can be created
// (the buffer creates what is missing below it). It creates and removes one
// empty file there.
func checkBufferDir(dir string) error {
	p := filepath.Clean(dir)
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("%s is not a directory", p)
		case err == nil:
			f, err := os.CreateTemp(p, ".gpusampler-check-*")
			if err != nil {
				return fmt.Errorf("cannot create files in %s: %v", p, errors.Unwrap(err))
			}
			f.Close()
			os.Remove(f.Name())
			return nil
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s: %v", p, errors.Unwrap(err))
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}
