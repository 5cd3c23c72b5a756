package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// The periods printed as the fake driver's assumption are the ones
// scripts/nvml-calls.sh gives it (PERIODS=driver).
func TestFakePeriodsMatchNvmlCalls(t *testing.T) {
	b, err := os.ReadFile("../../scripts/nvml-calls.sh")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), `driver) periods="`)
	list, _, _ := strings.Cut(rest, `"`)
	want := map[string]time.Duration{}
	for _, name := range []string{"total_power", "gpu_util", "memory_util", "encoder_util", "decoder_util", "sm_clock", "memory_clock",
		"module_power", "jpeg_util", "ofa_util"} {
		want[name] = 20 * time.Millisecond // the fake's default
	}
	names := []string{"total_power", "gpu_util", "memory_util", "encoder_util", "decoder_util", "sm_clock", "memory_clock",
		"module_power", "jpeg_util", "ofa_util"}
	for _, kv := range strings.Split(list, ",") {
		var typ, us int
		if _, err := fmt.Sscanf(kv, "%d:%d", &typ, &us); err != nil {
			t.Fatalf("nvml-calls.sh periods %q: %v", kv, err)
		}
		want[names[typ]] = time.Duration(us) * time.Microsecond
	}
	for name, d := range want {
		if fakePeriods[name] != d {
			t.Errorf("%s: gpucheck prints %v, nvml-calls.sh gives the fake %v", name, fakePeriods[name], d)
		}
	}
}
