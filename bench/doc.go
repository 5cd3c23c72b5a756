// Package bench is gpusampler's benchmarking engine: `gpusampler bench`
// runs a command several times (optionally interleaved with a second one
// in pairs of alternating order, A B B A ...) while a sampler.Engine samples the GPUs at sub-second
// resolution, then turns each run's window of samples into wall time,
// energy (counter cross-checked against integrated power), power,
// utilization and clock distributions, peak memory and temperature,
// throttle time per reason, per-step numbers from the program's own step
// marks, and diagnoses from the shared detectors (package diagnose).
//
// The pieces:
//   - Collector is an in-process record.Output that copies every sample
//     and event it is handed (the pump owns the Batch; nothing is
//     retained from it), so that runs can be sliced by their time window.
//   - Execute runs the commands, the idle baseline and the step-mark FIFO
//     and returns a Result.
//   - Result is the stable JSON schema (SchemaVersion); README.md documents
//     it. Compare compares two benchmarks: B/A ratios of wall time, energy
//     and power with 95% intervals, from the per-pair log ratios of
//     interleaved runs (paired t) or Welch's t on log values of runs made
//     apart; "the same" only from an equivalence test against a stated
//     margin, and a verdict that --fail-if-slower follows
//     (Comparison.Regression).
//   - WriteTable, WriteMarkdown, WriteCSV and WriteSVG render a Result.
//
// It also holds the statistics shared with `make bench` (Median,
// MeanStd, MeanCI95, WelchTest, TQuantile, PairedLogRatio, WelchLogRatio).
//
// Concurrency: Execute runs the commands from its caller's goroutine;
// Options.Progress is called from that goroutine after each run;
// Options.Live while a command runs, from that goroutine as it starts and
// then from a ticker goroutine, never at the same time as another Live or
// Progress call. The Collector is written by the engine's pump and read
// under its own lock.
package bench
