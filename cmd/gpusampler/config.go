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
		if _, err := appconfig.Load(*check, appconfig.Options{Registry: registry.Builtin()}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: ok\n", *check)
		return nil
	}
	_, err := io.WriteString(stdout, appconfig.Example(registry.Builtin()))
	return err
}
