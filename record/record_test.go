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

func TestFieldValue(t *testing.T) {
	fields := []record.Field{{Key: "failing", Value: 1, Int: true}, {Key: "age", Value: 2.5}, {Key: "failing", Value: 7}}
	for _, tc := range []struct {
		key  string
		want float64
	}{
		{"failing", 1}, // the first field of a key wins
		{"age", 2.5},
		{"absent", 0},
	} {
		if got := record.FieldValue(fields, tc.key); got != tc.want {
			t.Errorf("FieldValue(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
	if got := record.FieldValue(nil, "failing"); got != 0 {
		t.Errorf("FieldValue(nil) = %v, want 0", got)
	}
}

// A simulated device is marked once in its display name: the simulator's
// own names already carry the mark and are not marked again.
func TestDisplayNameMarksSimulatedOnce(t *testing.T) {
	for _, c := range []struct {
		name string
		sim  bool
		want string
	}{
		{"NVIDIA H200", false, "NVIDIA H200"},
		{"NVIDIA H200", true, "NVIDIA H200 (simulated)"},
		{"NVIDIA H200 (simulated)", true, "NVIDIA H200 (simulated)"},
		{"", true, "(simulated)"},
	} {
		d := record.Device{Name: c.name, Simulated: c.sim}
		if got := d.DisplayName(); got != c.want {
			t.Errorf("Device{Name: %q, Simulated: %v}.DisplayName() = %q, want %q", c.name, c.sim, got, c.want)
		}
	}
}
