package recordpb

// Regenerate with pinned tools: protoc from Debian's protobuf-compiler
// (3.21.12) and protoc-gen-go v1.36.12. The file is read as
// recordpb/records.proto (include path: the record directory), the name
// plugins/proto/output.proto imports it by. The MetricId enum's values are
// written from the metric catalog first (internal/genmetricids).
//go:generate go run ./internal/genmetricids records.proto
//go:generate protoc -I .. --go_out=.. --go_opt=paths=source_relative ../recordpb/records.proto
