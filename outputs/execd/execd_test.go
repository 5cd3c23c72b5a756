package execd_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/execd"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/record"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
	// wrote, when set, gets a value (if it has room) after each Write.
	wrote chan struct{}
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	if s.wrote != nil {
		select {
		case s.wrote <- struct{}{}:
		default:
		}
	}
	return n, err
}

// waitLines waits until s holds at least n lines (s.wrote must be set).
func (s *syncBuf) waitLines(n int) {
	for strings.Count(s.String(), "\n") < n {
		<-s.wrote
	}
}
func (s *syncBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestConformanceStream(t *testing.T) {
	var buf *syncBuf
	outputtest.Run(t, outputtest.Harness{
		New: func(t *testing.T) record.Output {
			buf = &syncBuf{}
			out, err := execd.New(buf, execd.Options{Signal: execd.SignalNone})
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
		Received: func(t *testing.T) []record.Sample {
			s, err := influxtest.DecodeSamples([]byte(buf.String()))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func TestConformanceGather(t *testing.T) {
	outputtest.Run(t, outputtest.Harness{New: func(t *testing.T) record.Output {
		out, err := execd.New(&syncBuf{}, execd.Options{Signal: execd.SignalStdin, Trigger: make(chan struct{})})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}})
}

// Gather mode writes nothing until a trigger, then one summary line per
// device for the window since the previous gather.
func TestGather(t *testing.T) {
	buf := &syncBuf{}
	trig := make(chan struct{})
	now := time.Unix(100, 0)
	out, err := execd.New(buf, execd.Options{Signal: execd.SignalStdin, Trigger: trig, Host: "h",
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	b := &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Samples: outputtest.Samples(10)}
	if err := out.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "power_draw") {
		t.Fatalf("wrote before a gather: %q", buf.String())
	}
	now = time.Unix(110, 0)
	trig <- struct{}{}
	trig <- struct{}{} // the second waits for the first gather to finish
	want := `nvidia_smi,host=h,index=0,name=Test\ GPU,pci_bus_id=00000000:17:00.0,uuid=GPU-00000000-1111-2222-3333-444444444444 ` +
		"power_draw_mean=104.5,power_draw_min=100,power_draw_max=109,power_draw_last=109,power_draw_count=10i 100000000000\n"
	if got := buf.String(); got != want {
		t.Fatalf("gather wrote\n%q\nwant\n%q", got, want)
	}
}

// When stdin ends (the trigger is closed), Close writes the window since
// the last gather as one final gather; a Close without that (the run
// stopped while Telegraf still reads) writes no window.
func TestGatherAtEndOfInput(t *testing.T) {
	for _, ended := range []bool{true, false} {
		buf := &syncBuf{}
		trig := make(chan struct{})
		out, err := execd.New(buf, execd.Options{Signal: execd.SignalStdin, Trigger: trig, Host: "h",
			Now: func() time.Time { return time.Unix(100, 0) }})
		if err != nil {
			t.Fatal(err)
		}
		b := &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Samples: outputtest.Samples(10)}
		if err := out.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if ended {
			close(trig)
		}
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		got := strings.Count(buf.String(), "power_draw_count=10i")
		if want := map[bool]int{true: 1, false: 0}[ended]; got != want {
			t.Errorf("stdin ended %v: %d windows written at Close, want %d; wrote %q", ended, got, want, buf.String())
		}
	}
}

func TestSignalErrors(t *testing.T) {
	if _, err := execd.New(&syncBuf{}, execd.Options{Signal: execd.SignalStdin}); err == nil || !strings.Contains(err.Error(), "--execd gather") {
		t.Fatalf("STDIN without trigger: %v", err)
	}
	if _, err := execd.New(&syncBuf{}, execd.Options{Signal: "USR1"}); err == nil {
		t.Fatal("unknown signal accepted")
	}
}

// shape = "nvidia_smi": one line per GPU per gather, every field on the
// gather's timestamp under nvidia_smi's names (means for power, utilization
// and clocks; the newest value for state), state seen once repeated on every
// later line (memory_used/memory_total has rows), and no host tag.
func TestGatherNvidiaSMIShape(t *testing.T) {
	buf := &syncBuf{wrote: make(chan struct{}, 1)}
	trig := make(chan struct{})
	var now atomic.Int64 // the gather goroutine reads it
	now.Store(time.Unix(100, 0).UnixNano())
	out, err := execd.New(buf, execd.Options{Signal: execd.SignalStdin, Trigger: trig, Host: "h", Shape: execd.ShapeNvidiaSMI,
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	t0 := time.Unix(101, 0).UnixNano()
	var samples []record.Sample
	for i := range 4 {
		ts := t0 + int64(i)*int64(time.Millisecond)
		samples = append(samples, record.Sample{TimeNS: ts, Value: 100 + 10*float64(i), Metric: catalog.MetricPowerDraw},
			record.Sample{TimeNS: ts, Value: 50 + float64(i), Metric: catalog.MetricUtilGPU},
			record.Sample{TimeNS: ts, Value: 1000 + 100*float64(i), Metric: catalog.MetricMemoryUsed})
	}
	samples = append(samples, record.Sample{TimeNS: t0, Value: 81559, Metric: catalog.MetricMemoryTotal})
	dev := outputtest.Device
	dev.Serial, dev.ECCMode = "1650000000000", record.ModeEnabled
	dev.Architecture, dev.ComputeMode = "Hopper", "Default"
	if err := out.Write(context.Background(), &record.Batch{Seq: 1, Devices: []record.Device{dev}, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	now.Store(time.Unix(110, 0).UnixNano())
	trig <- struct{}{}
	buf.waitLines(1) // the first gather is written before the next window's samples arrive
	// The next window has power only: memory_total and memory_used are held.
	if err := out.Write(context.Background(), &record.Batch{Seq: 2, Samples: []record.Sample{
		{TimeNS: t0 + int64(10*time.Second), Value: 200, Metric: catalog.MetricPowerDraw}}}); err != nil {
		t.Fatal(err)
	}
	now.Store(time.Unix(120, 0).UnixNano())
	trig <- struct{}{}
	buf.waitLines(2)
	tags := `nvidia_smi,arch=Hopper,compute_mode=Default,index=0,name=Test\ GPU,pci_bus_id=00000000:17:00.0,uuid=GPU-00000000-1111-2222-3333-444444444444 `
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(got) < 2 {
		t.Fatalf("gathers wrote %q", buf.String())
	}
	for i, want := range []string{
		tags + `power_draw=115,utilization_gpu=52i,memory_used=1300i,memory_total=81559i,driver_version="1.0",serial="1650000000000",current_ecc="Enabled" 110000000000`,
		tags + `power_draw=200,utilization_gpu=52i,memory_used=1300i,memory_total=81559i,driver_version="1.0",serial="1650000000000",current_ecc="Enabled" 120000000000`,
	} {
		if !sameFields(got[i], want) {
			t.Errorf("gather %d wrote\n%s\nwant (fields in any order)\n%s", i+1, got[i], want)
		}
	}
	if strings.Contains(buf.String(), "host=") || strings.Contains(buf.String(), "_mean") {
		t.Fatalf("host tag or summary fields in the drop-in shape:\n%s", buf.String())
	}
}

// With MinMax the drop-in lines also carry NAME_min and NAME_max, in NAME's
// type, for the metrics written as the window's mean, and only for series
// the window saw; state gets none.
func TestGatherNvidiaSMIMinMax(t *testing.T) {
	buf := &syncBuf{wrote: make(chan struct{}, 1)}
	trig := make(chan struct{})
	var now atomic.Int64 // the gather goroutine reads it
	now.Store(time.Unix(100, 0).UnixNano())
	out, err := execd.New(buf, execd.Options{Signal: execd.SignalStdin, Trigger: trig, Shape: execd.ShapeNvidiaSMI, MinMax: true,
		Now: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	t0 := time.Unix(101, 0).UnixNano()
	var samples []record.Sample
	for i := range 4 {
		ts := t0 + int64(i)*int64(time.Millisecond)
		samples = append(samples, record.Sample{TimeNS: ts, Value: 100 + 10*float64(i), Metric: catalog.MetricPowerDraw},
			record.Sample{TimeNS: ts, Value: 50 + float64(i), Metric: catalog.MetricUtilGPU},
			record.Sample{TimeNS: ts, Value: 1000 + 100*float64(i), Metric: catalog.MetricMemoryUsed})
	}
	if err := out.Write(context.Background(), &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device}, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	now.Store(time.Unix(110, 0).UnixNano())
	trig <- struct{}{}
	buf.waitLines(1)
	if err := out.Write(context.Background(), &record.Batch{Seq: 2, Samples: []record.Sample{
		{TimeNS: t0 + int64(10*time.Second), Value: 200, Metric: catalog.MetricPowerDraw}}}); err != nil {
		t.Fatal(err)
	}
	now.Store(time.Unix(120, 0).UnixNano())
	trig <- struct{}{}
	buf.waitLines(2)
	tags := `nvidia_smi,index=0,name=Test\ GPU,pci_bus_id=00000000:17:00.0,uuid=GPU-00000000-1111-2222-3333-444444444444 `
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	for i, want := range []string{
		tags + `power_draw=115,power_draw_min=100,power_draw_max=130,utilization_gpu=52i,utilization_gpu_min=50i,utilization_gpu_max=53i,memory_used=1300i,driver_version="1.0" 110000000000`,
		tags + `power_draw=200,power_draw_min=200,power_draw_max=200,utilization_gpu=52i,memory_used=1300i,driver_version="1.0" 120000000000`,
	} {
		if !sameFields(got[i], want) {
			t.Errorf("gather %d wrote\n%s\nwant (fields in any order)\n%s", i+1, got[i], want)
		}
	}
}

// sameFields compares two lines of line protocol: measurement and tags
// exactly, fields as a set, timestamp exactly.
func sameFields(got, want string) bool {
	split := func(l string) (string, []string, string) {
		// the first space not escaped ends the tags; the last one starts
		// the timestamp (these lines' string fields have no spaces)
		head := 0
		for head < len(l) && (l[head] != ' ' || head > 0 && l[head-1] == '\\') {
			head++
		}
		ts := strings.LastIndexByte(l, ' ')
		if head >= ts {
			return l, nil, ""
		}
		f := strings.Split(l[head+1:ts], ",")
		slices.Sort(f)
		return l[:head], f, l[ts+1:]
	}
	gh, gf, gt := split(got)
	wh, wf, wt := split(want)
	return gh == wh && slices.Equal(gf, wf) && gt == wt
}

// The shape key, as sample.conf documents it: "summary" or "nvidia_smi",
// for signal = "STDIN" only.
func TestShapeConfig(t *testing.T) {
	reg := outputs.NewRegistry(execd.Kind())
	parse := func(block string) (execd.Options, error) {
		c, err := appconfig.Parse("t.toml", []byte("[[outputs.execd]]\n"+block+"\n"), appconfig.Options{Registry: reg})
		if err != nil {
			return execd.Options{}, err
		}
		return c.Outputs[0].Options.(execd.Options), nil
	}
	if o, err := parse("signal = \"STDIN\"\nshape = \"nvidia_smi\""); err != nil || o.Shape != execd.ShapeNvidiaSMI {
		t.Fatalf("nvidia_smi: %+v %v", o, err)
	}
	if o, err := parse("signal = \"STDIN\"\nshape = \"nvidia_smi\"\nmin_max = true"); err != nil || !o.MinMax {
		t.Fatalf("min_max: %+v %v", o, err)
	}
	if o, err := parse("signal = \"STDIN\""); err != nil || o.Shape != execd.ShapeSummary || o.MinMax {
		t.Fatalf("default: %+v %v", o, err)
	}
	for block, want := range map[string]string{
		"shape = \"nvidia_smi\"":                   `outputs.execd[0].shape: applies to signal = "STDIN"`,
		"signal = \"STDIN\"\nshape = \"telegraf\"": `outputs.execd[0].shape`,
		"signal = \"STDIN\"\nmin_max = true":       `outputs.execd[0].min_max: applies to shape = "nvidia_smi"`,
	} {
		if _, err := parse(block); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", block, err, want)
		}
	}
	if _, err := execd.New(&syncBuf{}, execd.Options{Shape: "x"}); err == nil || !strings.Contains(err.Error(), `unknown shape "x"`) {
		t.Fatalf("New with an unknown shape: %v", err)
	}
}

// A gather line that cannot be encoded (a device identity line protocol
// cannot carry) is skipped and its summaries counted, never dropped
// silently; the other devices' lines are written.
func TestGatherCountsUnencodableLine(t *testing.T) {
	buf := &syncBuf{}
	now := time.Unix(100, 0)
	out, err := execd.New(buf, execd.Options{Signal: execd.SignalStdin, Trigger: make(chan struct{}), Host: "h",
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	bad := outputtest.Device
	bad.Index, bad.Name = 1, "bad\nname"
	// The identity alone already cannot be written: refused (counted by the pump).
	if err := out.Write(context.Background(), &record.Batch{Seq: 1, Devices: []record.Device{outputtest.Device, bad}}); err != nil {
		t.Logf("identities: %v", err)
	}
	samples := outputtest.Samples(4)
	for _, s := range outputtest.Samples(3) {
		s.Device = 1
		samples = append(samples, s)
	}
	if err := out.Write(context.Background(), &record.Batch{Seq: 2, Samples: samples}); err != nil {
		t.Fatal(err)
	}
	now = time.Unix(110, 0)
	err = out.Gather()
	if err == nil || !strings.Contains(err.Error(), "1 summaries dropped") {
		t.Fatalf("Gather = %v, want the dropped summary named", err)
	}
	if n := out.GatherDropped(); n != 1 {
		t.Errorf("GatherDropped = %d, want 1 (device 1's power summary)", n)
	}
	want := `nvidia_smi,host=h,index=0,name=Test\ GPU,pci_bus_id=00000000:17:00.0,uuid=GPU-00000000-1111-2222-3333-444444444444 ` +
		"power_draw_mean=101.5,power_draw_min=100,power_draw_max=103,power_draw_last=103,power_draw_count=4i 100000000000\n"
	if got := buf.String(); got != want {
		t.Fatalf("gather wrote\n%q\nwant\n%q", got, want)
	}
}
