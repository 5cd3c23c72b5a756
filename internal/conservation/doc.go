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
//     (retryable errors) or make refuse one batch permanently. The "record"
//     output kind (RecordKind) builds it in process; served out of process
//     by cmd recordplugin it is the same code behind the real plugin client.
//
// The matrix runs the real agent (config, wrappers, pumps, buffers, plugin
// supervision) over {in-process, plugin} × {no buffer, memory, disk} ×
// {raw, aggregate}, under faults, and compares what each sink received,
// record by record and field by field, with what the engine published and
// what the counters say was dropped.
package conservation
