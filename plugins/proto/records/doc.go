// Package records holds the protobuf form of gpusampler's records
// (records.proto and the Go code generated from it) and the conversions
// between it and package sampler's types.
//
// Two wire forms share these messages: the output plugin protocol
// (plugins/proto's WriteRequest) and the NATS output's protobuf encoding
// (one Batch per message, see internal/encoding/protobuf and package stream).
// The package has no gRPC dependency, so stream consumers do not pull one
// in.
//
// Regenerate with `go generate ./plugins/proto` (make generate).
package records
