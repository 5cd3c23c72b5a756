package sampler

import (
	"testing"

	"github.com/gpusampler/gpusampler/record"
)

func TestTruncateCmdline(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"python3 train.py", 0, "python3 train.py"},
		{"python3 train.py", 7, "python3"},
		{"aé", 2, "a"},   // é is 2 bytes: never half of it
		{"a€b", 3, "a"},  // € is 3 bytes
		{"a€b", 4, "a€"}, // whole rune kept
	} {
		if got := TruncateCmdline(tc.in, tc.max); got != tc.want {
			t.Errorf("TruncateCmdline(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func TestProcessIntervalBounds(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{}, true},
		{Config{ProcessInterval: -1}, true},
		{Config{ProcessInterval: 5e8}, false}, // 500 ms: above 1 Hz
		{Config{ProcessInterval: 2e9}, true},
	} {
		c, err := tc.cfg.withDefaults()
		if (err == nil) != tc.ok {
			t.Errorf("%v: err %v, want ok %v", tc.cfg.ProcessInterval, err, tc.ok)
		}
		if tc.cfg.ProcessInterval == 0 && c.ProcessInterval != DefaultProcessInterval {
			t.Errorf("default process interval %v", c.ProcessInterval)
		}
	}
}

func TestProcessEvent(t *testing.T) {
	p := Process{PID: 42, Type: "C", UsedMemoryMiB: 1024, HasMemory: true}
	e := processEvent(3, &p, 7, nil, nil)
	if e.Kind != record.EventProcess || e.Device != 3 || e.StartNS != 7 || e.EndNS != 7 {
		t.Fatalf("event %+v", e)
	}
	if len(e.Fields) != 2 || e.Fields[0] != (record.Field{Key: "pid", Value: 42, Int: true}) || e.Fields[1] != (record.Field{Key: "used_memory_mib", Value: 1024, Int: true}) {
		t.Fatalf("fields %+v: want pid and used memory only (no utilization)", e.Fields)
	}
	if len(e.Attrs) != 2 || e.Attrs[0] != (record.Attr{Key: "name", Value: "pid42"}) || e.Attrs[1] != (record.Attr{Key: "type", Value: "C"}) {
		t.Fatalf("attrs %+v", e.Attrs)
	}
}
