// Package prometheus is the Prometheus output: an HTTP endpoint (default
// :9400, dcgm-exporter's port) that dcgm-exporter dashboards and alerts
// read unchanged, and that still sees sub-second spikes.
//
// Write keeps, per device, the newest value of every metric and a window of
// every sample of each gauge; a custom collector builds the metrics at
// scrape time: DCGM_FI_* names and semantics by default (NamingDCGM, with
// DCGM_FI_DEV_POWER_USAGE the 1 s average), _min/_max/_mean over the
// configured window, counters that cannot alias (energy, throttle time per
// reason, XIDs), per-device temperature thresholds for alert rules, and
// self-metrics. A device without a recent sample, or lost, loses its
// series. /healthz answers whether every device produced a sample
// recently. TLS and basic auth come from an exporter-toolkit web config
// file.
//
// deploy/ holds alert rules and a Grafana dashboard for these metrics.
package prometheus
