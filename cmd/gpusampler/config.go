package main

import (
	"fmt"
	"io"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
)

// cmdConfig prints the whole commented example config, assembled from the
// agent/sampler sections and every output's sample.conf.
// config.example.toml at the repository root is this output.
func cmdConfig(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("config", stderr)
	check := fs.String("check", "", "parse and validate this config file instead; print its problems, one per line")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if *check != "" {
		reg := registry.Builtin()
		cfg, err := appconfig.Load(*check, appconfig.Options{Registry: reg})
		if err != nil {
			return err
		}
		// What run would find out only when it starts the outputs: files,
		// plugin binaries, defaults assumed. No sink is contacted.
		warnings, err := appconfig.Check(cfg, reg)
		for _, w := range warnings {
			fmt.Fprintf(stdout, "warning: %v\n", w)
		}
		if err != nil {
			return err
		}
		if len(warnings) > 0 {
			fmt.Fprintf(stdout, "%s: ok, %d warnings\n", *check, len(warnings))
			return nil
		}
		fmt.Fprintf(stdout, "%s: ok\n", *check)
		return nil
	}
	_, err := io.WriteString(stdout, appconfig.Example(registry.Builtin()))
	return err
}
