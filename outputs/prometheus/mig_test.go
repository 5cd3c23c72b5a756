package prometheus

import (
	"context"
	"testing"
)

// A MIG instance's series carry GPU_I_PROFILE and GPU_I_ID, with gpu and
// device naming the physical GPU, as dcgm-exporter labels them; the
// physical GPU's series have no MIG labels.
func TestMIGLabels(t *testing.T) {
	o, _ := newTest(t, Options{})
	devs := devices(2)
	devs[1].Index, devs[1].UUID, devs[1].Name = 8, "MIG-abcd", "NVIDIA H200 MIG 1g.18gb"
	devs[1].MIG, devs[1].Parent, devs[1].GPUInstanceID, devs[1].MIGProfile = true, 0, 7, "1g.18gb"
	if err := o.Write(context.Background(), fullBatch(devs, t0.UnixNano())); err != nil {
		t.Fatal(err)
	}
	fam := scrape(t, o)["DCGM_FI_DEV_FB_USED"]
	if fam == nil || len(fam.Metric) != 2 {
		t.Fatalf("DCGM_FI_DEV_FB_USED: %v", fam)
	}
	seen := 0
	for _, m := range fam.Metric {
		l := labelsOf(m)
		switch l["UUID"] {
		case "MIG-abcd":
			if l["GPU_I_PROFILE"] != "1g.18gb" || l["GPU_I_ID"] != "7" || l["gpu"] != "0" || l["device"] != "nvidia0" {
				t.Errorf("MIG labels %v", l)
			}
			seen++
		default:
			if _, ok := l["GPU_I_ID"]; ok {
				t.Errorf("physical GPU with MIG labels: %v", l)
			}
			seen++
		}
	}
	if seen != 2 {
		t.Fatalf("saw %d series", seen)
	}
}
