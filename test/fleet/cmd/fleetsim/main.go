// Command fleetsim runs the fleet simulation (package fleet) and prints its
// figures and one summary line. `make fleet-sim` runs it.
//
//	FLEET_NODES=100 FLEET_DURATION=30s FLEET_ENCODING=protobuf FLEET_FLUSH=1s FLEET_FAULTS=1 fleetsim
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/gpusampler/gpusampler/test/fleet"
)

func main() {
	fleet.ServeIfChild()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		os.Exit(1)
	}
}

func run() error {
	o := fleet.Options{Nodes: 100, GPUs: 8, Duration: 30 * time.Second, Encoding: "protobuf", Log: os.Stderr}
	var err error
	if v := os.Getenv("FLEET_NODES"); v != "" {
		if o.Nodes, err = strconv.Atoi(v); err != nil || o.Nodes < 1 {
			return fmt.Errorf("FLEET_NODES=%q: want a positive whole number", v)
		}
	}
	if v := os.Getenv("FLEET_GPUS"); v != "" {
		if o.GPUs, err = strconv.Atoi(v); err != nil || o.GPUs < 1 || o.GPUs > 64 {
			return fmt.Errorf("FLEET_GPUS=%q: want 1 to 64", v)
		}
	}
	if v := os.Getenv("FLEET_DURATION"); v != "" {
		if o.Duration, err = time.ParseDuration(v); err != nil || o.Duration <= 0 {
			return fmt.Errorf("FLEET_DURATION=%q: want a positive duration such as 30s", v)
		}
	}
	if v := os.Getenv("FLEET_ENCODING"); v != "" {
		o.Encoding = v
	}
	if v := os.Getenv("FLEET_FLUSH"); v != "" {
		if o.FlushInterval, err = time.ParseDuration(v); err != nil || o.FlushInterval <= 0 {
			return fmt.Errorf("FLEET_FLUSH=%q: want a positive duration such as 1s", v)
		}
	}
	if v := os.Getenv("FLEET_FAULTS"); v != "" {
		if o.Faults, err = strconv.ParseBool(v); err != nil {
			return fmt.Errorf("FLEET_FAULTS=%q: want 0 or 1", v)
		}
	}
	dir, err := os.MkdirTemp("", "fleetsim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	o.Dir = dir
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := fleet.Run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Print(res.Table())
	fmt.Println(res.Summary())
	if res.Lost != 0 || res.DupSamples != 0 || !res.FingerprintsMatch || res.Reread != 0 {
		os.Exit(3)
	}
	return nil
}
