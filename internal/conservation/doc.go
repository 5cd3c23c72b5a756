// Package conservation proves gpusampler's central promise: every record the
// engine publishes reaches every output exactly once, or is counted as
// dropped. It holds the pieces of that proof, which its tests (the
// conservation matrix) put together:
//
//   - Script, a deterministic Source: two devices (a GPU and a MIG
//     instance on it, every identity field filled) whose sample buffers
//     hold a fixed set of samples, released phase by phase by the test,
//     and one poll's worth of processes.
//   - Recorder, an Output that appends every batch it receives, whole, as
//     one JSON line to a file, and that a control file can turn down
//     (retryable errors), make slow to answer, or make refuse one batch
//     permanently, and that reports what its sink took
//     (recorded_batches, recorded_records). The "record" output kind
//     (RecordKind) builds it in process; served out of process by cmd
//     recordplugin it is the same code behind the real plugin client.
//
// The matrix (TestMatrix) runs the real agent (config, wrappers, pumps,
// buffers, plugin supervision) over {in-process, plugin} × {no buffer,
// memory, disk} × {raw, aggregate}, beside a witness (an unbuffered
// in-process recorder), under these scenarios: clean; down (sinks refuse
// as retryable, then recover); refuse (one batch refused permanently,
// however often offered); pluginkill (SIGKILL of every plugin); wedge (one
// plugin's Write blocks ignoring its context: it alone is restarted, the
// other plugin cells keep their process and lose nothing); blackhole (the
// shared hop: every cell an instance of one plugin process, as the built-in
// network outputs run; one cell's sink waits out each Write's deadline for
// a while: no process restarts, no cell loses a record); sighup
// (unchanged, changed outputs, changed [sampler], broken config); restart
// (disk buffers replayed by a new agent); lapped (small rings, sinks down:
// ring drops); kill9 (gpusampler SIGKILLed with data queued on disk, then
// started again); stdoutstall (a stdout reader that stops reading);
// finalcounts (after a stop, the final stats' counters of each cell, the
// recorder's own recorded_batches and recorded_records read over the
// plugin boundary included, equal what its sink holds); finalself (the
// final self-metrics, in each cell's own sink, count what it took before
// them, the final flush included: buffers' final delivery, aggregate
// windows still open, a plugin's counters read after it);
// finalcountsshared and finalselfshared (the same on the shared hop). For
// each cell it compares what the sink received with what the witness
// received, record by record and field by field (aggregate cells: with
// the summaries of the witness's samples), and the records missing with
// the pump, buffer and aggregation drop counters. Cells known to fail are
// listed with their reason in the test's knownBroken table. go test -run
// Matrix -v prints published, delivered and dropped per cell.
//
// TestMatrixOTLP runs the OpenTelemetry cells through the scenarios clean,
// down, refuse, sighup, sighupdown and restart: the real opentelemetry
// output, over OTLP/gRPC behind every buffer and OTLP/HTTP, raw and
// aggregating, in process and as an instance in the shared recordplugin
// process (as the built-in network outputs run), to an in-test OTLP receiver that turns each export request
// back into records in a record file (the control words answer on the
// wire: down as UNAVAILABLE or 503, poison as INVALID_ARGUMENT or 400).
// They are compared with the witness on what OTLP carries: samples whole
// (value × scale back bit for bit), windows on count, min, max and sum,
// events and self-metrics from their points, no device records.
//
// Beside the matrix, TestAggregateDiskInfluxIntegration runs a real influxd
// and a stdout twin, both aggregating behind disk buffers, through a 20 s
// outage (scripted time) and a kill -9 of gpusampler during it: influxd
// must hold exactly the summaries the twin printed, one per device and
// scripted window.
//
// TestNATSJetStreamRestartIntegration is the NATS cell: JetStream outputs
// (memory and disk buffers, raw and aggregating) in the shared outputs
// process and in process, while a real nats-server is killed for longer
// than the host's call timeout and started again on its port and store.
// Every sample (or summary) and event is in the stream exactly once; the
// final stats (delivered samples, the output's stored messages) and the
// final self-metrics count what the stream holds; the outage is counted
// and no output is taken for wedged.
package conservation
