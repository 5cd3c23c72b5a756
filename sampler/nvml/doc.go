// Package nvml is gpusampler's NVML backend and the only package that
// imports github.com/NVIDIA/go-nvml (cgo). Everything else sees it through
// sampler.Source; builds without cgo get a stub whose Open fails with
// ErrNoCgo (which wraps sampler.ErrLibraryNotFound).
//
// What it respects (DESIGN.md §4):
//
//   - Every NVML call is gated on a successful Init, and every function
//     beyond Init is looked up in the loaded library before it is called: a
//     call to a symbol the installed driver lacks kills the process. A
//     metric whose function is absent reports sampler.ErrNotSupported.
//   - Field ids are chosen from one table by the driver's NVML version
//     (fieldDefs, FieldID): the throttle-time counters moved from 251–253
//     (NVML 12.9/13.0) to 269–271 (13.1+), and an id outside its range is
//     never requested.
//   - NVML return codes become the sampler's sentinel errors here, once
//     (errors.Is(err, sampler.ErrNotSupported)).
//   - Sample buffers are drained with GetSamples and the caller's raw µs
//     cursor; values are decoded by the type the driver returns and scaled to
//     the catalog's base units. Fast fields are read in one GetFieldValues
//     batch per tick, each value with its own return code; slow state with
//     point queries, one call per query.
//   - A field GetFieldValues does not give (NOT_SUPPORTED for it or for the
//     whole call, or not defined in this driver's NVML version) is read with
//     its dedicated getter where one exists and the driver has it
//     (fallbackByField): energy (GetTotalEnergyConsumption), memory
//     temperature (GetThermalSettings' memory sensor), perf-policy
//     violation and power-cap/sync-boost throttle time (GetViolationStatus),
//     aggregate ECC and row-remap state, retired pages (the length of
//     GetRetiredPages' list per cause), NVLink error totals (the sum of
//     GetNvLinkErrorCounter over the links that answer, found at the first
//     read), and the slow state a field reads.
//     PCIe bytes come from GetPcieThroughput, which measures for 20 ms
//     before it returns: at most every 10 s per direction, integrated into
//     an estimated counter. A metric nothing can read is named once per
//     process at WARN with its reason (device, driver version, missing
//     symbol); so is a sample buffer the device lacks whose metric is
//     point-read instead.
//   - Driver events are polled once a second with a 1 ms wait, not waited
//     for (see pollEvents).
//   - Processes (sampler.ProcessSource): the running-process lists and
//     GetProcessUtilization drained with its own µs cursor, names from
//     SystemGetProcessName else /proc/PID/comm (host PIDs), command lines
//     only when asked. The engine polls at most once a second.
//   - MIG: instances of a GPU in MIG mode are devices of their own after
//     the physical GPUs (record.Device.MIG and friends); they have no
//     utilization buffers, no per-process utilization and no events of
//     their own (ErrNotSupported, saying so); GPM goes through the parent.
//   - Each device counts its NVML C calls and their summed latency
//     (sampler.CallCounter); GetSamples counts the two calls go-nvml makes.
//
// Concurrency: Open and Close are called once. The engine calls a device's
// Identity, Drain and Read from one goroutine; different devices run
// concurrently (NVML is thread-safe). CallStats may be called from any
// goroutine. One process can load one NVML library: its symbols bind once.
package nvml
