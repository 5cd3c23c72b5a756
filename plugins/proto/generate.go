package proto

// Regenerate with pinned tools: protoc from Debian's protobuf-compiler
// (3.21.12), protoc-gen-go v1.36.12, protoc-gen-go-grpc v1.5.1. The
// record messages output.proto imports are generated in record/recordpb.
//go:generate protoc -I . -I ../../record --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative output.proto
