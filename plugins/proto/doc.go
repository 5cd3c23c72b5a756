// Package proto holds gpusampler's output plugin protocol: output.proto and
// the Go code generated from it (output.pb.go, output_grpc.pb.go).
//
// Nothing outside the plugins packages uses it directly: the host's plugin
// client (package plugins) and the SDK (plugins/sdk) hide it behind
// record.Output. Plugin authors writing in another language start from
// output.proto and plugins/README.md.
//
// Regenerate with `make generate` (record/recordpb first: output.proto
// imports its records.proto); generated
// files are committed so that builds and tests need no protoc.
package proto
