// Command testplugin is the plugin the plugins tests run under the real
// supervisor. Its config block chooses what it does:
//
//	record = "FILE"        append one JSON line per batch (seq, samples, devices, events)
//	panic_configure = true panic in Configure
//	fail_writes = true     refuse every batch (a plain error: retryable)
//	fail_kind = "KIND"     refuse every batch with an error of that kind
//	                       (PERMANENT, UNAVAILABLE or RETRYABLE)
//	latency = "FILE"       on Close, write each sample's receive time − its time (ns, JSON array)
//	dump = "FILE"          append one JSON line per sample (t, v, d, m)
//	min_value = N          must be 0 to 1000 (a key error otherwise)
//	block_once = "FILE"    if FILE does not exist: create it, and block the
//	                       first Write forever (the process stays alive and
//	                       answers health probes); else write normally
//	log_flood = N          log N lines at WARN as fast as it can, from Configure on
//	leak_mb = N            hold N MiB more of touched memory, growing from Configure on
//
// With GPUSAMPLER_TESTPLUGIN_BROKEN=stdout in its environment it prints to
// stdout before serving, breaking the handshake.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/plugins/sdk"
	"github.com/gpusampler/gpusampler/record"
)

// Record is one line of the record file.
type Record struct {
	Seq     uint64  `json:"seq"`
	Samples int     `json:"samples"`
	First   float64 `json:"first"`
	Devices []int   `json:"devices,omitempty"`
	Events  int     `json:"events,omitempty"`
	PID     int     `json:"pid"`
}

type output struct {
	mu     sync.Mutex
	f      *os.File
	fail   bool
	kind   record.ErrorKind
	closed bool
	buf    []byte
	dump   *os.File
	// latency: receive time − sample time per sample, written on Close
	latencyFile string
	latencies   []int64
	// writes counts Write calls (reported as test_writes, see ReportStats)
	writes atomic.Uint64
	// lastBatch is the samples of the last Write (the gauge
	// test_last_batch)
	lastBatch atomic.Uint64
	// blockOnce: see block_once
	blockOnce string
}

// ReportStats implements record.StatsReporter: the host receives it with
// every Health answer.
func (o *output) ReportStats(dst []record.Field) []record.Field {
	return append(dst, record.IntField("test_writes", o.writes.Load()),
		record.GaugeField("test_last_batch", o.lastBatch.Load()))
}

// Sample is one line of the dump file.
type Sample struct {
	T int64   `json:"t"`
	V float64 `json:"v"`
	D uint16  `json:"d"`
	M uint16  `json:"m"`
}

func (o *output) Configure(t *config.Table, env sdk.Env) error {
	var panicConfigure bool
	t.Bool("panic_configure", &panicConfigure)
	if panicConfigure {
		panic("testplugin: told to panic in configure")
	}
	t.Bool("fail_writes", &o.fail)
	var kind string
	t.String("fail_kind", &kind)
	if kind != "" {
		k, ok := record.ParseErrorKind(kind)
		if !ok || k == record.KindNone {
			t.Errorf("fail_kind", "%q is not PERMANENT, UNAVAILABLE or RETRYABLE", kind)
		}
		o.fail, o.kind = true, k
	}
	var minValue int
	t.Int("min_value", &minValue, 0, 1000)
	var record string
	t.String("record", &record)
	t.String("latency", &o.latencyFile)
	var dump string
	t.String("dump", &dump)
	t.String("block_once", &o.blockOnce)
	var flood, leakMB int
	t.Int("log_flood", &flood, 0, 1<<30)
	t.Int("leak_mb", &leakMB, 0, 1<<16)
	if t.Err() != nil {
		return nil
	}
	if leakMB > 0 {
		go func() { // after Configure: a leak grows while the plugin serves
			for range leakMB {
				b := make([]byte, 1<<20)
				for i := 0; i < len(b); i += 4096 {
					b[i] = 1
				}
				leaked.Lock()
				leaked.chunks = append(leaked.chunks, b)
				leaked.Unlock()
			}
		}()
	}
	if flood > 0 {
		go func() {
			for i := range flood {
				env.Logger.Warn("flood", "i", i)
			}
		}()
	}
	if dump != "" {
		f, err := os.OpenFile(dump, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return err
		}
		o.dump = f
	}
	if record == "" {
		return nil
	}
	f, err := os.OpenFile(record, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	o.f = f
	env.Logger.Info("testplugin configured", "record", record)
	return nil
}

func (o *output) Write(ctx context.Context, b *record.Batch) error {
	if o.blockOnce != "" {
		if f, err := os.OpenFile(o.blockOnce, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			fmt.Fprintf(f, "%d\n", os.Getpid())
			f.Close()
			select {} // wedged: never returns, ignores ctx
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return record.ErrClosed
	}
	o.writes.Add(1)
	o.lastBatch.Store(uint64(len(b.Samples)))
	if o.fail {
		err := errors.New("testplugin: told to fail")
		if o.kind == record.KindNone { // fail_writes alone: a plain error
			return err
		}
		return record.WithKind(err, o.kind)
	}
	if o.latencyFile != "" {
		now := time.Now().UnixNano()
		for _, s := range b.Samples {
			o.latencies = append(o.latencies, now-s.TimeNS)
		}
	}
	if o.dump != nil {
		var buf []byte
		for _, s := range b.Samples {
			line, _ := json.Marshal(Sample{T: s.TimeNS, V: s.Value, D: s.Device, M: uint16(s.Metric)})
			buf = append(append(buf, line...), '\n')
		}
		if _, err := o.dump.Write(buf); err != nil {
			return fmt.Errorf("dump: %w", err)
		}
	}
	if o.f == nil {
		return nil
	}
	r := Record{Seq: b.Seq, Samples: len(b.Samples), Events: len(b.Events), PID: os.Getpid()}
	if len(b.Samples) > 0 {
		r.First = b.Samples[0].Value
	}
	for _, d := range b.Devices {
		r.Devices = append(r.Devices, d.Index)
	}
	o.buf, _ = json.Marshal(r)
	o.buf = append(o.buf, '\n')
	if _, err := o.f.Write(o.buf); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

func (o *output) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil
	}
	o.closed = true
	if o.dump != nil {
		o.dump.Close()
	}
	if o.latencyFile != "" {
		data, _ := json.Marshal(o.latencies)
		os.WriteFile(o.latencyFile, data, 0o644)
	}
	if o.f != nil {
		return o.f.Close()
	}
	return nil
}

// leaked holds leak_mb's memory for the process's life.
var leaked struct {
	sync.Mutex
	chunks [][]byte
}

func main() {
	if os.Getenv("GPUSAMPLER_TESTPLUGIN_BROKEN") == "stdout" {
		fmt.Println("hello from a plugin that prints to stdout")
	}
	sdk.Serve(&output{})
}
