// Package opentelemetry is the OpenTelemetry output: it exports every
// record as OTLP metrics to an OpenTelemetry Collector (or any OTLP
// receiver) over OTLP/gRPC or OTLP/HTTP with binary protobuf, gzip by
// default, to one endpoint or several with failover.
//
// Records become OTLP points as the package README's tables say: metrics
// the OpenTelemetry hardware conventions define carry their hw.* names
// and units (catalog.Metric.OTel), the rest gpusampler.* names; every
// driver sample is one point at its own driver timestamp, gauges as
// Gauge points and counters as cumulative Sums with a start time; with
// aggregate set, each window of a gauge metric is one histogram point.
// Devices are point attributes (hw.id, hw.name, ...); the host, the
// global tags and a GPU's Kubernetes or Slurm attribution are resource
// attributes.
//
// The encoder builds OTLP's MetricsData from the generated protos of
// go.opentelemetry.io/proto/otlp (metrics, common, resource): it is
// wire-identical to an ExportMetricsServiceRequest, so the bytes are sent
// as they are, and neither the collector package (which links an HTTP
// gateway) nor pdata or the SDK is linked.
//
// Each Write is one export request, one attempt (per endpoint), bounded by
// timeout and the Write's deadline; the pump or buffer retries, told by
// the error's record.ErrorKind and, where the collector gave one, its
// retry delay (record.RetryAfterOf). A partial success is a success with
// its rejected points counted as dropped.
package opentelemetry
