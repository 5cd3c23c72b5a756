// Package deploy tests the deployment files in deploy/: the Kubernetes
// manifests decode strictly into the k8s.io/api types (and the Prometheus
// Operator's ServiceMonitor), their embedded config passes gpusampler's own
// config check, and the systemd unit passes `systemd-analyze verify`. It is
// a nested module so that the main module never depends on Kubernetes.
package deploy
