// Package sampler is gpusampler's engine: it samples every GPU of a Source
// at sub-second resolution and fans the samples out, as batches of records
// (package record), to any number of outputs.
//
// # Shape
//
// A Source (the NVML backend in sampler/nvml, the simulator in sampler/sim)
// enumerates DeviceSources, a few methods each: drain a driver sample
// buffer, read a set of metrics, identify the device. New opens them and
// gives each device a loop and a ring; AddOutput attaches a
// record.Output through a pump of its own, which holds one cursor (a lane)
// in every ring:
//
//	DeviceSource ─► device loop ─► ring ─┬─► pump ─► record.Output
//	DeviceSource ─► device loop ─► ring ─┼─► pump ─► record.Output
//	                                     └─► ...
//
// The engine reads the metrics of a catalog.Catalog (Config.Catalog) on
// the schedules of Config: sample buffers are drained at half their span,
// at most their class's freshness limit apart (the primary buffers, power,
// utilization and SM clock, within DrainInterval; the others within
// SecondaryDrainInterval), field values, slow state, rare state, GPM and
// processes each at their own interval. The defaults keep one GPU's NVML
// calls near 9 per second. Events (driver events, losses, hangs, self-metrics, live
// findings) go into one bounded event log that every pump reads.
//
// # Goroutines
//
// Run starts, and waits for before it returns:
//   - one loop per device, the only goroutine that calls that device's
//     DeviceSource methods (apart from the few documented as safe from any
//     goroutine); it publishes into its own ring and never blocks on an
//     output;
//   - one pump per output, the only goroutine that calls that output's
//     Write and Close; it flushes every PumpOptions.FlushInterval on the
//     wall clock;
//   - the event watchers: one per device whose source is an EventWatcher,
//     or a single one for a SourceEventWatcher;
//   - the watchdog (when Config.CallTimeout is set), which marks a device
//     hung when one of its driver calls overruns;
//   - the cursor saver (when Config.Cursors is set).
//
// The device loops end with Run's context, after a final drain; the pumps
// outlive them so that what the final drain published is delivered, then
// each pump closes its output within Config.ShutdownTimeout. AddOutput,
// RemoveOutput and ReplaceOutput may be called before or while Run runs;
// Stats, Devices and Emit from any goroutine.
//
// # Who owns what
//
// A ring lane never blocks its producer: a lane that is full refuses the
// newest samples for that output only and counts them, so that for every
// output read + dropped = published, exactly (OutputStats). Samples are
// copied by value into each lane. Each pump owns one record.Batch and reuses
// it for every Write: the output may read it only until Write returns and
// copies what it keeps. Events in a batch share their Attrs and Fields with
// the event log, which never modifies them; outputs must not either. What
// a Write error asks of the pump (offer the batch again, hold it, give it
// up) is read with record.Classify.
//
// # Losses
//
// Every sample the driver overwrote before a drain reached it is counted
// (DeviceStats.SuspectedLosses, LostEstimate, a record.EventSampleLoss
// event and one WARN line per loss): a drain that comes back full with a
// gap after the cursor, the first drain of a buffer that was empty (or
// whose device did not answer at start) that comes back full, and the gap
// a restart or a lost device left. A drain is full when it returns what
// the buffer holds: the capacity the backend reports, checked against the
// most a drain from the start returned. An overrun shortens the buffer's
// drain interval only when the drain came on schedule, not after a stall
// (a slow driver call). A first backlog bigger than an output's lane is
// published in lane-sized steps as the outputs read, so none is dropped.
//
// # Time
//
// Device loops, the watchdog and lost-device probes are scheduled by
// Config.Clock, which tests replace with a fake clock; pumps flush on the
// system clock. Each device's driver timestamps are classified once
// (timebase, ClockKind) as realtime or boot time and converted to Unix time
// with one offset, not re-anchored per batch; a step of the host's
// realtime clock is re-anchored and reported as a record.EventClockStep
// event.
package sampler
