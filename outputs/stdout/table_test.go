package stdout_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/stdout"
	"github.com/gpusampler/gpusampler/record"
)

var updateTable = flag.Bool("update-table", false, "rewrite testdata/table.golden")

func TestTableGolden(t *testing.T) {
	var buf bytes.Buffer
	out, err := stdout.New(&buf, stdout.Options{Format: "table", Location: time.UTC})
	if err != nil {
		t.Fatal(err)
	}
	// Windows in 2100 (never before the output's start), 1 s apart.
	base := time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	sum := func(w int, dev uint16, id catalog.MetricID, mean, max, last float64) record.Summary {
		return record.Summary{StartNS: base + int64(w)*1e9, IntervalNS: 1e9, Mean: mean, Min: mean, Max: max,
			Last: last, Count: 10, Device: dev, Metric: id}
	}
	var sums []record.Summary
	for w := range 4 {
		for dev := uint16(0); dev < 2; dev++ {
			f := float64(w) + float64(dev)*10
			sums = append(sums,
				sum(w, dev, catalog.MetricPowerDraw, 600+f, 690+f, 610),
				sum(w, dev, catalog.MetricTempMemory, 70+f/10, 72+f/10, 71),
				sum(w, dev, catalog.MetricUtilGPU, 97, 100, 97),
				sum(w, dev, catalog.MetricUtilMemory, 60.4, 70, 60),
				sum(w, dev, catalog.MetricClockSM, 1980-f*10, 1980, 1980),
				sum(w, dev, catalog.MetricClockMemory, 3201, 3201, 3201),
			)
			if w != 2 { // a window without a slow query: last value held
				sums = append(sums, sum(w, dev, catalog.MetricTempGPU, 80+f, 80+f, 80+f),
					sum(w, dev, catalog.MetricMemoryUsed, 99328, 99328, 99328))
			}
			reasons := 0.0
			if dev == 1 && w >= 1 {
				reasons = catalog.ReasonSWThermalSlowdown | catalog.ReasonHWThermalSlowdown | catalog.ReasonSWPowerCap
			}
			sums = append(sums, sum(w, dev, catalog.MetricClocksEventReasons, reasons, reasons, reasons))
		}
	}
	ctx := context.Background()
	devs := []record.Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b", SlowdownTempC: 89}}
	// Two writes: rows come out once a window two intervals later arrived.
	if err := out.Write(ctx, &record.Batch{Devices: devs, Summaries: sums[:len(sums)/2]}); err != nil {
		t.Fatal(err)
	}
	if err := out.Write(ctx, &record.Batch{Summaries: sums[len(sums)/2:]}); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if len(line) > 80 {
			t.Errorf("line wider than 80 columns (%d): %q", len(line), line)
		}
		if strings.Contains(line, "\x1b") {
			t.Errorf("color escape without a terminal: %q", line)
		}
	}
	const golden = "testdata/table.golden"
	if *updateTable {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("table differs from %s (go test -update-table to accept):\n%s", golden, got)
	}
}

// A summary that arrives for a window already on screen (a late buffered
// metric) must not print a second, half-empty row for that time; the last
// window, cut short by the stop, prints only when it has every metric the
// rows before it had (else it would be a half-empty last row); simulated
// GPUs are marked above the header.
func TestTableLateSummaryAndSimulatedMarker(t *testing.T) {
	base := time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	sum := func(w int, id catalog.MetricID) record.Summary {
		return record.Summary{StartNS: base + int64(w)*1e9, IntervalNS: 1e9, Mean: 1, Min: 1, Max: 1, Last: 1, Count: 1, Metric: id}
	}
	const head = "# SIMULATED GPUs (no NVIDIA driver): made-up numbers, not measurements\n" +
		"#time    gpu  pwrW/max gpuC/mx memC/mx  sm% mem% smclk  mclk  fbMiB throttle\n"
	row := func(sec int) string {
		return fmt.Sprintf("03:04:%02d   0       1/1       -       -    1    -     -     -      - -\n", sec)
	}
	for _, tc := range []struct {
		name string
		last []record.Summary // what arrives for window 3
		want string
	}{
		{"last window complete", []record.Summary{sum(3, catalog.MetricPowerDraw), sum(3, catalog.MetricUtilGPU)},
			head + row(5) + row(6) + row(7) + row(8)},
		{"last window cut short", []record.Summary{sum(3, catalog.MetricPowerDraw)},
			head + row(5) + row(6) + row(7)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			out, err := stdout.New(&buf, stdout.Options{Format: "table", Location: time.UTC})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			devs := []record.Device{{Index: 0, UUID: "GPU-a", Simulated: true}}
			var sums []record.Summary
			for w := range 3 {
				sums = append(sums, sum(w, catalog.MetricPowerDraw), sum(w, catalog.MetricUtilGPU))
			}
			if err := out.Write(ctx, &record.Batch{Devices: devs, Summaries: sums}); err != nil {
				t.Fatal(err)
			}
			// Window 0 is printed by now; a late metric for it arrives.
			late := append([]record.Summary{sum(0, catalog.MetricClockSM)}, tc.last...)
			if err := out.Write(ctx, &record.Batch{Summaries: late}); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
			if got := buf.String(); got != tc.want {
				t.Fatalf("table\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
