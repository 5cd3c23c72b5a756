#!/bin/sh
# Regenerates the Python message classes from the protocol's .proto files
# (Debian: protobuf-compiler 3.21.12, whose output python3-protobuf 4.21
# reads). The gRPC service needs no generated stubs: the plugin registers its
# four methods with grpc's generic handlers.
set -eu
cd "$(dirname "$0")"
mkdir -p gen/records
protoc -I ../../proto --python_out=gen ../../proto/output.proto ../../proto/records/records.proto
