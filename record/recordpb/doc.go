// Package recordpb holds the protobuf form of gpusampler's records
// (records.proto and the Go code generated from it) and the conversions
// between it and package record's types. It sits under the record leaf and
// links only record, catalog and the protobuf runtime, so the buffers and
// the encoders use it without the plugin tree.
//
// Two wire forms share these messages: the output plugin protocol
// (plugins/proto's WriteRequest) and the NATS output's protobuf encoding
// (one Batch per message, see internal/encoding/protobuf and package stream).
// The package has no gRPC dependency, so stream consumers do not pull one
// in.
//
// Regenerate with `go generate ./record/recordpb` (make generate).
package recordpb
