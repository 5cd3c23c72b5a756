package main

import (
	"os"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
)

// records.proto's MetricId enum is what the generator writes from the
// catalog now: a catalog change without go generate fails here.
func TestProtoEnumIsGenerated(t *testing.T) {
	src, err := os.ReadFile("../../records.proto")
	if err != nil {
		t.Fatal(err)
	}
	out, err := rewrite(src, render(catalog.Default()))
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(src) {
		t.Fatal("records.proto's MetricId enum differs from the catalog: run go generate ./record/recordpb (make generate)")
	}
	if !strings.Contains(string(src), "  METRIC_POWER_DRAW = 1;\n") {
		t.Fatal("records.proto lacks METRIC_POWER_DRAW = 1")
	}
}

func TestRewriteNeedsMarkers(t *testing.T) {
	if _, err := rewrite([]byte("enum MetricId {\n}\n"), "x"); err == nil {
		t.Fatal("rewrite without markers: no error")
	}
}
