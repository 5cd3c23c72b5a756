package plugins_test

import (
	"fmt"
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

// The README states the log rate limit and the default memory limits.
func TestREADMELimits(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ")
	for _, want := range []string{
		fmt.Sprintf("%d lines a second on average, in bursts of up to %d", plugins.LogRate, plugins.LogBurst),
		fmt.Sprintf("| %d MiB: killed with its process group", plugins.DefaultMemoryMax>>20),
		fmt.Sprintf("| %d GiB (it serves several outputs): killed, every output in it restarted", plugins.DefaultSharedMemoryMax>>30),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README.md does not say %q", want)
		}
	}
}
