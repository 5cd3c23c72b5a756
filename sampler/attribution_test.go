package sampler_test

import (
	"testing"

	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// SetAttribution is an identity change: a new Generation carrying the
// attribution, nothing for a repeat or an unknown device.
func TestEngineSetAttribution(t *testing.T) {
	e, err := sampler.New(&fakeSource{devs: []*fakeDevice{newFakeDevice(0), newFakeDevice(1)}}, sampler.Config{Select: onlyPowerBuffer})
	if err != nil {
		t.Fatal(err)
	}
	before := e.Devices()
	a := record.Attribution{Pod: "train-7", Namespace: "ml", Container: "trainer"}
	if !e.SetAttribution(1, a) {
		t.Fatal("SetAttribution reported no change")
	}
	if e.SetAttribution(1, a) || e.SetAttribution(7, a) {
		t.Fatal("a repeat or an unknown device reported a change")
	}
	want := before[1]
	want.Attribution, want.Generation = a, before[1].Generation+1
	if got := e.Devices(); got[0] != before[0] || got[1] != want {
		t.Fatalf("devices %+v, want %+v and %+v", got, before[0], want)
	}
}
