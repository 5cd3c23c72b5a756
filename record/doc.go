// Package record is the record model every part of gpusampler speaks: the
// Sample, the Device identity and the Event, a Summary of a window of
// samples, and the Batch that carries them from a pump to an output. It
// also holds the delivery contract, the Output interface and its error
// kinds, which every hop that passes a Batch on shares.
//
// It is a leaf: it imports only package catalog (for MetricID), so outputs,
// the plugin SDK and its plugins, the stream decoders and the wire codec
// use it without linking the engine (package sampler).
//
// # Ownership
//
// Whoever offers a Batch owns it and every slice in it; the receiver may
// read it only until the call returns and copies what it keeps
// (Event.Clone copies an event). Samples are plain values (no pointers),
// so copying a slice of them copies them.
//
// # The error contract
//
// An Output's Write error says what should happen to the batch: offer it
// again (retryable), hold it until the output is back (unavailable), or
// give it up (permanent); Classify reads the kind, Permanent and
// Unavailable mark an error with one. The contract lives here, beside the
// Batch and the Output it governs, rather than in the engine, because
// every hop a batch takes reads and writes it: the engine's pumps, the
// aggregating and buffering wrappers, the plugin client, the plugin
// protocol and the SDK in the plugin process, and each sink. A plugin
// built on the SDK returns record.Permanent(err) and the host's pump sees
// KindPermanent, with no copy of the contract on either side of the wire.
package record
