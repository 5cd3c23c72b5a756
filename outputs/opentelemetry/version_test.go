package opentelemetry_test

import (
	"context"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

// The program's version (outputs.BuildEnv.Version) is the resource's
// service.version and the scope's version; without one both are left out.
func TestBuildVersion(t *testing.T) {
	for _, version := range []string{"1.4.2", ""} {
		c := &collector{}
		cfg, err := parseConfig(t, "[[outputs.opentelemetry]]\nprotocol = \"http/protobuf\"\nendpoint = \""+
			serve(t, opentelemetry.ProtocolHTTP, c)+"\"\n")
		if err != nil {
			t.Fatal(err)
		}
		out, err := opentelemetry.Kind().Build(&cfg.Outputs[0].Block, outputs.BuildEnv{Host: "node1", Version: version})
		if err != nil {
			t.Fatal(err)
		}
		b := &record.Batch{Devices: []record.Device{outputtest.Device},
			Samples: []record.Sample{{TimeNS: t0, Value: 73, Metric: catalog.MetricUtilGPU}}}
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		out.Close()
		reqs := c.requests()
		if len(reqs) != 1 || len(reqs[0].ResourceMetrics) != 1 {
			t.Fatalf("version %q: requests %v", version, reqs)
		}
		rm := reqs[0].ResourceMetrics[0]
		got, ok := attrMap(rm.Resource.GetAttributes())["service.version"]
		if version == "" && ok || version != "" && got != version {
			t.Fatalf("version %q: resource %v", version, attrMap(rm.Resource.GetAttributes()))
		}
		if sv := rm.ScopeMetrics[0].Scope.GetVersion(); sv != version {
			t.Fatalf("version %q: scope version %q", version, sv)
		}
	}
}
