package sampler

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
)

// CursorStore keeps the drain cursors across runs: per GPU UUID and buffer
// type, the driver timestamp of the newest sample the engine published. A
// restarted engine drains from there, so it delivers exactly what the last
// run did not (what the driver no longer holds is counted as lost), instead
// of the whole buffers again.
//
// The engine calls Load from the device loops when they start or a device
// is re-acquired, and Save from one goroutine; implementations must allow
// that concurrently.
type CursorStore interface {
	// Load returns the saved cursors of the GPU with uuid (nil when none).
	Load(uuid string) map[catalog.BufferType]uint64
	// Save records cursors (by GPU UUID) durably: after a crash the store
	// holds this Save's cursors or the previous one's. GPUs absent from
	// cursors keep what they had.
	Save(cursors map[string]map[catalog.BufferType]uint64) error
}

// CursorSaveInterval is how often the engine saves the drain cursors while
// running (and once more at the end): after a crash, at most this much of
// the history is delivered again.
const CursorSaveInterval = 2 * time.Second

// CursorFileName is the cursor file's name in its state directory.
const CursorFileName = "cursors.json"

// CursorFile is a CursorStore in a JSON file, replaced atomically on each
// save (a temporary file, fsync, rename, fsync of the directory). Cursors
// saved under another boot of the machine are ignored: boot-time driver
// clocks restart at each boot.
type CursorFile struct {
	path string
	boot string

	mu   sync.Mutex
	gpus map[string]map[string]uint64 // uuid → buffer type name → cursor
	last []byte                       // what the file holds now
}

type cursorDoc struct {
	Version int                          `json:"version"`
	BootID  string                       `json:"boot_id,omitempty"`
	GPUs    map[string]map[string]uint64 `json:"gpus"`
}

// OpenCursorFile opens the cursor file in dir, creating dir (0700) if
// needed. A missing file is an empty store; a file from another boot is
// ignored (ignored reports it); a malformed one is an error naming it.
func OpenCursorFile(dir string) (f *CursorFile, ignored bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("state dir: %w", err)
	}
	f = &CursorFile{path: filepath.Join(dir, CursorFileName), boot: bootID(), gpus: map[string]map[string]uint64{}}
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read cursors: %w", err)
	}
	var doc cursorDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, false, fmt.Errorf("read cursors %s: %w", f.path, err)
	}
	if doc.Version != 1 {
		return nil, false, fmt.Errorf("read cursors %s: version %d, want 1", f.path, doc.Version)
	}
	if doc.BootID != f.boot {
		return f, true, nil
	}
	if doc.GPUs != nil {
		f.gpus = doc.GPUs
	}
	f.last = b
	return f, false, nil
}

// Path returns the file's path.
func (f *CursorFile) Path() string { return f.path }

// Load returns the cursors saved for uuid.
func (f *CursorFile) Load(uuid string) map[catalog.BufferType]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	saved := f.gpus[uuid]
	if len(saved) == 0 {
		return nil
	}
	out := make(map[catalog.BufferType]uint64, len(saved))
	for t := catalog.BufferType(0); t < catalog.NumBufferTypes; t++ {
		if c, ok := saved[t.String()]; ok {
			out[t] = c
		}
	}
	return out
}

// Save merges cursors into the file and replaces it atomically; it writes
// nothing when nothing changed.
func (f *CursorFile) Save(cursors map[string]map[catalog.BufferType]uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for uuid, byType := range cursors {
		if uuid == "" || len(byType) == 0 {
			continue
		}
		m := maps.Clone(f.gpus[uuid])
		if m == nil {
			m = map[string]uint64{}
		}
		for t, c := range byType {
			m[t.String()] = c
		}
		f.gpus[uuid] = m
	}
	b, err := json.Marshal(cursorDoc{Version: 1, BootID: f.boot, GPUs: f.gpus})
	if err != nil {
		return fmt.Errorf("save cursors: %w", err)
	}
	if bytes.Equal(b, f.last) {
		return nil
	}
	if err := writeFileSync(f.path, b); err != nil {
		return fmt.Errorf("save cursors: %w", err)
	}
	f.last = b
	return nil
}

// writeFileSync replaces path with b crash-safely.
func writeFileSync(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename: no such file
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// bootID identifies this boot of the machine ("" where unknown).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
