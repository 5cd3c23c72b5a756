package plugins_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/plugins"
)

// The README's supervision table states the restart backoff's defaults.
func TestREADMERestartBackoff(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	// "100ms" → "100 ms", as the table writes durations.
	spaced := regexp.MustCompile(`^([0-9.]+)([a-zµ]+)$`)
	d := func(v interface{ String() string }) string { return spaced.ReplaceAllString(v.String(), "$1 $2") }
	want := "| restart backoff | " + d(plugins.DefaultBackoffMin) + " doubling to " + d(plugins.DefaultBackoffMax) +
		", reset after " + d(plugins.DefaultResetAfter) + " healthy | `restart_delay_max` (the cap) |"
	if !strings.Contains(string(b), "\n"+want+"\n") {
		t.Errorf("README.md has no row %q", want)
	}
}
