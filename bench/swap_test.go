package bench

import (
	"reflect"
	"strings"
	"testing"
)

// side is a synthetic benchmark: one GPU of 1000 MiB, runs with the given
// wall times, each peaking at peakMiB.
func side(name string, peakMiB float64, walls ...float64) (*Result, *Benchmark) {
	r := &Result{Devices: []DeviceInfo{{Index: 0, MemoryTotalMiB: 1000}}}
	b := &Benchmark{Name: name}
	for i, w := range walls {
		b.Runs = append(b.Runs, Run{Index: i + 1, StartNS: int64(i+1) * 1e9, EndNS: int64(i+1)*1e9 + int64(w*1e9), WallS: Num(w),
			EnergyJ: Num(w * 100), PowerMeanW: 100, Devices: []RunDevice{{Index: 0, MemoryPeakMiB: Num(peakMiB)}}})
	}
	return r, b
}

func TestMemorySwapFinding(t *testing.T) {
	for _, tc := range []struct {
		name         string
		aPeak, bPeak float64
		aWalls       []float64
		bWalls       []float64
		want         []Diagnosis
	}{
		{name: "bigger batch B slower with memory full", aPeak: 700, bPeak: 985,
			aWalls: []float64{1.00, 1.02, 0.99, 1.01}, bWalls: []float64{1.50, 1.52, 1.49, 1.51},
			want: []Diagnosis{{Finding: FindingMemorySwap, Kind: "memory swap", Device: 0, StartNS: 1e9, EndNS: 4e9 + 1.51e9,
				Evidence: map[string]string{"slower": "B", "faster": "A", "slowdown": "1.5", "slower_memory_peak_pct": "98.5",
					"faster_memory_peak_pct": "70", "threshold_pct": "95"},
				Runs: []int{1, 2, 3, 4}}}},
		{name: "A is the slow full one", aPeak: 990, bPeak: 500,
			aWalls: []float64{2.0, 2.1, 2.0}, bWalls: []float64{1.0, 1.0, 1.1},
			want: []Diagnosis{{Finding: FindingMemorySwap, Kind: "memory swap", Device: 0, StartNS: 1e9, EndNS: 3e9 + 2e9,
				Evidence: map[string]string{"slower": "A", "faster": "B", "slowdown": "1.97", "slower_memory_peak_pct": "99",
					"faster_memory_peak_pct": "50", "threshold_pct": "95"},
				Runs: []int{1, 2, 3}}}},
		{name: "the full side is the faster one", aPeak: 700, bPeak: 985,
			aWalls: []float64{1.50, 1.52, 1.49}, bWalls: []float64{1.00, 1.02, 0.99}},
		{name: "both full", aPeak: 960, bPeak: 985,
			aWalls: []float64{1.00, 1.02, 0.99}, bWalls: []float64{1.50, 1.52, 1.49}},
		{name: "no difference shown", aPeak: 700, bPeak: 985,
			aWalls: []float64{1.0, 1.4, 1.1}, bWalls: []float64{1.2, 1.3, 1.05}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ra, a := side("A", tc.aPeak, tc.aWalls...)
			rb, b := side("B", tc.bPeak, tc.bWalls...)
			c := CompareResults(ra, a, rb, b, CompareOptions{})
			for i := range c.Diagnoses {
				if m := c.Diagnoses[i].Message; !strings.Contains(m, "gradient accumulation") || !strings.Contains(m, "ResNet-50") {
					t.Errorf("message without the field guide's story and advice: %s", m)
				}
				c.Diagnoses[i].Message = ""
			}
			if !reflect.DeepEqual(c.Diagnoses, tc.want) {
				t.Fatalf("diagnoses %+v\nwant %+v", c.Diagnoses, tc.want)
			}
		})
	}
}
