package execd_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/outputs/execd"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/sampler"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestConformanceStream(t *testing.T) {
	var buf *syncBuf
	outputtest.Run(t, outputtest.Harness{
		New: func(t *testing.T) sampler.Output {
			buf = &syncBuf{}
			out, err := execd.New(buf, execd.Options{Signal: execd.SignalNone})
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
		Received: func(t *testing.T) []sampler.Sample {
			s, err := influxtest.DecodeSamples([]byte(buf.String()), nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func TestConformanceGather(t *testing.T) {
	outputtest.Run(t, outputtest.Harness{New: func(t *testing.T) sampler.Output {
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
	b := &sampler.Batch{Seq: 1, Devices: []sampler.Device{outputtest.Device}, Samples: outputtest.Samples(10)}
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

func TestSignalErrors(t *testing.T) {
	if _, err := execd.New(&syncBuf{}, execd.Options{Signal: execd.SignalStdin}); err == nil || !strings.Contains(err.Error(), "--execd gather") {
		t.Fatalf("STDIN without trigger: %v", err)
	}
	if _, err := execd.New(&syncBuf{}, execd.Options{Signal: "USR1"}); err == nil {
		t.Fatal("unknown signal accepted")
	}
}
