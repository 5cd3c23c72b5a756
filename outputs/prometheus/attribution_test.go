package prometheus

import (
	"context"
	"maps"
	"testing"

	"github.com/gpusampler/gpusampler/record"
)

// attributionOf returns the attribution labels of every GPU_UTIL series,
// by gpu label.
func attributionOf(t *testing.T, o *Output) map[string]map[string]string {
	t.Helper()
	fam := scrape(t, o)["DCGM_FI_DEV_GPU_UTIL"]
	if fam == nil {
		t.Fatal("no DCGM_FI_DEV_GPU_UTIL")
	}
	out := map[string]map[string]string{}
	for _, m := range fam.Metric {
		l := labelsOf(m)
		a := map[string]string{}
		for _, k := range record.AttributionKeys() {
			if v, ok := l[k]; ok {
				a[k] = v
			}
		}
		out[l["gpu"]] = a
	}
	return out
}

// A GPU allocated to a pod carries pod, namespace and container (and an HPC
// job hpc_job) on its series only; when the attribution ends, the next
// identity drops the labels and the old label set is gone from the scrape.
func TestAttributionLabels(t *testing.T) {
	o, _ := newTest(t, Options{})
	devs := devices(2)
	devs[1].Attribution = record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer"}
	if err := o.Write(context.Background(), fullBatch(devs, t0.UnixNano())); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{"0": {}, "1": {"pod": "train-7", "namespace": "ml", "container": "trainer"}}
	if got := attributionOf(t, o); !maps.EqualFunc(got, want, maps.Equal) {
		t.Fatalf("attribution labels %v, want %v", got, want)
	}

	devs[1].Attribution = record.Attribution{HPCJob: "4711"}
	devs[1].Generation++
	if err := o.Write(context.Background(), fullBatch(devs, t0.UnixNano()+1e9)); err != nil {
		t.Fatal(err)
	}
	want["1"] = map[string]string{"hpc_job": "4711"}
	if got := attributionOf(t, o); !maps.EqualFunc(got, want, maps.Equal) {
		t.Fatalf("after change: attribution labels %v, want %v", got, want)
	}

	devs[1].Attribution = record.Attribution{}
	devs[1].Generation++
	if err := o.Write(context.Background(), fullBatch(devs, t0.UnixNano()+2e9)); err != nil {
		t.Fatal(err)
	}
	want["1"] = map[string]string{}
	if got := attributionOf(t, o); !maps.EqualFunc(got, want, maps.Equal) {
		t.Fatalf("after end: attribution labels %v, want %v", got, want)
	}
}
