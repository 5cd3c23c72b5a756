package conservation

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// Batch states in a record file.
const (
	// StateOK: the recorder accepted the batch.
	StateOK = "ok"
	// StateDown: the recorder was down and refused the batch as
	// retryable (record.ErrUnavailable).
	StateDown = "down"
	// StateRefused: the batch holds the poisoned record and was refused
	// with record.Permanent.
	StateRefused = "refused"
)

// Control words, one per line of the control file.
const (
	// ControlDown makes every Write fail as retryable.
	ControlDown = "down"
	// ControlPoison poisons the next batch that holds a sample or a
	// summary: that batch, and every later one holding the same first
	// record, is refused with record.Permanent (as a database refuses a
	// batch with a field-type clash, however often it is offered).
	ControlPoison = "poison"
	// ControlWedge makes the next Write record a StateDown line and then
	// block forever, ignoring its context (a wedged output: the host gives
	// its process up past the call timeout).
	ControlWedge = "wedge"
	// ControlSlow makes every Write wait out its context's deadline (a
	// black-holed sink whose request the deadline cuts short) and fail as
	// unavailable, recorded as StateDown.
	ControlSlow = "slow"
	// ControlNoBuild makes building the output fail (read when the
	// output is built, not at Write): an output that cannot start.
	ControlNoBuild = "nobuild"
	// ControlLag makes every Write wait LagDelay before the sink takes
	// the batch (a sink slow to answer that loses nothing); a Write whose
	// context ends first fails as unavailable, recorded as StateDown.
	ControlLag = "lag"
)

// LagDelay is how long a Write waits under ControlLag.
const LagDelay = 250 * time.Millisecond

// Batch is one line of a record file: one Write, whole.
type Batch struct {
	// State is StateOK, StateDown or StateRefused.
	State string `json:"state"`
	// PID is the recording process (a plugin's changes when it restarts).
	PID       int              `json:"pid"`
	Seq       uint64           `json:"seq"`
	Devices   []record.Device  `json:"devices,omitempty"`
	Samples   []record.Sample  `json:"samples,omitempty"`
	Events    []record.Event   `json:"events,omitempty"`
	Summaries []record.Summary `json:"summaries,omitempty"`
}

// Recorder is a record.Output that appends every batch to a record file
// (one JSON line per Write, written with one write call, so that a killed
// process leaves at most a torn last line). It follows record.Output's
// rules: one goroutine calls Write and Close; it keeps nothing of a batch.
// Down and refused batches are recorded too (without their records for
// down ones), so a test can wait for them.
type Recorder struct {
	mu      sync.Mutex
	f       *os.File
	control string
	closed  bool
	poison  *poisonKey
	poisons int // how many batches were poisoned (at most one)
	line    []byte
	// batches and records count what the sink took: the ok lines written
	// and the records (devices, samples, summaries, events) in them.
	// Atomic, not under mu: a Write that blocks (wedge, slow) holds mu, and
	// the health probe that reads them must still answer.
	batches, records atomic.Uint64
}

type poisonKey struct {
	sample  *record.Sample
	summary *record.Summary
}

func (k *poisonKey) matches(b *record.Batch) bool {
	if k.sample != nil {
		return len(b.Samples) > 0 && b.Samples[0] == *k.sample
	}
	return len(b.Summaries) > 0 && b.Summaries[0] == *k.summary
}

// NewRecorder opens (appending) the record file at path. control, when not
// empty, is a file of control words read at every Write; a missing file
// means none.
func NewRecorder(path, control string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("recorder: %w", err)
	}
	return &Recorder{f: f, control: control}, nil
}

func (r *Recorder) words() map[string]bool {
	if r.control == "" {
		return nil
	}
	data, err := os.ReadFile(r.control)
	if err != nil {
		return nil
	}
	w := map[string]bool{}
	for _, f := range strings.Fields(string(data)) {
		w[f] = true
	}
	return w
}

// Write records b. It fails with record.ErrUnavailable while the control
// file says down, and with record.Permanent for the poisoned batch.
func (r *Recorder) Write(ctx context.Context, b *record.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return record.ErrClosed
	}
	w := r.words()
	rec := Batch{State: StateOK, PID: os.Getpid(), Seq: b.Seq}
	var err error
	if w[ControlLag] {
		t := time.NewTimer(LagDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			rec.State = StateDown
			err = record.Unavailable(fmt.Errorf("recorder: sink slow: %w", ctx.Err()))
		}
		t.Stop()
	}
	switch {
	case rec.State == StateDown:
	case w[ControlWedge]:
		line, _ := json.Marshal(Batch{State: StateDown, PID: os.Getpid(), Seq: b.Seq})
		r.f.Write(append(line, '\n'))
		select {} // wedged: ignores ctx; the host kills the process
	case w[ControlSlow]:
		<-ctx.Done()
		rec.State = StateDown
		err = record.Unavailable(fmt.Errorf("recorder: sink black-holed: %w", ctx.Err()))
	case w[ControlDown]:
		rec.State = StateDown
		err = fmt.Errorf("recorder: sink down: %w", record.ErrUnavailable)
	case r.poison != nil && r.poison.matches(b):
		rec.State = StateRefused
		err = record.Permanent(errors.New("recorder: batch refused (poisoned)"))
	case w[ControlPoison] && r.poisons == 0 && (len(b.Samples) > 0 || len(b.Summaries) > 0):
		r.poisons++
		r.poison = &poisonKey{}
		if len(b.Samples) > 0 {
			s := b.Samples[0]
			r.poison.sample = &s
		} else {
			s := b.Summaries[0]
			r.poison.summary = &s
		}
		rec.State = StateRefused
		err = record.Permanent(errors.New("recorder: batch refused (poisoned)"))
	}
	if rec.State != StateDown {
		rec.Devices, rec.Samples, rec.Events, rec.Summaries = b.Devices, b.Samples, b.Events, b.Summaries
	}
	line, merr := json.Marshal(rec)
	if merr != nil {
		return fmt.Errorf("recorder: encode: %w", merr)
	}
	r.line = append(append(r.line[:0], line...), '\n')
	if _, werr := r.f.Write(r.line); werr != nil {
		return fmt.Errorf("recorder: %w", werr)
	}
	if rec.State == StateOK {
		r.records.Add(uint64(len(b.Devices) + len(b.Samples) + len(b.Summaries) + len(b.Events)))
		r.batches.Add(1)
	}
	return err
}

// Counter names the Recorder reports (record.StatsReporter): the batches
// its sink took (ok lines written) and the records in them.
const (
	FieldRecordedBatches = "recorded_batches"
	FieldRecordedRecords = "recorded_records"
)

// ReportStats implements record.StatsReporter: recorded_batches and
// recorded_records, what the sink holds as taken (ok lines), so that a
// test can hold an output's own final counters against its sink.
func (r *Recorder) ReportStats(dst []record.Field) []record.Field {
	return append(dst, record.IntField(FieldRecordedBatches, r.batches.Load()), record.IntField(FieldRecordedRecords, r.records.Load()))
}

// Close closes the record file. A second Close returns nil.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.f.Close()
}

// ReadFile reads a record file. A torn last line (a process killed while
// writing it) is skipped and reported in torn.
func ReadFile(path string) (batches []Batch, torn int, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var b Batch
		if err := json.Unmarshal(line, &b); err != nil {
			torn++
			if torn > 1 {
				return nil, torn, fmt.Errorf("%s: line %d: %w", path, i+1, err)
			}
			continue
		}
		batches = append(batches, b)
	}
	return batches, torn, nil
}

// RecordKind is the "record" output kind: a Recorder, in process, or out
// of process when served by cmd recordplugin.
//
//	[[outputs.record]]
//	  file = "/tmp/x.jsonl"      # the record file (required)
//	  control = "/tmp/x.ctl"     # control words, read at every write
func RecordKind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[recordOptions]{Kind: "record", Parse: parseRecord, Build: buildRecord})
}

// SharedRecordKind is RecordKind as a built-in out-of-process kind,
// "sharedrecord": a host registry (plugins.HostRegistry with Shared) runs
// its outputs as instances of one process, cmd recordplugin's "shared"
// mode.
func SharedRecordKind() outputs.Kind {
	k := RecordKind()
	k.Kind, k.OutOfProcess = "sharedrecord", true
	return k
}

type recordOptions struct{ file, control string }

func parseRecord(t *config.Table) recordOptions {
	var o recordOptions
	t.String("file", &o.file)
	t.String("control", &o.control)
	if o.file == "" {
		t.Errorf("file", "required (the record file)")
	}
	return o
}

func buildRecord(_ *outputs.Block, ro recordOptions, _ outputs.BuildEnv) (record.Output, error) {
	r, err := NewRecorder(ro.file, ro.control)
	if err == nil && r.words()[ControlNoBuild] {
		r.f.Close()
		return nil, fmt.Errorf("recorder: control %s: %q: the output cannot start", ro.control, ControlNoBuild)
	}
	return r, err
}
