// Package config is the leaf that reads TOML config tables: Decode parses
// a document (a UTF-8 byte-order mark skipped, ${NAME} expanded from the
// environment, "$${" for a literal "${") into a Table, whose typed getters
// (String, OneOf, Bool, Int, Uint64, Duration, Strings, StringMap, Sub)
// take keys and collect every problem as an Error that names the file,
// line and dotted key: "file:line: key: message". Finish reports the keys
// nobody took as unknown. Messages never print a value that came from the
// environment: they name the ${NAME} instead.
//
// The package imports nothing else of gpusampler: outputs and plugins
// (plugins/sdk) decode their own blocks with it without linking the
// application. The application's config model ([agent], [sampler],
// [[outputs.KIND]] and their validation) is built on it elsewhere.
package config
