// Package appconfig reads gpusampler's TOML configuration into plain data:
// the application's config model.
//
// Config is data first: Parse decodes a document into plain structs
// (Config, Agent, Sampler, Attribution, Output) and validates them —
// unknown keys, wrong types, non-positive intervals, unknown output kinds,
// include/exclude patterns that match no metric or group, undefined ${ENV}
// references — without opening devices or connections. Every problem is
// reported as one line "file:line: key: message", and all problems of a
// file are reported at once. The caller builds runtime objects (engine,
// outputs) from the result; see the agent package.
//
// The tables, their typed getters, the error type, durations and ${ENV}
// expansion are the config leaf's (package config), which outputs and
// plugins use on their own. Output kinds are described by an
// outputs.Registry value (no package-level state): each kind contributes
// its sample.conf fragment, a Parse function for its own keys and a Build
// function. Example assembles the whole example config from the fragments.
package appconfig
