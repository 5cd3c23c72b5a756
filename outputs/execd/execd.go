// Package execd is the in-process output for running gpusampler as a
// Telegraf inputs.execd program: line protocol (Telegraf nvidia_smi names
// and types) on the process's stdout, which Telegraf reads.
//
//   - Signal "none" (Telegraf's signal = "none"): every sample is streamed
//     as it arrives, each with its own driver timestamp; all fields of one
//     device and timestamp on one line.
//   - Signal "STDIN" (signal = "STDIN", gather mode): samples are summarized
//     per device and metric (NAME_mean, _min, _max, _last, _count) and the
//     window since the previous gather is written, stamped with the
//     window's start, each time Telegraf writes a newline to stdin. With
//     Shape ShapeNvidiaSMI a gather writes nvidia_smi's own shape instead
//     (a drop-in for Telegraf's nvidia_smi input).
//
// The output does not read stdin itself: the command owns it (gpusampler
// run --execd) and hands each newline to Options.Trigger; it also ends the
// run when stdin closes, which is how Telegraf stops its execd programs.
// It runs in process because a plugin's stdout carries the go-plugin
// handshake.
package execd

import (
	"bufio"
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/accum"
	"github.com/gpusampler/gpusampler/internal/encoding/lineproto"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

// SampleConfig is this output's fragment of the example configuration.
//
//go:embed sample.conf
var SampleConfig string

// Signals, as Telegraf's inputs.execd names them.
const (
	SignalNone  = "none"
	SignalStdin = "STDIN"
)

// Options configure the output.
type Options struct {
	// Signal is SignalNone (stream, default) or SignalStdin (gather).
	Signal string
	// Trigger delivers one value per gather request (a newline on stdin);
	// required for SignalStdin. The sender closes it when stdin ends: Close
	// then writes one final gather of the open window (as it does for a
	// request still waiting in Trigger), after the last samples were
	// written to the output. Otherwise the open window is not written at
	// Close (Telegraf stopped asking).
	Trigger <-chan struct{}
	// Host, GlobalTags and Catalog shape the lines (see lineproto).
	Host       string
	GlobalTags map[string]string
	Catalog    *catalog.Catalog
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Shape is what a gather writes: ShapeSummary (default: NAME_mean,
	// _min, _max, _last, _count per metric) or ShapeNvidiaSMI (a drop-in
	// for Telegraf's nvidia_smi input: one line per GPU per gather, every
	// field on the gather's timestamp under nvidia_smi's own names, the
	// window's mean for power, utilization and clocks and the last value
	// for state, state metrics repeated on every line, and no host tag, so
	// that Telegraf's agent adds its own).
	Shape string
	// MinMax adds to ShapeNvidiaSMI lines the window's extremes of each
	// metric written as a mean (power, utilization, clocks): fields
	// NAME_min and NAME_max, in NAME's unit and type, for the series the
	// window saw. Off by default (nvidia_smi has no such fields).
	MinMax bool
}

// Gather shapes.
const (
	ShapeSummary   = "summary"
	ShapeNvidiaSMI = "nvidia_smi"
)

type seriesKey struct {
	dev    uint16
	metric catalog.MetricID
}

// Output writes line protocol to w. Write and Close follow record.Output
// (one goroutine); gathers run on the output's own goroutine, serialized
// with Write by a mutex. The batch is not retained.
type Output struct {
	opts Options
	stop chan struct{}
	done chan struct{}

	mu          sync.Mutex // guards everything below
	w           *bufio.Writer
	enc         *lineproto.Encoder
	window      map[seriesKey]*accum.Window
	windowStart int64
	sums        []record.Summary
	// held is each series' newest value, repeated on every nvidia_smi-shape
	// line (state read rarely, like memory_total, would otherwise be on one
	// gather in many, and memory_used/memory_total would have no rows).
	held     map[seriesKey]float64
	shapeEnc *lineproto.Encoder
	closed   bool
	gathers  uint64
	gbuf     []byte // a gather's lines

	// gatherDropped counts summaries (or nvidia_smi-shape values) a
	// gather could not write: their line cannot be encoded.
	gatherDropped atomic.Uint64
}

// GatherDropped returns how many summaries (nvidia_smi shape: values)
// gathers dropped because their line cannot be encoded. Safe from any
// goroutine.
func (o *Output) GatherDropped() uint64 { return o.gatherDropped.Load() }

// ReportStats implements record.StatsReporter: execd_gather_dropped.
func (o *Output) ReportStats(dst []record.Field) []record.Field {
	return append(dst, record.IntField("execd_gather_dropped", o.gatherDropped.Load()))
}

// New returns an output writing to w.
func New(w io.Writer, opts Options) (*Output, error) {
	switch opts.Signal {
	case "", SignalNone:
		opts.Signal = SignalNone
	case SignalStdin:
		if opts.Trigger == nil {
			return nil, fmt.Errorf("execd: signal = %q needs the process's stdin: run it as `gpusampler run --execd gather`", SignalStdin)
		}
	default:
		return nil, fmt.Errorf("execd: unknown signal %q (want %q or %q)", opts.Signal, SignalNone, SignalStdin)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	switch opts.Shape {
	case "":
		opts.Shape = ShapeSummary
	case ShapeSummary, ShapeNvidiaSMI:
	default:
		return nil, fmt.Errorf("execd: unknown shape %q (want %q or %q)", opts.Shape, ShapeSummary, ShapeNvidiaSMI)
	}
	if opts.MinMax && opts.Shape != ShapeNvidiaSMI {
		return nil, fmt.Errorf("execd: min_max applies to shape %q only", ShapeNvidiaSMI)
	}
	var tags []lineproto.Tag
	for _, k := range slices.Sorted(maps.Keys(opts.GlobalTags)) {
		tags = append(tags, lineproto.Tag{Key: k, Value: opts.GlobalTags[k]})
	}
	o := &Output{opts: opts, w: bufio.NewWriterSize(w, 64<<10), stop: make(chan struct{}), done: make(chan struct{}),
		enc:    lineproto.New(lineproto.Options{Host: opts.Host, GlobalTags: tags, Catalog: opts.Catalog}),
		window: map[seriesKey]*accum.Window{}, windowStart: opts.Now().UnixNano(), held: map[seriesKey]float64{}}
	if opts.Shape == ShapeNvidiaSMI {
		// No host tag: under Telegraf, its agent adds its own.
		o.shapeEnc = lineproto.New(lineproto.Options{GlobalTags: tags, Catalog: opts.Catalog, DeviceStrings: true})
	}
	if opts.Signal == SignalStdin {
		go o.gatherLoop()
	} else {
		close(o.done)
	}
	return o, nil
}

func (o *Output) gatherLoop() {
	defer close(o.done)
	for {
		select {
		case <-o.stop:
			return
		case _, ok := <-o.opts.Trigger:
			if !ok {
				return
			}
			o.Gather() // a failed stdout write ends the run through Write's error
		}
	}
}

// Write streams b (signal none) or adds its samples to the window (STDIN);
// events and device identities are written at once in both modes.
func (o *Output) Write(_ context.Context, b *record.Batch) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return record.ErrClosed
	}
	o.enc.Reset()
	if o.opts.Signal == SignalNone {
		o.enc.Encode(b)
	} else {
		o.enc.Encode(&record.Batch{Devices: b.Devices, Events: b.Events, Summaries: b.Summaries})
	}
	if err := o.enc.Err(); err != nil {
		// A line was skipped: writing the rest would count the skipped
		// records as delivered. Refuse them all, so all are counted.
		o.enc.Reset()
		return record.Permanent(fmt.Errorf("execd: batch of %d records not written: a line cannot be encoded: %w", b.Len(), err))
	}
	if o.shapeEnc != nil && len(b.Devices) > 0 {
		// The shape's encoder needs the identities for its tags.
		o.shapeEnc.Encode(&record.Batch{Devices: b.Devices})
		o.shapeEnc.Reset()
	}
	if o.opts.Signal != SignalNone {
		for _, s := range b.Samples {
			k := seriesKey{s.Device, s.Metric}
			a := o.window[k]
			if a == nil {
				a = new(accum.Window)
				o.window[k] = a
			}
			a.Add(s.TimeNS, s.Value)
		}
	}
	return o.flushLocked()
}

// Gather writes the window since the previous gather as summaries (one line
// per device, stamped with the window's start) and starts a new window. It
// may be called from any goroutine.
func (o *Output) Gather() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return record.ErrClosed
	}
	return o.gatherLocked()
}

// gatherLocked is Gather with o.mu held.
func (o *Output) gatherLocked() error {
	now := o.opts.Now().UnixNano()
	start := o.windowStart
	o.windowStart = now
	o.gathers++
	if o.opts.Shape == ShapeNvidiaSMI {
		return o.gatherNvidiaSMI(now)
	}
	o.sums = o.sums[:0]
	for k, a := range o.window {
		o.sums = append(o.sums, record.Summary{StartNS: start, IntervalNS: now - start, Mean: a.Mean(),
			Min: a.Min, Max: a.Max, Last: a.Last, Count: uint32(a.Count), Device: k.dev, Metric: k.metric})
	}
	clear(o.window)
	slices.SortFunc(o.sums, func(a, b record.Summary) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), cmp.Compare(a.Metric, b.Metric))
	})
	// One device's line at a time: a line that cannot be encoded is
	// skipped and its summaries counted (GatherDropped), not lost silently.
	o.gbuf = o.gbuf[:0]
	var dropped int
	for i := 0; i < len(o.sums); {
		j := i + 1
		for j < len(o.sums) && o.sums[j].Device == o.sums[i].Device {
			j++
		}
		o.enc.Reset()
		o.enc.Encode(&record.Batch{Summaries: o.sums[i:j]})
		if o.enc.Err() != nil {
			dropped += j - i
		} else {
			o.gbuf = append(o.gbuf, o.enc.Bytes()...)
		}
		i = j
	}
	o.enc.Reset()
	if dropped > 0 {
		o.gatherDropped.Add(uint64(dropped))
	}
	if _, err := o.w.Write(o.gbuf); err != nil {
		return outputs.StdoutError("execd: stdout", err)
	}
	if err := o.w.Flush(); err != nil {
		return outputs.StdoutError("execd: stdout", err)
	}
	if dropped > 0 {
		return fmt.Errorf("execd: gather: %d summaries dropped: their line cannot be encoded", dropped)
	}
	return nil
}

// gatherNvidiaSMI writes one nvidia_smi line per GPU stamped now: each
// metric's window mean (power, utilization, clocks) or newest value (state),
// and the newest value of series the window did not see.
func (o *Output) gatherNvidiaSMI(now int64) error {
	cat := o.opts.Catalog
	if cat == nil {
		cat = catalog.Default()
	}
	stats := map[uint16][]lineproto.Stat{}
	for k, a := range o.window {
		v := a.Last
		if m, ok := cat.Get(k.metric); ok && m.Kind == catalog.Gauge &&
			(m.Group == catalog.GroupPower || m.Group == catalog.GroupUtilization || m.Group == catalog.GroupClocks) {
			v = a.Mean()
			if o.opts.MinMax {
				stats[k.dev] = append(stats[k.dev], lineproto.Stat{Metric: k.metric, Suffix: "_min", Value: a.Min},
					lineproto.Stat{Metric: k.metric, Suffix: "_max", Value: a.Max})
			}
		}
		o.held[k] = v
	}
	clear(o.window)
	keys := slices.SortedFunc(maps.Keys(o.held), func(a, b seriesKey) int {
		return cmp.Or(cmp.Compare(a.dev, b.dev), cmp.Compare(a.metric, b.metric))
	})
	samples := make([]record.Sample, 0, len(keys))
	for _, k := range keys {
		samples = append(samples, record.Sample{TimeNS: now, Value: o.held[k], Device: k.dev, Metric: k.metric})
	}
	o.shapeEnc.Reset()
	for dev := range devicesOf(keys) {
		s := stats[dev]
		slices.SortFunc(s, func(a, b lineproto.Stat) int {
			return cmp.Or(cmp.Compare(a.Metric, b.Metric), cmp.Compare(a.Suffix, b.Suffix))
		})
		o.shapeEnc.SetStats(int(dev), s)
	}
	o.shapeEnc.Encode(&record.Batch{Samples: samples})
	if err := o.shapeEnc.Err(); err != nil {
		// A skipped line: count the values it held.
		o.gatherDropped.Add(uint64(len(samples)))
		o.shapeEnc.Reset()
		return fmt.Errorf("execd: gather: %d values dropped: a line cannot be encoded: %w", len(samples), err)
	}
	if _, err := o.w.Write(o.shapeEnc.Bytes()); err != nil {
		return outputs.StdoutError("execd: stdout", err)
	}
	if err := o.w.Flush(); err != nil {
		return outputs.StdoutError("execd: stdout", err)
	}
	return nil
}

// devicesOf returns the devices of keys.
func devicesOf(keys []seriesKey) map[uint16]struct{} {
	devs := map[uint16]struct{}{}
	for _, k := range keys {
		devs[k.dev] = struct{}{}
	}
	return devs
}

func (o *Output) flushLocked() error {
	if _, err := o.w.Write(o.enc.Bytes()); err != nil {
		return outputs.StdoutError("execd: stdout", err)
	}
	if err := o.w.Flush(); err != nil {
		return outputs.StdoutError("execd: stdout", err)
	}
	return nil
}

// Close stops gathering and flushes. In gather mode, when the trigger was
// closed (stdin ended) or holds a request not served yet, the open window
// is written as one final gather first; otherwise it is not written
// (Telegraf stopped asking). A second Close does nothing.
func (o *Output) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	o.mu.Unlock()
	close(o.stop)
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	var err error
	if o.opts.Signal == SignalStdin && o.gatherAsked() {
		err = o.gatherLocked()
	}
	if ferr := o.w.Flush(); ferr != nil && err == nil {
		err = outputs.StdoutError("execd: stdout", ferr)
	}
	return err
}

// gatherAsked reports whether the trigger holds a request or was closed
// (the end of stdin, which asks for a final gather). The gather loop has
// stopped: nothing else reads the trigger.
func (o *Output) gatherAsked() bool {
	select {
	case <-o.opts.Trigger:
		return true
	default:
		return false
	}
}

// Kind describes the execd output to the config registry. The command
// (gpusampler run) gives a STDIN block its Trigger; a block built without
// one is an error.
func Kind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[Options]{
		Kind:         "execd",
		SinkKeys:     []string{}, // the process's stdout
		SampleConfig: SampleConfig,
		Parse: func(t *config.Table) Options {
			o := Options{Signal: SignalNone, Shape: ShapeSummary}
			t.OneOf("signal", &o.Signal, SignalNone, SignalStdin)
			t.OneOf("shape", &o.Shape, ShapeSummary, ShapeNvidiaSMI)
			if t.Has("shape") && o.Signal != SignalStdin {
				t.Errorf("shape", "applies to signal = %q (gather) only", SignalStdin)
			}
			t.Bool("min_max", &o.MinMax)
			if t.Has("min_max") && o.Shape != ShapeNvidiaSMI {
				t.Errorf("min_max", "applies to shape = %q only", ShapeNvidiaSMI)
			}
			return o
		},
		Build: func(_ *outputs.Block, opts Options, env outputs.BuildEnv) (record.Output, error) {
			opts.Host, opts.GlobalTags, opts.Catalog = env.Host, env.GlobalTags, env.Catalog
			return New(env.Stdout, opts)
		},
	})
}
