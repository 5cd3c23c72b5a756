// Package telegraf_test runs Telegraf's own plugins in process against
// gpusampler: inputs.execd against the built gpusampler binary (run
// --execd), inputs.influxdb_listener and inputs.influxdb_v2_listener against
// outputs/telegraf. It is a module of its own so that the main module does
// not carry Telegraf's dependency graph; it imports the plugin packages,
// not telegraf/testutil (which pulls in Docker libraries).
package telegraf_test
