// Package kubelet tests gpusampler's pod-resources client end to end
// against the kubelet's own pod-resources v1 service (k8s.io/kubelet),
// served on a Unix socket. It is a nested module so that the main module
// does not depend on the kubelet's packages.
package kubelet
