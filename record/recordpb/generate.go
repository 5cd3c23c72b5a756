package recordpb

// Regenerate with pinned tools: protoc from Debian's protobuf-compiler
// (3.21.12) and protoc-gen-go v1.36.12. The file is read as
// recordpb/records.proto (include path: the record directory), the name
// plugins/proto/output.proto imports it by.
//go:generate protoc -I .. --go_out=.. --go_opt=paths=source_relative ../recordpb/records.proto
