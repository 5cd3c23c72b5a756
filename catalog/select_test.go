package catalog_test

import (
	"slices"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
)

func TestSelect(t *testing.T) {
	if catalog.Select(nil, nil) != nil {
		t.Error("Select(nil, nil) is not nil (every metric)")
	}
	sel := catalog.Select([]string{"power", "clocks_current_*"}, []string{"power_limit"})
	var got []string
	for _, m := range catalog.Default().All() {
		if sel(&m) {
			got = append(got, m.Name)
		}
	}
	want := []string{"power_draw", "power_draw_instant", "module_power_draw", "energy_consumption",
		"clocks_current_sm", "clocks_current_memory", "clocks_current_graphics", "clocks_current_video"}
	if !slices.Equal(got, want) {
		t.Errorf("selected %v\nwant %v", got, want)
	}
	if catalog.MatchAny([]string{"["}, "x") {
		t.Error("a malformed pattern matched")
	}
}
