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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/atomicfile"
	"github.com/gpusampler/gpusampler/internal/dirlock"
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

// CursorSaveInterval is how often at the least the engine saves the drain
// cursors while running; it saves as soon as an output has taken more, and
// once more at the end. The cursors saved are those every output has taken
// the samples before (see Engine): after a crash nothing is skipped, and
// what the outputs took in the instant before it is delivered again.
const CursorSaveInterval = 100 * time.Millisecond

// CursorFileName is the cursor file's name in its state directory.
const CursorFileName = "cursors.json"

// CursorFile is a CursorStore in a JSON file, replaced atomically on each
// save (a temporary file renamed over it). The saves are not fsynced: the
// file outlives a crash of the process, which is what it is for, and the
// cursors of a boot never apply to the next one, so a power loss or kernel
// crash, which may leave the file empty, costs nothing; an empty file is an
// empty store.
//
// One process owns a state directory: OpenCursorFile takes an exclusive
// lock on its lock file (LockFileName) and holds it until Close or the
// process's exit, so a second process on the host neither reads nor writes
// the owner's cursors (each would skip what the other published).
//
// Cursors apply only where they were saved, and they are keyed on the
// machine, not on its name: on the kernel's boot id, which changes at every
// boot (boot-time driver clocks restart then) and is the host's inside a
// container too, and on the machine id (/etc/machine-id) where both the
// file and this process know it and the boot id is unknown. A file saved
// under another boot or on another machine (a copied or shared state
// directory) is ignored whole, and its cursors are counted as discarded
// (Ignored). The hostname is recorded but decides nothing: in a container
// it changes at every restart, which must not cost the cursors. The cursors
// of one GPU are kept under its UUID and never apply to another.
type CursorFile struct {
	path    string
	boot    string
	host    string
	machine string
	lock    *os.File
	why     string // why the file's cursors were ignored ("" when not)
	// discarded says why the file did not parse ("" when it did).
	discarded string
	// ignored holds how many cursors the ignored file held per GPU UUID.
	ignored map[string]int

	// scope names the output set whose cursors this is (see
	// OpenCursorFileScoped); others holds the other sets' cursors, kept as
	// they are.
	scope   string
	others  map[string]*cursorSet
	savedAt int64 // this set's SavedAt in the file

	mu   sync.Mutex
	gpus map[string]map[string]uint64 // uuid → buffer type name → cursor
	last []byte                       // what the file holds now
}

// cursorDoc is the file. Version 2 keeps one cursorSet per output set
// (Sets, by scope); version 1 had one set (GPUs), which a scope without a
// set of its own starts from.
type cursorDoc struct {
	Version   int                          `json:"version"`
	BootID    string                       `json:"boot_id,omitempty"`
	Host      string                       `json:"host,omitempty"`
	MachineID string                       `json:"machine_id,omitempty"`
	Sets      map[string]*cursorSet        `json:"sets,omitempty"`
	GPUs      map[string]map[string]uint64 `json:"gpus,omitempty"`
}

// cursorSet is one output set's cursors and when they last moved (Unix
// seconds).
type cursorSet struct {
	SavedAt int64                        `json:"saved_at"`
	GPUs    map[string]map[string]uint64 `json:"gpus"`
}

// cursorSetMaxAge: the cursors of another output set that have not moved
// for this long (an ad-hoc run's, long over) are dropped at the next save.
const cursorSetMaxAge = 7 * 24 * time.Hour

// LockFileName is the lock file's name in a state directory: while a
// process owns the directory it holds an exclusive flock on it, and the
// file holds that process's PID.
const LockFileName = "gpusampler.lock"

// ErrStateDirInUse is wrapped by the error OpenCursorFile returns when
// another process owns the state directory (see StateDirInUseError).
var ErrStateDirInUse = errors.New("sampler: state dir in use")

// StateDirInUseError says which process owns a state directory.
type StateDirInUseError struct {
	Dir string
	// PID is the owner's process id as its lock file says (0 unknown).
	PID int
}

func (e *StateDirInUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("state dir %s is in use by another process", e.Dir)
	}
	return fmt.Sprintf("state dir %s is in use by PID %d", e.Dir, e.PID)
}

// Unwrap returns ErrStateDirInUse.
func (e *StateDirInUseError) Unwrap() error { return ErrStateDirInUse }

// OpenCursorFile is OpenCursorFileScoped with the scope "".
func OpenCursorFile(dir string) (f *CursorFile, ignored bool, err error) {
	return OpenCursorFileScoped(dir, "")
}

// OpenCursorFileScoped takes ownership of the state directory dir
// (creating it, 0700, if needed) and opens the cursor file in it, for the
// output set named scope. A missing file is an empty store; a file saved
// under another boot or on another machine is ignored (ignored reports it,
// IgnoredReason says why); a malformed one (garbled by a power loss, of an
// unknown version) is an empty store, overwritten at the first save
// (Discarded says why), since its cursors are worthless and keeping the
// file would turn cursors off at every later start. When
// another process owns dir, the error is a *StateDirInUseError. The caller
// calls Close when done (or exits).
//
// Cursors are kept per output set: a run whose outputs differ from the
// service's (an operator's `run --config` with the service down, same
// state directory) loads and saves its own set, so it never moves the
// service's cursors past samples the service's sinks did not get. A set
// that has not moved for a week is dropped. A file of version 1 (one set)
// is where a scope without a set of its own starts.
func OpenCursorFileScoped(dir, scope string) (f *CursorFile, ignored bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("state dir: %w", err)
	}
	lock, err := lockStateDir(dir)
	if err != nil {
		return nil, false, err
	}
	host, _ := os.Hostname()
	f = &CursorFile{path: filepath.Join(dir, CursorFileName), boot: bootID(), host: host, machine: machineID(),
		lock: lock, gpus: map[string]map[string]uint64{}, scope: scope, others: map[string]*cursorSet{}}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read cursors: %w", err)
	}
	if len(bytes.Trim(b, "\x00")) == 0 {
		return f, false, nil // what a power loss may leave
	}
	var doc cursorDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		f.discarded = err.Error()
		return f, false, nil
	}
	if doc.Version != 1 && doc.Version != 2 {
		f.discarded = fmt.Sprintf("version %d, want 1 or 2", doc.Version)
		return f, false, nil
	}
	mine := doc.GPUs // version 1
	if set := doc.Sets[scope]; set != nil {
		mine, f.savedAt = set.GPUs, set.SavedAt
	}
	f.why = f.foreign(doc)
	if f.why != "" {
		f.ignored = map[string]int{}
		for uuid, byType := range mine {
			f.ignored[uuid] = len(byType)
		}
		return f, true, nil
	}
	for k, set := range doc.Sets {
		if k != scope && set != nil {
			f.others[k] = set
		}
	}
	if mine != nil {
		f.gpus = mine
	}
	if doc.Version == 2 {
		f.last = b
	}
	return f, false, nil
}

// OtherSets returns how many other output sets' cursors the file holds
// (left alone by this one).
func (f *CursorFile) OtherSets() int { return len(f.others) }

// foreign says why a cursor document saved elsewhere does not apply here
// ("" when it does). The boot id decides where both sides know it (equal
// boot ids are one boot of one kernel, whatever the container's hostname or
// machine id); without it, the machine id where both know it, else the
// hostname.
func (f *CursorFile) foreign(doc cursorDoc) string {
	switch {
	case doc.BootID != f.boot:
		return "saved under another boot of the machine"
	case f.boot != "":
		return ""
	case doc.MachineID != "" && f.machine != "":
		if doc.MachineID != f.machine {
			return "saved on another machine (machine id)"
		}
		return ""
	case doc.Host != "" && doc.Host != f.host:
		return fmt.Sprintf("saved on host %q, this is %q", doc.Host, f.host)
	}
	return ""
}

// Ignored returns how many cursors of the GPU with uuid the file held but
// ignored because it was saved under another boot or on another machine.
// The engine counts them in DeviceStats.CursorsDiscarded.
func (f *CursorFile) Ignored(uuid string) int { return f.ignored[uuid] }

// lockStateDir takes the state directory's lock and writes this process's
// PID into the lock file.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFileName)
	lf, err := dirlock.Lock(path)
	if errors.Is(err, dirlock.ErrLocked) {
		b, _ := os.ReadFile(path)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return nil, &StateDirInUseError{Dir: dir, PID: pid}
	}
	if err != nil {
		return nil, fmt.Errorf("lock state dir %s: %w", dir, err)
	}
	if err := lf.Truncate(0); err == nil {
		lf.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return lf, nil
}

// IgnoredReason says why the cursors the file held were ignored ("" when
// they were not).
func (f *CursorFile) IgnoredReason() string { return f.why }

// Discarded says why the file's content was unreadable and discarded (""
// when it was not): the store starts empty and the next save rewrites it.
func (f *CursorFile) Discarded() string { return f.discarded }

// Close gives up the state directory: another process may own it from now
// on. The file's cursors stay on disk. Save must not be called after Close.
func (f *CursorFile) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lock == nil {
		return nil
	}
	err := f.lock.Close()
	f.lock = nil
	return err
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
	now := time.Now()
	sets := make(map[string]*cursorSet, len(f.others)+1)
	for k, set := range f.others {
		if now.Sub(time.Unix(set.SavedAt, 0)) < cursorSetMaxAge {
			sets[k] = set
		}
	}
	mine := &cursorSet{SavedAt: f.savedAt, GPUs: f.gpus}
	sets[f.scope] = mine
	doc := cursorDoc{Version: 2, BootID: f.boot, Host: f.host, MachineID: f.machine, Sets: sets}
	b, err := json.Marshal(doc)
	if err == nil && bytes.Equal(b, f.last) {
		return nil
	}
	mine.SavedAt = now.Unix()
	if b, err = json.Marshal(doc); err != nil {
		return fmt.Errorf("save cursors: %w", err)
	}
	if err := atomicfile.Replace(f.path, b, 0o600); err != nil {
		return fmt.Errorf("save cursors: %w", err)
	}
	f.last, f.savedAt = b, mine.SavedAt
	return nil
}

// Rescope makes the cursors held and saved from now on those of the output
// set scope (a reload changed the outputs): the next start with that set
// resumes where this run is. The previous set's cursors stay in the file,
// as they were last saved, for a start with the previous outputs; a set
// saved under scope before is replaced.
func (f *CursorFile) Rescope(scope string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if scope == f.scope {
		return
	}
	var prev cursorDoc
	if f.last != nil && json.Unmarshal(f.last, &prev) == nil && prev.Sets[f.scope] != nil {
		f.others[f.scope] = prev.Sets[f.scope]
	}
	delete(f.others, scope)
	f.scope, f.last, f.savedAt = scope, nil, 0
}

// bootID identifies this boot of the machine ("" where unknown).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// machineID identifies the machine across boots ("" where unknown).
func machineID() string {
	for _, p := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(p); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				return id
			}
		}
	}
	return ""
}
