#!/bin/sh
# Regenerates the Python message classes from the protocol's .proto files
# (Debian: protobuf-compiler 3.21.12, whose output python3-protobuf 4.21
# reads). The gRPC service needs no generated stubs: the plugin registers its
# four methods with grpc's generic handlers. The record messages live in
# record/recordpb and are read as recordpb/records.proto, the name
# output.proto imports them by.
set -eu
cd "$(dirname "$0")"
rm -rf gen/records
mkdir -p gen/recordpb
protoc -I ../../proto -I ../../../record --python_out=gen ../../proto/output.proto ../../../record/recordpb/records.proto
