// Command telegraf-gpusampler runs inputs.gpusampler as an external
// Telegraf plugin through Telegraf's execd shim: Telegraf's inputs.execd
// starts it with a plugin config file, and it writes the plugin's metrics
// to stdout as line protocol, until Telegraf closes its stdin.
//
//	[[inputs.execd]]
//	  command = ["/usr/local/bin/telegraf-gpusampler", "-config", "/etc/telegraf/gpusampler.conf"]
//	  signal = "none"
//
// With shape = "nvidia_smi" in the plugin config, use signal = "STDIN" (or
// let the shim gather every -poll_interval).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/influxdata/telegraf/plugins/common/shim"

	"github.com/gpusampler/gpusampler/telegraf/plugins/inputs/gpusampler"
)

func main() {
	if err := run(os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "telegraf-gpusampler:", err)
		os.Exit(1)
	}
}

// run parses args, loads the plugin config and runs the shim until stdin
// closes. twin, when set, is handed to the plugin (tests).
func run(args []string, stderr io.Writer, twin io.Writer) error {
	fs := flag.NewFlagSet("telegraf-gpusampler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile := fs.String("config", "", "plugin config file with one [[inputs.gpusampler]] table (default: the plugin's defaults)")
	poll := fs.Duration("poll_interval", time.Second, "how often the shim calls Gather (shape nvidia_smi writes a point per GPU at each)")
	noPoll := fs.Bool("poll_interval_disabled", false, "gather only when Telegraf writes a newline to stdin (execd signal = \"STDIN\")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	interval := *poll
	if *noPoll {
		interval = shim.PollIntervalDisabled
	}
	if err := checkKeys(*configFile); err != nil {
		return err
	}
	loaded, err := shim.LoadConfig(configFile)
	if err != nil {
		return fmt.Errorf("config %s: %w", *configFile, err)
	}
	p, ok := loaded.Input.(*gpusampler.GPUSampler)
	if !ok {
		return errors.New("config " + *configFile + ": no [[inputs.gpusampler]] table")
	}
	p.Twin = twin
	s := shim.New()
	if err := s.AddInput(p); err != nil {
		return err
	}
	return s.Run(interval)
}

// checkKeys fails on a key of an [[inputs.gpusampler]] table that the
// plugin does not have (Telegraf's shim would ignore it, as a misspelt key
// would be). Errors in reading or decoding the file are left to the shim,
// which reports them.
func checkKeys(path string) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var conf struct{ Inputs map[string][]toml.Primitive }
	md, err := toml.Decode(os.ExpandEnv(string(b)), &conf)
	if err != nil {
		return nil
	}
	for _, prim := range conf.Inputs["gpusampler"] {
		if err := md.PrimitiveDecode(prim, gpusampler.New()); err != nil {
			return nil
		}
	}
	for _, k := range md.Undecoded() {
		if len(k) > 2 && k[0] == "inputs" && k[1] == "gpusampler" {
			return fmt.Errorf("config %s: unknown key %s", path, k)
		}
	}
	return nil
}
