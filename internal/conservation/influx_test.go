package conservation_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/influxdata/line-protocol/v2/lineprotocol"

	"github.com/gpusampler/gpusampler/internal/agent"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/conservation"
	"github.com/gpusampler/gpusampler/internal/influxtest"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/influxdb"
	"github.com/gpusampler/gpusampler/outputs/stdout"
)

// influxChildEnv selects the child role of TestAggregateDiskInfluxIntegration
// (its value: the influxd URL).
const influxChildEnv = "GPUSAMPLER_CONSERVATION_INFLUX"

// influxOutage is how many phases (1 s windows of scripted time each) the
// sinks are down for: a 20 s outage, in the time the engine takes to drain
// them.
const influxOutage = 20

// influxEnv is the test's files and config.
type influxEnv struct {
	dir, url string
}

func (e influxEnv) config() string {
	common := fmt.Sprintf(`  aggregate = %q
  flush_interval = "20ms"
  buffer = "disk"
  buffer_fsync_interval = "50ms"
  retry_initial = "10ms"
  retry_max = "100ms"
  buffer_close_timeout = "2m"
`, phaseSpan)
	return fmt.Sprintf(`[agent]
  stats_interval = "1h"
  self_metrics = false
  state_dir = %q

[sampler]
  backend = "sim"
  drain_interval = "20ms"
  processes = false

[[outputs.influxdb]]
  name = "influx"
  url = %q
  database = "gs"
  timeout = "1s"
  write_timeout = "2s"
  buffer_dir = %q
%s
[[outputs.stdout]]
  name = "twin"
  format = "influx"
  buffer_dir = %q
%s`, filepath.Join(e.dir, "state"), e.url, filepath.Join(e.dir, "influx.buf"), common, filepath.Join(e.dir, "twin.buf"), common)
}

// start runs an agent over src with the twin printing to twin.runN.lp.
func (e influxEnv) start(t *testing.T, src *conservation.Script, run int) *running {
	t.Helper()
	reg := outputs.NewRegistry(influxdb.Kind(), stdout.Kind())
	cfg, err := appconfig.Parse(filepath.Join(e.dir, "gpusampler.toml"), []byte(e.config()), appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(e.dir, fmt.Sprintf("twin.run%d.lp", run)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	tw := &testWriter{t: t}
	log := slog.New(slog.NewTextHandler(tw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := agent.New(src, cfg, agent.Options{Registry: reg, Hostname: "matrix", Logger: log, Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{e: &env{t: t, dir: e.dir}, src: src, a: a, cancel: cancel, done: make(chan error, 1),
		retired: map[string]*counts{}, problems: map[string][]string{}}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		if !r.stopped {
			cancel()
			<-r.done
		}
		tw.mu.Lock()
		tw.done = true
		tw.mu.Unlock()
	})
	return r
}

// release releases n phases, each waited for until every output's pump
// has handed everything published on (to the aggregate, and through it
// to the disk buffer).
func (r *running) release(t *testing.T, n int) {
	t.Helper()
	for range n {
		k := r.src.Release()
		want := uint64((k - r.src.First) * perPhase * 2)
		if !waitFor(func() bool {
			for _, d := range r.a.Engine().Stats().Devices {
				if d.Published < want {
					return false
				}
			}
			for _, o := range r.a.Engine().Stats().Outputs {
				if o.Lag > 0 || o.Pending > 0 || o.Delivered < want*2 {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("phase %d: not every output took the published samples: %+v", k, r.a.Engine().Stats().Outputs)
		}
	}
}

// TestAggregateDiskInfluxIntegration: with aggregate plus a disk buffer, a
// real influxd holds exactly the summaries that a stdout twin (aggregate
// plus disk buffer, line protocol) printed, across a 20 s outage of influxd
// (scripted time: influxOutage phases of one window each) and a kill -9 of
// gpusampler during it followed by a restart: every point whole, none
// missing, none extra; and every scripted window is there.
func TestAggregateDiskInfluxIntegration(t *testing.T) {
	if url := os.Getenv(influxChildEnv); url != "" {
		influxChild(t, url)
		return
	}
	srv := influxtest.Start(t, influxtest.Options{})
	srv.CreateDatabase("gs")
	e := influxEnv{dir: t.TempDir(), url: srv.URL}
	src := newScript()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestAggregateDiskInfluxIntegration$", "-test.v")
	cmd.Env = append(os.Environ(), influxChildEnv+"="+srv.URL, kill9Env+"="+e.dir, kill9Env+"_PLUGIN="+pluginPath,
		kill9Env+"_SUM="+pluginSum, kill9Env+"_START="+strconv.FormatInt(src.Start.UnixNano(), 10))
	logf, err := os.Create(filepath.Join(e.dir, "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	step := func(name string) {
		t.Helper()
		if !waitFor(func() bool {
			select {
			case <-exited:
				return true
			default:
			}
			_, err := os.Stat(filepath.Join(e.dir, name))
			return err == nil
		}) || func() bool { _, err := os.Stat(filepath.Join(e.dir, name)); return err != nil }() {
			cmd.Process.Kill()
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("the child never reached %q:\n%s", name, log)
		}
	}
	step("up") // phase 0 summarized and in influxd
	srv.Stop()
	if err := os.WriteFile(filepath.Join(e.dir, "down"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	step("ready") // the outage's phases in the disk buffers and the journals
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	released := 2 + influxOutage // phases the child published

	src2 := newScriptAt(src.Start)
	src2.StartAt(released)
	r2 := e.start(t, src2, 2)
	srv.Restart()
	r2.release(t, 2)
	r2.cancel()
	r2.stopped = true
	if err := <-r2.done; err != nil {
		t.Fatalf("run 2: %v", err)
	}
	if st := r2.a.Buffers()["influx"].Stats(); st.BufferedBatches != 0 || st.DroppedBatches.Total() != 0 {
		t.Fatalf("influx buffer after the stop: %+v", st)
	}

	var lines [2][]string
	for i := range lines {
		data, err := os.ReadFile(filepath.Join(e.dir, fmt.Sprintf("twin.run%d.lp", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		lines[i] = strings.Split(strings.TrimSpace(string(data)), "\n")
	}
	twin, replayed := lpPoints(t, lines[0], lines[1])
	if replayed > 0 {
		// kill -9 between the twin's print of a batch and the disk
		// buffer's record of it: the restart prints it again, as
		// at-least-once delivery allows (influxd keeps one point per
		// series and time, so it is not an extra there).
		t.Logf("the restarted twin printed again %d fields run 1 had printed, with the same values", replayed)
	}
	db := influxPoints(t, srv)
	var missing, extra, differ []string
	for k, v := range twin {
		switch got, ok := db[k]; {
		case !ok:
			missing = append(missing, k+" "+v)
		case got != v:
			differ = append(differ, fmt.Sprintf("%s\n\t\ttwin   %s\n\t\tinflux %s", k, v, got))
		}
	}
	for k, v := range db {
		if _, ok := twin[k]; !ok {
			extra = append(extra, k+" "+v)
		}
	}
	w1, w2 := lineWindows(lines[0]), lineWindows(lines[1])
	t.Logf("twin: %d points (run 1: %d lines, run 2: %d lines); influxd: %d points; scripted windows %d",
		len(twin), len(lines[0]), len(lines[1]), len(db), released+2)
	for _, l := range [][]string{missing, extra, differ} {
		slices.Sort(l)
	}
	if len(missing)+len(extra)+len(differ) > 0 {
		t.Errorf("influxd vs the twin: %d points missing from influxd, %d only in influxd, %d differ:\n\t%s",
			len(missing), len(extra), len(differ), strings.Join(slices.Concat(head(missing), head(extra), head(differ)), "\n\t"))
	}
	// Every scripted window, per device, is a point: nothing was lost at
	// the kill, and the window open then came back from the journal.
	wantKeys := 0
	for p := range released + 2 {
		ts := src.Start.Add(time.Duration(p) * phaseSpan).UnixNano()
		n := 0
		for k := range twin {
			if strings.HasSuffix(k, "@"+strconv.FormatInt(ts, 10)) {
				n++
			}
		}
		if n != 2 {
			t.Errorf("window %d (phase %d): %d points in the twin, want one per device (2)", ts, p, n)
		}
		wantKeys += 2
	}
	if len(twin) != wantKeys {
		t.Errorf("the twin holds %d points, want %d (one per device and window)", len(twin), wantKeys)
	}
	last := src.Start.Add(time.Duration(released-1) * phaseSpan).UnixNano()
	if !w2[strconv.FormatInt(last, 10)] || w1[strconv.FormatInt(last, 10)] {
		t.Errorf("the window open at the kill (phase %d) was not printed by the restarted process alone (run 1: %v, run 2: %v)",
			released-1, w1[strconv.FormatInt(last, 10)], w2[strconv.FormatInt(last, 10)])
	}
}

// influxChild is the process killed by TestAggregateDiskInfluxIntegration.
func influxChild(t *testing.T, url string) {
	dir := os.Getenv(kill9Env)
	startNS, err := strconv.ParseInt(os.Getenv(kill9Env+"_START"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	e := influxEnv{dir: dir, url: url}
	r := e.start(t, newScriptAt(time.Unix(0, startNS)), 1)
	r.release(t, 2) // phase 1 closes phase 0's windows
	if !waitFor(func() bool {
		st := r.a.Buffers()["influx"].Stats()
		return st.BufferedBatches == 0 && st.Delivered > 0
	}) {
		t.Fatal("phase 0 never reached influxd")
	}
	if err := os.WriteFile(filepath.Join(dir, "up"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !waitFor(func() bool { _, err := os.Stat(filepath.Join(dir, "down")); return err == nil }) {
		t.Fatal("influxd never went down")
	}
	r.release(t, influxOutage)
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {} // until SIGKILL
}

func head(l []string) []string { return l[:min(len(l), 4)] }

// lineWindows returns the distinct timestamps of the nvidia_smi lines.
func lineWindows(lines []string) map[string]bool {
	out := map[string]bool{}
	for _, l := range lines {
		if strings.HasPrefix(l, "nvidia_smi,") {
			out[l[strings.LastIndexByte(l, ' ')+1:]] = true
		}
	}
	return out
}

// pointKey is a point's identity in a database: its tags (sorted) and time.
func pointKey(tags map[string]string, timeNS int64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if tags[k] != "" { // influxd names a tag key a series lacks with ""
			fmt.Fprintf(&b, "%s=%s,", k, tags[k])
		}
	}
	fmt.Fprintf(&b, "@%d", timeNS)
	return b.String()
}

// fieldsString renders fields sorted, each value as the float64 it holds
// (influxd answers integers and integral floats alike).
func fieldsString(fields map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		parts = append(parts, k+"="+strconv.FormatFloat(fields[k], 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// lpPoints decodes the nvidia_smi lines of each run into points by key. A
// window's summaries may close at different times, metric by metric: lines
// of one point add fields to it (as in influxd). A field printed twice in
// one run, or again later with another value, fails; one a later run
// printed again with the same value (a batch replayed after a kill) is
// counted in replayed.
func lpPoints(t *testing.T, runs ...[]string) (points map[string]string, replayed int) {
	t.Helper()
	merged := map[string]map[string]float64{}
	printedIn := map[string]int{} // point key + field: the run that printed it
	for run, lines := range runs {
		dec := lineprotocol.NewDecoderWithBytes([]byte(strings.Join(lines, "\n")))
		for dec.Next() {
			m, err := dec.Measurement()
			if err != nil {
				t.Fatal(err)
			}
			if string(m) != "nvidia_smi" {
				// Events (a sample_loss when a loaded machine lets the
				// scripted buffers overrun) carry string fields; only
				// summaries are compared.
				continue
			}
			tags := map[string]string{}
			for {
				k, v, err := dec.NextTag()
				if err != nil {
					t.Fatal(err)
				}
				if k == nil {
					break
				}
				tags[string(k)] = string(v)
			}
			fields := map[string]float64{}
			for {
				k, v, err := dec.NextField()
				if err != nil {
					t.Fatal(err)
				}
				if k == nil {
					break
				}
				switch v.Kind() {
				case lineprotocol.Float:
					fields[string(k)] = v.FloatV()
				case lineprotocol.Int:
					fields[string(k)] = float64(v.IntV())
				default:
					t.Fatalf("field %s of kind %v", k, v.Kind())
				}
			}
			ts, err := dec.Time(lineprotocol.Nanosecond, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			k := pointKey(tags, ts.UnixNano())
			if merged[k] == nil {
				merged[k] = map[string]float64{}
			}
			for f, v := range fields {
				if old, ok := merged[k][f]; ok {
					if printedIn[k+" "+f] == run || old != v {
						t.Errorf("the twin printed %s of %s twice (%v in run %d, %v in run %d)", f, k, old, printedIn[k+" "+f]+1, v, run+1)
					}
					replayed++
				}
				merged[k][f] = v
				printedIn[k+" "+f] = run
			}
		}
		if err := dec.Err(); err != nil {
			t.Fatal(err)
		}
	}
	points = map[string]string{}
	for k, f := range merged {
		points[k] = fieldsString(f)
	}
	return points, replayed
}

// influxPoints reads every nvidia_smi point of database gs.
func influxPoints(t *testing.T, srv *influxtest.Server) map[string]string {
	t.Helper()
	res := srv.MustQuery("gs", `SELECT * FROM "nvidia_smi" GROUP BY *`)
	out := map[string]string{}
	for _, s := range res.Series {
		for _, row := range s.Values {
			var ts int64
			fields := map[string]float64{}
			for i, col := range s.Columns {
				n, ok := row[i].(json.Number)
				if !ok {
					continue // null: a field this point lacks
				}
				if col == "time" {
					v, err := n.Int64()
					if err != nil {
						t.Fatal(err)
					}
					ts = v
					continue
				}
				v, err := strconv.ParseFloat(n.String(), 64)
				if err != nil {
					t.Fatal(err)
				}
				fields[col] = v
			}
			out[pointKey(s.Tags, ts)] = fieldsString(fields)
		}
	}
	return out
}
