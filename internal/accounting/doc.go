// Package accounting keeps per-job GPU accounts: for every owner of a GPU
// — the Kubernetes pod/namespace/container or the Slurm job the
// attribution found, or "unattributed" — per device, the energy it used,
// its busy and idle-allocated seconds, its peak memory, and how exact
// those figures are. It emits them as records (record.EventJob with the
// running totals every report interval, record.EventJobEnd with the final
// totals when the owner leaves the device), which every output carries.
//
// An Accountant is fed what the engine publishes: every sample
// (sampler.Observer), every process poll with the processes' own
// attribution and SM utilization (sampler.ProcessObserver and
// sampler.EventObserver), and each device attribution change with its
// time (SetOwner; attribution.Target wraps the engine so that the
// resolver's changes reach it). It has no clock: time is the samples' own
// timestamps (the driver's, for buffered samples), so it accounts the
// same whether samples arrive live or late.
//
// # Rules
//
// Owner. A device attributed to one owner (its identity's attribution) is
// that owner's alone. A device without one (a GPU shared by time-slicing
// or MPS, which the kubelet hands to several containers) is split among
// its processes' own owners (processes without one are unattributed); a
// device with neither is unattributed. An owner's account starts when it
// arrives and ends when it leaves; a change takes effect at its time on
// the samples' timeline.
//
// Split. On a shared device each owner's share, of energy and of
// utilization, is its processes' part of the summed per-process SM
// utilization of the newest process poll; when that sum is 0 (the GPU
// idles, or the driver has no per-process utilization) the owners share
// evenly — idle power is split evenly among the owners that hold the GPU,
// not charged to "unattributed".
//
// Energy (energy_j). The power buffer's samples are integrated by the
// trapezoid rule between consecutive driver timestamps, split at owner
// changes (the power there interpolated linearly). Two consecutive
// samples more than GapLimit apart (2 s by default: a lost GPU, lost
// buffer samples) are a gap: nothing is integrated across it and its
// length counts as lost_s of every owner holding the device — energy is
// never silently smaller: lost_s and exactness say how much time it
// misses.
//
// Energy counter (energy_counter_j). Each delta of the driver's
// cumulative energy counter between two readings is split among the
// owners in proportion to the energy_j each had between those readings
// (evenly among the owners at the reading when none had any, e.g. across
// a gap); energy_diff_j is energy_counter_j − energy_j. Across a gap the
// counter still counts, so energy_counter_j covers what energy_j cannot.
//
// Busy and idle (busy_s, idle_allocated_s). Each utilization sample
// (NVML: the percent of its sample period in which a kernel ran) covers
// the time since the previous one (not across a gap). An owner is busy in
// it when its part of the utilization is at least IdleThreshold (1%: any
// kernel ran), and otherwise idle; idle time of an attributed owner is
// idle_allocated_s (the GPU was allocated and unused). "unattributed" has
// no idle-allocated time.
//
// Exactness. allocated_s is the owner's time on the device along the
// power timeline, gaps included; point_read_s the part of it whose
// utilization came from point reads (an idle GPU's dry buffers) instead of
// the driver's samples; exactness = 1 − (point_read_s + lost_s) /
// allocated_s.
//
// Peak memory (memory_peak_mib). The device's memory used while the owner
// held it alone; on a shared device, the sum of its processes' memory at
// each poll.
//
// No power samples. A device seen for NoPowerAfter (10 s of sample time)
// without a power sample — a MIG instance (NVML has no per-instance
// power), a GPU with neither a power buffer nor a power reading — is
// accounted along the times it was seen at (its other samples, its
// process polls) instead: allocated_s is the time between them, all of it
// lost_s (no power sample covers it), so energy_j and power_samples stay 0
// and exactness is 0 — the energy figures say nothing about such a device;
// busy, idle and memory figures come from their own samples as anywhere,
// and job and job-end records go out as on any device.
//
// A job-end record goes out once the owner's figures can no longer change:
// the power and utilization timelines and a closed counter window have
// passed the end. Right before it goes an EventJob with the same figures,
// so a counter's last value equals the job-end total.
package accounting
