package sampler_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

func TestCursorFileRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	f, ignored, err := sampler.OpenCursorFile(dir)
	if err != nil || ignored {
		t.Fatalf("open: %v, ignored %v", err, ignored)
	}
	if got := f.Load("GPU-a"); got != nil {
		t.Fatalf("empty store loads %v", got)
	}
	a := map[catalog.BufferType]uint64{catalog.BufferTotalPower: 100, catalog.BufferGPUUtil: 90}
	if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-a": a}); err != nil {
		t.Fatal(err)
	}
	// A later save without GPU-a keeps it; one with it moves its cursors.
	b := map[catalog.BufferType]uint64{catalog.BufferSMClock: 7}
	if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-b": b}); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(map[string]map[catalog.BufferType]uint64{"GPU-a": {catalog.BufferTotalPower: 150}}); err != nil {
		t.Fatal(err)
	}
	g, ignored, err := sampler.OpenCursorFile(dir)
	if err != nil || ignored {
		t.Fatalf("reopen: %v, ignored %v", err, ignored)
	}
	if got, want := g.Load("GPU-a"), map[catalog.BufferType]uint64{catalog.BufferTotalPower: 150, catalog.BufferGPUUtil: 90}; !reflect.DeepEqual(got, want) {
		t.Errorf("GPU-a cursors %v, want %v", got, want)
	}
	if got := g.Load("GPU-b"); !reflect.DeepEqual(got, b) {
		t.Errorf("GPU-b cursors %v, want %v", got, b)
	}
	// Only the file itself is left: no temporary files.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != sampler.CursorFileName {
		t.Errorf("state dir holds %v", entries)
	}
}

func TestCursorFileBadInput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, sampler.CursorFileName)
	os.WriteFile(path, []byte("{not json"), 0o600)
	if _, _, err := sampler.OpenCursorFile(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("malformed file: %v, want an error naming %s", err, path)
	}
	os.WriteFile(path, []byte(`{"version":1,"boot_id":"another boot","gpus":{"GPU-a":{"total_power":5}}}`), 0o600)
	f, ignored, err := sampler.OpenCursorFile(dir)
	if err != nil || !ignored || f.Load("GPU-a") != nil {
		t.Errorf("cursors of another boot: err %v, ignored %v, loaded %v; want them ignored", err, ignored, f.Load("GPU-a"))
	}
}
