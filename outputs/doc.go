// Package outputs is the contract between gpusampler and its outputs: an
// output kind (Kind) contributes its sample.conf fragment, a Parse function
// for its own keys of an [[outputs.KIND]] block and a Build function that
// makes a record.Output from the parsed Block. A Registry maps kind names
// to kinds; it is a value, not package state, so two programs (or two
// blocks of one kind) never share anything.
//
// The package depends only on the leaves: config (TOML tables and their
// errors), record (the Output interface) and catalog, so that a sink —
// built in or a third-party plugin built on plugins/sdk — links neither
// the engine nor the application's config model nor the simulator nor
// the buffers.
//
// Layout: each sink lives in its own sub-directory, outputs/NAME, with its
// code, README.md and sample.conf; outputs/outputtest is the conformance
// suite every output (and the plugin client) passes. What sits between the
// engine's pump and a sink is a layer of its own, private to gpusampler:
// internal/pipeline (aggregate: summaries per window; buffer: memory and
// disk queues), both plain record.Output wrappers, and internal/encoding
// (line protocol, JSON Lines, protobuf), the wire formats sinks write and
// package stream reads. The application's registry of built-in kinds is
// internal/registry.
package outputs
