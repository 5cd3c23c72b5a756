// Package plugins runs gpusampler outputs in their own processes, over
// hashicorp/go-plugin and gRPC, so that a crashing, hanging or slow output
// never stalls sampling or the other outputs.
//
// Client is the host side: a record.Output that starts a plugin process,
// configures it with the output's config block, sends it batches, and
// supervises it — a deadline on every call, a health probe with its own
// timeout, restart with exponential backoff (reset after a healthy
// period), wedged plugins (alive, not answering) killed by pid, and a
// parent-death signal so that a killed host leaves no orphan. While a
// plugin is down, Write returns an error wrapping record.ErrUnavailable
// at once and the pump keeps its batch and cursor. A Write error from the
// plugin's output keeps its kind (record.Classify) across the protocol: a
// status code plus an errdetails.ErrorInfo naming the kind.
//
// Two ways to get a Client from a config:
//   - Kind, the [[outputs.plugin]] kind: a custom plugin binary by path,
//     checked against its sha256.
//   - HostRegistry: built-in kinds marked outputs.Kind.OutOfProcess are
//     served by the gpusampler binary itself, re-executed by the host, so
//     one binary ships: `gpusampler plugin serve KIND` per output, or, with
//     HostOptions.Shared (what `run` uses), one `gpusampler plugin serve`
//     process for all of them, each output an instance of its own (see
//     SharedProcess).
//
// Plugin authors use plugins/sdk (serve an output), plugins/sdktest (test
// it in process) and `gpusampler plugin test PATH`. The protocol is
// plugins/proto/output.proto; README.md documents it and the handshake for
// plugins written in other languages.
//
// Concurrency: a Client's Write and Close are called by one goroutine (its
// pump); Stats from any goroutine.
package plugins
