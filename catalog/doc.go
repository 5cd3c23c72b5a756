// Package catalog defines the metrics gpusampler knows: for each one its
// MetricID, name, base unit, group, kind and value type, where a backend
// reads it from (Origin: a driver sample buffer, a field-value batch, a
// point query or GPM), and how the other naming schemes spell it (the
// Telegraf nvidia_smi input, line protocol, dcgm-exporter).
//
// It is a leaf: it imports nothing of this module, so the engine, every
// output, the plugin SDK, the stream decoders and the wire codec can share
// one table without linking each other. Package record builds on it
// (Sample.Metric is a MetricID).
//
// The built-in Catalog is immutable once built and safe for concurrent use
// by any number of goroutines. MetricIDs are dense (1..Len()-1) and travel
// on the wire (disk buffers, the plugin protocol, NATS protobuf): a metric
// is only ever appended to the catalog, never inserted, removed or moved.
package catalog
