// Command gpusampler samples NVIDIA GPUs at sub-second resolution and
// streams every sample to outputs.
//
//	gpusampler run [flags]       sample and stream (simulated GPUs when no driver)
//	gpusampler bench -- CMD      benchmark a command: time, energy, GPU behaviour, A/B
//	gpusampler config            print the commented example config
//	gpusampler metrics           print the metric catalog (--backend: what each device supports)
//	gpusampler doctor            what works on these GPUs, buffer depths, clock, latency, advice
//	gpusampler plugin test PATH  try a plugin binary: handshake, configure, a few writes
//	gpusampler subscribe         live fleet table (or records) from NATS
//	gpusampler deadletter FILE   print the batches a sink refused (dead_letter_dir)
//	gpusampler version           print the version
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version and buildCommit are set at build time (-ldflags "-X
// main.version=... -X main.buildCommit=..."); without them version says
// dev and the commit comes from the toolchain's VCS stamp, if any.
var (
	version     = "dev"
	buildCommit = ""
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if len(os.Args) < 2 || (os.Args[1] != "bench" && os.Args[1] != "plugin") {
		// bench has its own two stages (bench.go: benchInterrupts); a
		// plugin process ends with its host.
		exitOnSecondSignal(os.Stderr)
	}
	code := Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitOnSecondSignal makes a second SIGINT or SIGTERM end the process at
// once (exit 128+signal), without waiting for the outputs' final flush that
// the first one started (bounded by [agent] shutdown_timeout): a person
// pressing Ctrl-C twice wants it gone. The first says so on stderr.
// Plugin processes started by this one die with it (Pdeathsig).
func exitOnSecondSignal(stderr io.Writer) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		first := <-sigs
		fmt.Fprintf(stderr, "gpusampler: %v: flushing the outputs and exiting ([agent] shutdown_timeout bounds it); %v again to exit now\n", first, first)
		second := <-sigs
		fmt.Fprintf(stderr, "gpusampler: %v again: exiting now; what the outputs had not delivered is lost\n", second)
		code := 130
		if s, ok := second.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}()
}

// usageError is a bad command line: exit status 2 with a one-line reason.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

const topUsage = `usage: gpusampler <command> [flags]

commands:
  run       sample GPUs and stream every sample to outputs
  jobs      print the live table of per-job accounts (run --format jobs)
  bench     benchmark a command: time, energy, distributions, diagnoses, A/B (bench -- CMD)
  config    print the commented example config (--check FILE validates one)
  metrics   print the metric catalog
  doctor    examine the GPUs: what works, buffer depths and periods, clock, latency, advice
  plugin    plugin test PATH [--config FILE]: try an output plugin binary
  subscribe print a live fleet table of what nodes publish to NATS
  deadletter print a dead-letter file: the batches an output's sink refused
  version   print the version

Run 'gpusampler <command> -h' for a command's flags.
`

// Main runs the command line and returns the process exit status: 0 ok,
// 1 runtime failure, 2 usage error.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return 2
	}
	var err error
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		err = cmdRun(ctx, rest, stdin, stdout, stderr)
	case "bench":
		err = cmdBench(ctx, rest, stdout, stderr)
	case "config":
		err = cmdConfig(rest, stdout, stderr)
	case "metrics":
		err = cmdMetrics(rest, stdout, stderr)
	case "doctor":
		err = cmdDoctor(rest, stdout, stderr)
	case "plugin":
		err = cmdPlugin(ctx, rest, stdout, stderr)
	case "subscribe":
		err = cmdSubscribe(ctx, rest, stdout, stderr)
	case "jobs":
		// The live table of per-job accounts: run with --format jobs.
		err = cmdRun(ctx, append([]string{"--format", "jobs"}, rest...), stdin, stdout, stderr)
	case "deadletter":
		err = cmdDeadLetter(rest, stdout)
	case "version", "--version", "-version":
		if len(rest) > 0 {
			err = usagef("unexpected argument %q (version takes none)", rest[0])
			break
		}
		err = cmdVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, topUsage)
	default:
		err = usagef("unknown command %q (want run, jobs, bench, config, metrics, doctor, plugin, subscribe, deadletter or version)", cmd)
	}
	if err == nil {
		return 0
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "gpusampler %s: %s\n", cmd, ue.msg)
		return 2
	}
	if errors.Is(err, errHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "gpusampler %s: %v\n", cmd, err)
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}
