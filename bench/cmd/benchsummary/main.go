// Command benchsummary reads `go test -bench -count N` output on stdin and
// prints, per benchmark and unit, the median of the runs, then the same-run
// ratios gpusampler tracks against their goals.
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusampler/gpusampler/bench"
)

// ratio compares two medians measured in the same run.
type ratio struct {
	what      string
	num, den  string // "Benchmark/name unit"
	goal      string
	lowerGood bool
}

var ratios = []ratio{
	{"ring batched publish+read per sample ÷ one empty cgo call", "BenchmarkPublish/batch64 ns/sample", "BenchmarkCgoEmptyCall ns/call", "≤ 0.15", true},
	{"channel fan-out ÷ ring fan-out, per sample (4 consumers)", "BenchmarkFanout/chan1 ns/sample", "BenchmarkFanout/ring64 ns/sample", "≥ 10", false},
}

var procSuffix = regexp.MustCompile(`-\d+$`)

func main() {
	medians := map[string][]float64{}
	var order []string
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			key := name + " " + f[i+1]
			if _, ok := medians[key]; !ok {
				order = append(order, key)
			}
			medians[key] = append(medians[key], v)
		}
	}
	fmt.Println("\nmedians:")
	slices.Sort(order)
	for _, k := range order {
		fmt.Printf("  %-70s %14.4g   (n=%d)\n", k, bench.Median(medians[k]), len(medians[k]))
	}
	fmt.Println("\nsame-run ratios:")
	for _, r := range ratios {
		n, d := medians[r.num], medians[r.den]
		if len(n) == 0 || len(d) == 0 {
			fmt.Printf("  %-60s  not measured\n", r.what)
			continue
		}
		fmt.Printf("  %-60s %8.3f   goal %s\n", r.what, bench.Median(n)/bench.Median(d), r.goal)
	}
}
