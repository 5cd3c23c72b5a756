// Package buffer puts a per-output queue between a pump and its output, so
// that a sink that is down for minutes does not cost data.
//
// A Buffer is itself a record.Output that decorates the real one: the pump
// (and the fan-out) cannot tell it is there, and it works alike for
// in-process outputs and plugin clients. Wrap builds it from a plain
// Config:
//
//	out, err := buffer.Wrap(influx, buffer.Config{Kind: "disk", MaxBytes: 1 << 30, Dir: dir},
//		buffer.WithLogger(log.With("output", "influxdb")))
//
// Kinds: "none" (Wrap returns the output unchanged), "memory" (bounded by
// bytes and records; lost on restart) and "disk" (a bounded queue of
// checksummed segment files that survives restarts and replays at least
// once, each batch with its Seq).
//
// Batches are stored in records.proto's Batch encoding (package
// record/recordpb), the one encoding of a batch that the plugin
// protocol and NATS use too; disk segments also record the metric catalog
// and device identities, so that a replay maps metric IDs by name and
// names its devices.
//
// Ownership and concurrency: Write copies (encodes) the pump's batch and
// returns at once; it never waits for the output and keeps nothing of the
// batch. One goroutine per Buffer delivers the queue in order, one Write at
// a time, and removes a batch only after the output accepted it. An output
// marks errors that retrying cannot fix with record.Permanent; those
// batches are dropped, counted and logged (at most once a minute). Every
// other error is retried with jittered exponential backoff. Every loss is
// counted by reason in Stats. See README.md for the on-disk format and the
// crash-safety order.
package buffer
