// Package podresources holds the Go messages of the kubelet's pod-resources
// v1 API (see api.proto) and a hand-written client and server binding of
// its PodResourcesLister service.
package podresources

// Regenerate with protoc from Debian's protobuf-compiler (3.21.12) and
// protoc-gen-go v1.36.12.
//go:generate protoc --go_out=. --go_opt=paths=source_relative api.proto
