package simprofile

import (
	"slices"
	"testing"
)

func TestNames(t *testing.T) {
	n := Names()
	if !slices.Contains(n, Default) {
		t.Fatalf("Names() = %q lacks the default %q", n, Default)
	}
	for _, name := range n {
		if !Valid(name) {
			t.Errorf("Valid(%q) = false for a listed name", name)
		}
	}
	for _, name := range []string{"", "Training", "nope"} {
		if Valid(name) {
			t.Errorf("Valid(%q) = true", name)
		}
	}
	n[0] = "changed"
	if Names()[0] == "changed" {
		t.Fatal("Names() shares its backing array with the caller")
	}
}
