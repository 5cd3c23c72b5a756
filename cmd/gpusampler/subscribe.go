package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/outputs/stdout"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/stream"
)

// subscribeOptions configure `gpusampler subscribe`.
type subscribeOptions struct {
	server, subject, format string
	creds                   string
	// user/password or token authenticate like the NATS output's keys of
	// the same names.
	user, password, token string
	interval              time.Duration
	// top: rows shown (0: all); hosts: host name patterns (path.Match
	// globs, any may match; none: every host); sortKey: a fleetSortKeys key.
	top     int
	hosts   []string
	sortKey string
	// now is the clock for ages (tests inject one).
	now func() time.Time
	// handled, when set, is called after each message (tests).
	handled func()
}

// cmdSubscribe subscribes to what gpusampler nodes publish to NATS and
// prints a live fleet table or re-emits the records in a stdout format.
func cmdSubscribe(ctx context.Context, args []string, out, stderr io.Writer) error {
	fs := newFlagSet("subscribe", stderr)
	o := subscribeOptions{now: time.Now}
	fs.StringVar(&o.server, "server", "nats://127.0.0.1:4222", "NATS server URL(s), comma separated")
	fs.StringVar(&o.subject, "subject", "gpusampler.>", "subject pattern to subscribe to")
	fs.StringVar(&o.format, "format", "table", "table (a live fleet table), influx or json (re-emit every record)")
	fs.StringVar(&o.creds, "creds", "", "NATS credentials file")
	fs.StringVar(&o.user, "user", os.Getenv("NATS_USER"), "NATS user name (default $NATS_USER)")
	fs.StringVar(&o.password, "password", "", "NATS password (prefer $NATS_PASSWORD: a flag shows in ps)")
	fs.StringVar(&o.token, "token", "", "NATS token (prefer $NATS_TOKEN: a flag shows in ps)")
	fs.DurationVar(&o.interval, "interval", time.Second, "table refresh interval")
	fs.IntVar(&o.top, "top", 40, "table: show the first N rows in sort order (0: all)")
	hosts := fs.String("host", "", "table: only hosts matching these glob patterns, comma separated (node1*,gpu-?)")
	fs.StringVar(&o.sortKey, "sort", "host", "table: sort rows by "+strings.Join(fleetSortKeys, ", ")+
		" (numbers highest first, age oldest first)")
	if err := parseFlags(fs, args, out); err != nil {
		return err
	}
	if o.top < 0 {
		return usagef("-top: must be 0 (all) or positive")
	}
	if !slices.Contains(fleetSortKeys, o.sortKey) {
		return usagef("-sort %q: want one of %s", o.sortKey, strings.Join(fleetSortKeys, ", "))
	}
	if *hosts != "" {
		for _, h := range strings.Split(*hosts, ",") {
			if _, err := path.Match(h, ""); err != nil {
				return usagef("-host %q: %v", h, err)
			}
			o.hosts = append(o.hosts, h)
		}
	}
	if !slices.Contains(stdout.Formats, o.format) {
		return usagef("unknown format %q (want table, influx or json)", o.format)
	}
	if o.interval <= 0 {
		return usagef("-interval: must be positive")
	}
	if o.password == "" {
		o.password = os.Getenv("NATS_PASSWORD")
	}
	if o.token == "" {
		o.token = os.Getenv("NATS_TOKEN")
	}
	switch {
	case o.user != "" && o.token != "":
		return usagef("--user and --token: give one or the other")
	case o.password != "" && o.user == "":
		return usagef("--password needs --user")
	}
	return runSubscribe(ctx, o, out, stderr)
}

func runSubscribe(ctx context.Context, o subscribeOptions, out, stderr io.Writer) error {
	nopts := []nats.Option{nats.Name("gpusampler subscribe"), nats.MaxReconnects(-1)}
	if o.creds != "" {
		nopts = append(nopts, nats.UserCredentials(o.creds))
	}
	switch {
	case o.user != "":
		nopts = append(nopts, nats.UserInfo(o.user, o.password))
	case o.token != "":
		nopts = append(nopts, nats.Token(o.token))
	}
	nc, err := nats.Connect(o.server, nopts...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", o.server, err)
	}
	defer nc.Close()
	ch := make(chan *nats.Msg, 8192)
	sub, err := nc.ChanSubscribe(o.subject, ch)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", o.subject, err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("subscribe %s: %w", o.subject, err)
	}
	table := newFleetTable()
	table.top, table.hosts, table.sortKey = o.top, o.hosts, o.sortKey
	table.dropped = func() int {
		n, _ := sub.Dropped()
		return n
	}
	emit := newReEmitter(o.format, out)
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	badLogged := false
	for {
		select {
		case <-ctx.Done():
			if o.format == "table" {
				table.render(out, o.now())
			}
			return emit.close()
		case <-tick.C:
			if o.format == "table" {
				table.render(out, o.now())
			}
		case m := <-ch:
			recs, err := stream.DecodeMsg(m)
			switch {
			case err != nil:
				if !badLogged { // once: a stream of bad messages is not a stream of logs
					fmt.Fprintf(stderr, "gpusampler subscribe: skipping undecodable messages: %v\n", err)
					badLogged = true
				}
			case o.format == "table":
				table.add(recs)
			default:
				if err := emit.write(ctx, recs); err != nil {
					return err
				}
			}
			if o.handled != nil {
				o.handled()
			}
		}
	}
}

// fleetTable keeps the newest value of a few metrics per host and GPU.
type fleetTable struct {
	rows map[fleetKey]*fleetRow
	// top, hosts, sortKey: see subscribeOptions.
	top     int
	hosts   []string
	sortKey string
	// skip caches hosts that match no pattern of hosts.
	skip map[string]bool
	// dropped returns the messages the subscription dropped (the table
	// fell behind); nil: none.
	dropped func() int
}

// fleetSortKeys are the table's sort keys.
var fleetSortKeys = []string{"host", "power", "util", "temp", "mem", "age"}

type fleetKey struct {
	host string
	gpu  int
}

type fleetRow struct {
	uuid     string
	memTotal float64
	vals     map[catalog.MetricID]float64
	times    map[catalog.MetricID]int64
	newest   int64
}

func newFleetTable() *fleetTable {
	return &fleetTable{rows: map[fleetKey]*fleetRow{}, skip: map[string]bool{}, sortKey: "host"}
}

// wanted reports whether host passes the host patterns.
func (f *fleetTable) wanted(host string) bool {
	if len(f.hosts) == 0 {
		return true
	}
	skip, seen := f.skip[host]
	if !seen {
		skip = !slices.ContainsFunc(f.hosts, func(p string) bool { ok, _ := path.Match(p, host); return ok })
		f.skip[host] = skip
	}
	return !skip
}

func (f *fleetTable) row(host string, gpu int) *fleetRow {
	k := fleetKey{host, gpu}
	r := f.rows[k]
	if r == nil {
		r = &fleetRow{vals: map[catalog.MetricID]float64{}, times: map[catalog.MetricID]int64{}}
		f.rows[k] = r
	}
	return r
}

func (f *fleetTable) add(recs *stream.Records) {
	if !f.wanted(recs.Host) {
		return
	}
	for _, d := range recs.Batch.Devices {
		r := f.row(recs.Host, d.Index)
		r.uuid = d.UUID
		if d.MemoryTotalMiB > 0 {
			r.memTotal = float64(d.MemoryTotalMiB)
		}
	}
	set := func(gpu int, id catalog.MetricID, t int64, v float64) {
		r := f.row(recs.Host, gpu)
		if u := recs.UUID(gpu); u != "" {
			r.uuid = u
		}
		if old, ok := r.times[id]; !ok || t >= old {
			r.vals[id], r.times[id] = v, t
		}
		r.newest = max(r.newest, t)
	}
	for _, s := range recs.Batch.Samples {
		set(int(s.Device), s.Metric, s.TimeNS, s.Value)
	}
	for _, s := range recs.Batch.Summaries {
		set(int(s.Device), s.Metric, s.StartNS+s.IntervalNS, s.Last)
	}
}

const fleetFormat = "%-14s %3s %-16s %7s %5s %5s %5s %15s %7s\n"

// sortValue returns r's value for a numeric sort key, higher first (age:
// the older, the higher); -Inf where r has none, so that it sorts last.
func (r *fleetRow) sortValue(key string) float64 {
	v := func(ids ...catalog.MetricID) float64 {
		for _, id := range ids {
			if x, ok := r.vals[id]; ok {
				return x
			}
		}
		return math.Inf(-1)
	}
	switch key {
	case "power":
		return v(catalog.MetricPowerDraw, catalog.MetricPowerInstant)
	case "util":
		return v(catalog.MetricUtilGPU)
	case "temp":
		return v(catalog.MetricTempGPU)
	case "mem":
		return v(catalog.MetricMemoryUsed)
	case "age":
		if r.newest == 0 {
			return math.Inf(-1)
		}
		return -float64(r.newest)
	}
	return 0
}

// render prints the table: one row per host and GPU, sorted, the first top
// of them, and a line on what it left out.
func (f *fleetTable) render(w io.Writer, now time.Time) {
	fmt.Fprintf(w, fleetFormat, "HOST", "GPU", "UUID", "POWER_W", "UTIL%", "GPU_C", "MEM_C", "MEM_USED/TOT_MiB", "AGE")
	byHost := func(a, b fleetKey) int { return cmp.Or(cmp.Compare(a.host, b.host), cmp.Compare(a.gpu, b.gpu)) }
	keys := slices.Collect(maps.Keys(f.rows))
	if f.sortKey == "" || f.sortKey == "host" {
		slices.SortFunc(keys, byHost)
	} else {
		slices.SortFunc(keys, func(a, b fleetKey) int {
			return cmp.Or(cmp.Compare(f.rows[b].sortValue(f.sortKey), f.rows[a].sortValue(f.sortKey)), byHost(a, b))
		})
	}
	shown := keys
	if f.top > 0 && len(keys) > f.top {
		shown = keys[:f.top]
	}
	for _, k := range shown {
		r := f.rows[k]
		val := func(id catalog.MetricID, format string) string {
			v, ok := r.vals[id]
			if !ok {
				return "-"
			}
			return fmt.Sprintf(format, v)
		}
		power := val(catalog.MetricPowerDraw, "%.1f")
		if power == "-" {
			power = val(catalog.MetricPowerInstant, "%.1f")
		}
		total := r.memTotal
		if v, ok := r.vals[catalog.MetricMemoryTotal]; ok {
			total = v
		}
		mem := val(catalog.MetricMemoryUsed, "%.0f") + "/" + strconv.FormatFloat(total, 'f', 0, 64)
		if total == 0 {
			mem = val(catalog.MetricMemoryUsed, "%.0f") + "/-"
		}
		age := "-"
		if r.newest > 0 {
			age = now.Sub(time.Unix(0, r.newest)).Round(100 * time.Millisecond).String()
		}
		uuid := r.uuid
		if len(uuid) > 16 {
			uuid = uuid[:15] + "~"
		}
		fmt.Fprintf(w, fleetFormat, trunc(k.host, 14), strconv.Itoa(k.gpu), uuid, power, val(catalog.MetricUtilGPU, "%.0f"),
			val(catalog.MetricTempGPU, "%.0f"), val(catalog.MetricTempMemory, "%.0f"), mem, age)
	}
	dropped := 0
	if f.dropped != nil {
		dropped = f.dropped()
	}
	if len(shown) < len(keys) || dropped > 0 {
		hosts := map[string]bool{}
		for _, k := range keys {
			hosts[k.host] = true
		}
		fmt.Fprintf(w, "(%d of %d GPUs on %d hosts, by %s; -top 0 shows all", len(shown), len(keys), len(hosts), cmp.Or(f.sortKey, "host"))
		if dropped > 0 {
			fmt.Fprintf(w, "; %d messages dropped: the table fell behind, narrow -subject", dropped)
		}
		fmt.Fprintln(w, ")")
	}
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n-1] + "~"
	}
	return s
}

// reEmitter writes decoded records in a stdout format, with one encoder per
// sending host (device indexes are per host).
type reEmitter struct {
	format string
	w      io.Writer
	outs   map[string]*stdout.Output
	known  map[fleetKey]bool
}

func newReEmitter(format string, w io.Writer) *reEmitter {
	return &reEmitter{format: format, w: w, outs: map[string]*stdout.Output{}, known: map[fleetKey]bool{}}
}

func (e *reEmitter) write(ctx context.Context, recs *stream.Records) error {
	o := e.outs[recs.Host]
	if o == nil {
		var err error
		if o, err = stdout.New(e.w, stdout.Options{Format: e.format, Host: recs.Host, GlobalTags: recs.Tags}); err != nil {
			return err
		}
		e.outs[recs.Host] = o
	}
	b := &recs.Batch
	for _, d := range b.Devices {
		e.known[fleetKey{recs.Host, d.Index}] = true
	}
	// Line protocol carries no identity records: give the encoder the UUID.
	for _, i := range slices.Sorted(maps.Keys(recs.UUIDs)) {
		if k := (fleetKey{recs.Host, i}); !e.known[k] {
			e.known[k] = true
			b.Devices = append(b.Devices, record.Device{Index: i, UUID: recs.UUIDs[i]})
		}
	}
	return o.Write(ctx, b)
}

func (e *reEmitter) close() error {
	for _, o := range e.outs {
		o.Close()
	}
	return nil
}
