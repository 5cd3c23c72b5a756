package record_test

import (
	"slices"
	"testing"

	"github.com/gpusampler/gpusampler/record"
)

func TestAttributionKeysAreACopy(t *testing.T) {
	want := []string{record.AttrPod, record.AttrNamespace, record.AttrContainer, record.AttrHPCJob}
	k := record.AttributionKeys()
	if !slices.Equal(k[:], want) {
		t.Fatalf("AttributionKeys() = %v, want %v", k, want)
	}
	k[0] = "changed"
	if got := record.AttributionKeys(); !slices.Equal(got[:], want) {
		t.Fatalf("after modifying a result, AttributionKeys() = %v", got)
	}
	a := record.Attribution{Pod: "p", HPCJob: "j"}
	if got := a.Attrs(); !slices.Equal(got, []record.Attr{{Key: record.AttrPod, Value: "p"}, {Key: record.AttrHPCJob, Value: "j"}}) {
		t.Fatalf("Attrs() = %v", got)
	}
}
