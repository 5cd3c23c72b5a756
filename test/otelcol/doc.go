// Package otelcol runs a real OpenTelemetry Collector (otelcol with its
// OTLP receiver, built from the collector's own modules) in the test
// process and proves gpusampler's opentelemetry output against it: the
// collector receives every sample a stdout twin printed. It is a module of
// its own so that the main module does not carry the collector's
// dependency graph. It holds only tests.
package otelcol
