package main

import (
	"encoding/json"
	"io"
	"log/slog"

	"github.com/gpusampler/gpusampler/internal/doctor"
)

// cmdDoctor examines the GPUs once (package doctor) and prints what works,
// the measured buffer depths and periods, the timestamp clock, call latency
// and recommended intervals.
func cmdDoctor(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("doctor", stderr)
	var bf backendFlags
	bf.register(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	calls := fs.Int("latency-calls", doctor.DefaultLatencyCalls, "cheap driver calls timed per GPU for the latency percentiles")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if err := bf.validate(); err != nil {
		return err
	}
	if *calls < 1 || *calls > 100000 {
		return usagef("--latency-calls %d: must be between 1 and 100000", *calls)
	}
	bf.noFallback = true
	src, err := bf.open(stderr, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer src.Close()
	r, err := doctor.Run(src, doctor.Options{LatencyCalls: *calls})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return doctor.WriteText(stdout, r)
}
