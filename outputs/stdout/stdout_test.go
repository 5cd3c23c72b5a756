package stdout

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

var update = flag.Bool("update", false, "rewrite golden files")

// decodeInflux turns our line protocol back into samples (Telegraf names →
// catalog metrics, scaled back to base units).
func decodeInflux(t *testing.T, data []byte) []record.Sample {
	t.Helper()
	out, err := influxtest.DecodeSamples(data)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decodeJSON(t *testing.T, data []byte) []record.Sample {
	t.Helper()
	var out []record.Sample
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Type   string  `json:"type"`
			Time   int64   `json:"time"`
			GPU    int     `json:"gpu"`
			Metric string  `json:"metric"`
			Value  float64 `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("invalid JSON line %q: %v", sc.Text(), err)
		}
		if r.Type != "sample" {
			continue
		}
		m, _ := catalog.Default().Lookup(r.Metric)
		out = append(out, record.Sample{TimeNS: r.Time, Value: r.Value, Device: uint16(r.GPU), Metric: m.ID})
	}
	return out
}

// received decodes what a format wrote, or is nil for the table view
// (which summarises rather than carries samples).
func received(format string, buf **bytes.Buffer) func(t *testing.T) []record.Sample {
	switch format {
	case "json":
		return func(t *testing.T) []record.Sample { return decodeJSON(t, (*buf).Bytes()) }
	case "influx":
		return func(t *testing.T) []record.Sample { return decodeInflux(t, (*buf).Bytes()) }
	}
	return nil
}

func TestConformance(t *testing.T) {
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			var buf *bytes.Buffer
			outputtest.Run(t, outputtest.Harness{
				New: func(t *testing.T) record.Output {
					buf = &bytes.Buffer{}
					o, err := New(buf, Options{Format: format, Host: "node1"})
					if err != nil {
						t.Fatal(err)
					}
					return o
				},
				Received: received(format, &buf),
			})
		})
	}
}

// goldenBatch covers every shape an encoder meets: identities (one
// simulated), fields sharing a timestamp, a point read, a pstate change,
// integer and float types with Telegraf's scaling, and an event.
func goldenBatch() *record.Batch {
	const t0 = 1_790_000_000_000_000_000
	dev0 := outputtest.Device
	dev1 := record.Device{Index: 1, UUID: "GPU-sim-1", Name: "NVIDIA H200 (simulated)", PCIBusID: "00000000:28:00.0", Backend: "sim", Simulated: true}
	return &record.Batch{Seq: 7, Devices: []record.Device{dev0, dev1}, Samples: []record.Sample{
		{TimeNS: t0, Value: 0, Device: 0, Metric: catalog.MetricPState},
		{TimeNS: t0, Value: 612.5, Device: 0, Metric: catalog.MetricPowerDraw},
		{TimeNS: t0 + 50e6, Value: 97, Device: 0, Metric: catalog.MetricUtilGPU},
		{TimeNS: t0 + 100e6, Value: 655.25, Device: 0, Metric: catalog.MetricPowerInstant},
		{TimeNS: t0 + 100e6, Value: 1234567890, Device: 0, Metric: catalog.MetricEnergy},
		{TimeNS: t0 + 100e6, Value: 71, Device: 0, Metric: catalog.MetricTempMemory},
		{TimeNS: t0 + 100e6, Value: 2_500_000, Device: 0, Metric: catalog.MetricThrottleHWThermal},
		{TimeNS: t0 + 200e6, Value: 0, Device: 1, Metric: catalog.MetricUtilGPU, Flags: record.FlagPointRead},
		{TimeNS: t0 + 200e6, Value: 0, Device: 1, Metric: catalog.MetricUtilMemory, Flags: record.FlagPointRead},
		{TimeNS: t0 + 300e6, Value: 99328, Device: 1, Metric: catalog.MetricMemoryUsed},
	}, Events: []record.Event{{Kind: record.EventXID, Device: 0, StartNS: t0 + 400e6, EndNS: t0 + 400e6,
		Message: "Xid 79: GPU has fallen off the bus", Attrs: []record.Attr{{Key: "xid", Value: "79"}}}}}
}

func TestGolden(t *testing.T) {
	for _, format := range []string{"influx", "json"} {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			o, err := New(&buf, Options{Format: format, Host: "node1", GlobalTags: map[string]string{"cluster": "c1", "rack": "r7"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Write(t.Context(), goldenBatch()); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", format+".golden")
			if *update {
				os.WriteFile(path, buf.Bytes(), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("output differs from %s:\n got:\n%s\nwant:\n%s", path, buf.Bytes(), want)
			}
		})
	}
}

func TestUnknownFormat(t *testing.T) {
	if _, err := New(&bytes.Buffer{}, Options{Format: "xml"}); err == nil {
		t.Fatal("unknown format accepted")
	}
}

// A batch with a line the encoder must skip (a tag value line protocol
// cannot carry) is refused whole, as permanent, and nothing is written: the
// pump counts every record in it as failed instead of as delivered.
func TestUnencodableBatchRefused(t *testing.T) {
	var buf bytes.Buffer
	out, err := New(&buf, Options{Format: "influx", Host: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	bad := &record.Batch{Seq: 1, Devices: []record.Device{{Index: 0, UUID: "GPU-1", Name: "H200\nx"}},
		Samples: []record.Sample{{TimeNS: 1, Value: 100, Metric: catalog.MetricPowerDraw}}}
	err = out.Write(context.Background(), bad)
	if record.Classify(err) != record.KindPermanent || !strings.Contains(err.Error(), "batch of 2 records not written") {
		t.Fatalf("err %v (%v), want a permanent refusal of 2 records", err, record.Classify(err))
	}
	if buf.Len() != 0 {
		t.Fatalf("wrote %q", buf.String())
	}
	// the identity is fixed by the next batch: lines flow again
	good := &record.Batch{Seq: 2, Devices: []record.Device{{Index: 0, UUID: "GPU-1", Name: "H200"}},
		Samples: []record.Sample{{TimeNS: 2, Value: 100, Metric: catalog.MetricPowerDraw}}}
	if err := out.Write(context.Background(), good); err != nil {
		t.Fatal(err)
	}
	if want := "nvidia_smi,host=node1,index=0,name=H200,uuid=GPU-1 power_draw=100 2\n"; buf.String() != want {
		t.Fatalf("wrote %q, want %q", buf.String(), want)
	}
}
