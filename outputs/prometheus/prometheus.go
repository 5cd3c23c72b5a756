package prometheus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// Defaults.
const (
	DefaultListen = ":9400"
	DefaultPath   = "/metrics"
	DefaultWindow = 15 * time.Second
	DefaultStale  = 10 * time.Second
	// dcgmExporterPort is where dcgm-exporter listens by default.
	dcgmExporterPort = "9400"
	// powerAverage is the span of DCGM_FI_DEV_POWER_USAGE.
	powerAverage = time.Second
	// RarePrior is the read interval assumed for a metric the catalog
	// marks Rare until its second read shows the real one: the engine's
	// default rare_interval (the output runs apart from the engine and
	// does not see its config).
	RarePrior = 30 * time.Second
)

// Options configure an Output.
type Options struct {
	// Listen is the address to serve on (DefaultListen when empty).
	Listen string
	// Path serves the metrics (DefaultPath when empty); /healthz answers
	// whether every device produced a sample within Stale.
	Path string
	// Naming is NamingDCGM (default) or NamingPrometheus.
	Naming string
	// HostLabel spells the host label: HostLabelLegacy or HostLabelNew;
	// empty means HostLabelLegacy under NamingDCGM (as dcgm-exporter before
	// 4.6.0-4.8.3 and the official dashboard) and HostLabelNew under
	// NamingPrometheus.
	HostLabel string
	// Window is the span of the _min/_max/_mean families (DefaultWindow).
	Window time.Duration
	// Stale is how long a device may go without any sample before its
	// series disappear (DefaultStale). A metric of a device still sampled
	// stays until twice its own observed read interval, and at least Stale.
	Stale time.Duration
	// WebConfig is an exporter-toolkit web config file (TLS, basic auth);
	// empty serves plain HTTP.
	WebConfig string
	// HealthUnauthenticated answers /healthz without the web config's basic
	// auth (liveness probes carry no credentials); TLS still applies, and
	// the metrics path stays behind the auth.
	HealthUnauthenticated bool
	// HealthFailOnOutputs makes /healthz answer 503 while the agent's
	// self-metrics report an output failing (not started, or a plugin in a
	// crash storm); otherwise it answers as the devices say and lists the
	// failing outputs in its body.
	HealthFailOnOutputs bool
	// Host is the host label's value; GlobalTags become labels too (names
	// sanitized to [a-zA-Z_][a-zA-Z0-9_]*).
	Host       string
	GlobalTags map[string]string
	// Catalog is the metric catalog (catalog.Default() when nil).
	Catalog *catalog.Catalog
	// Logger receives server errors (discarded when nil).
	Logger *slog.Logger
	// Now is the clock for staleness (time.Now when nil); tests inject one.
	Now func() time.Time
}

// Output serves the samples it is written as a Prometheus endpoint. Metrics
// are built at scrape time from the newest value per device and metric, a
// window of every sample of each gauge, and counters.
//
// Concurrency: one pump calls Write and Close (record.Output); scrapes run
// on the HTTP server's goroutines. A read/write lock guards the state: Write
// holds it exclusively for the batch, scrapes share it.
type Output struct {
	opts   Options
	cat    *catalog.Catalog
	series []series
	byID   []int // MetricID → index in series, -1 when not exposed
	// prior is each metric's read interval before its second read tells
	// it (RarePrior for the catalog's Rare metrics, else 0), by MetricID.
	prior []int64
	log   *slog.Logger
	now   func() time.Time

	baseLabels []string // label names every device series carries, in order
	tagValues  []string // global tag values in baseLabels order (after the device labels)

	mu      sync.RWMutex
	closed  bool
	devices []*deviceState // indexed by Device.Index
	self    map[string]*selfEntry
	jobs    map[string]*jobEntry // by device and owner

	reg      *prometheus.Registry
	ln       net.Listener
	srv      *http.Server
	served   chan struct{}
	closeErr error
	once     sync.Once
}

// New validates opts, binds the listener (so that a taken address fails
// here, at startup) and starts serving. Close stops the server.
func New(opts Options) (*Output, error) {
	o, err := newOutput(opts)
	if err != nil {
		return nil, err
	}
	if o.opts.WebConfig != "" {
		if err := web.Validate(o.opts.WebConfig); err != nil {
			return nil, fmt.Errorf("prometheus: web_config %s: %w", o.opts.WebConfig, err)
		}
		problems, warnings, err := webConfigFindings(o.opts.WebConfig)
		if err != nil {
			return nil, fmt.Errorf("prometheus: web_config %s: %w", o.opts.WebConfig, err)
		}
		if len(problems) > 0 {
			return nil, fmt.Errorf("prometheus: web_config %s", problems[0])
		}
		for _, w := range warnings {
			o.log.Warn("prometheus: web_config " + w)
		}
	}
	ln, err := net.Listen("tcp", o.opts.Listen)
	if err != nil {
		return nil, listenError(o.opts.Listen, err)
	}
	o.ln = ln
	mux := http.NewServeMux()
	mux.Handle(o.opts.Path, o.Handler())
	mux.HandleFunc("/healthz", o.serveHealth)
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(o.log.Handler(), slog.LevelDebug)}
	if o.opts.HealthUnauthenticated && o.opts.WebConfig != "" {
		o.srv.BaseContext = o.healthBypass
	}
	o.served = make(chan struct{})
	webConfig := o.opts.WebConfig
	go func() {
		defer close(o.served)
		err := web.Serve(ln, o.srv, &web.FlagConfig{WebConfigFile: &webConfig}, o.log)
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.log.Error("prometheus endpoint stopped", "address", ln.Addr().String(), "err", err)
		}
	}()
	return o, nil
}

// healthBypass routes /healthz around the web config's basic auth. It runs
// as the server's BaseContext: web.Serve has then wrapped the handler in its
// authenticating one, on this goroutine, and no request has been accepted
// yet, so the wrapper can be put in front of it without a race.
func (o *Output) healthBypass(net.Listener) context.Context {
	authed := o.srv.Handler
	health := http.HandlerFunc(o.serveHealth)
	o.srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			health.ServeHTTP(w, r)
			return
		}
		authed.ServeHTTP(w, r)
	})
	return context.Background()
}

// newOutput builds an Output without a listener (tests and New).
func newOutput(opts Options) (*Output, error) {
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.Path == "" {
		opts.Path = DefaultPath
	}
	if !strings.HasPrefix(opts.Path, "/") || opts.Path == "/healthz" {
		return nil, fmt.Errorf("prometheus: path %q: want an absolute path other than /healthz", opts.Path)
	}
	if opts.Naming == "" {
		opts.Naming = NamingDCGM
	}
	if opts.HostLabel == "" {
		opts.HostLabel = HostLabelLegacy
		if opts.Naming == NamingPrometheus {
			opts.HostLabel = HostLabelNew
		}
	}
	if !slices.Contains(HostLabels, opts.HostLabel) {
		return nil, fmt.Errorf("prometheus: unknown host label %q (want one of: %s)", opts.HostLabel, strings.Join(HostLabels, ", "))
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Stale <= 0 {
		opts.Stale = DefaultStale
	}
	if opts.Catalog == nil {
		opts.Catalog = catalog.Default()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ss, err := buildSeries(opts.Catalog, opts.Naming)
	if err != nil {
		return nil, err
	}
	o := &Output{opts: opts, cat: opts.Catalog, series: ss, log: opts.Logger, now: opts.Now,
		self: map[string]*selfEntry{}, jobs: map[string]*jobEntry{}, byID: make([]int, opts.Catalog.Len())}
	for i := range o.byID {
		o.byID[i] = -1
	}
	for i, s := range ss {
		o.byID[s.id] = i
	}
	o.prior = make([]int64, opts.Catalog.Len())
	for _, m := range opts.Catalog.All() {
		if m.Rare && int(m.ID) < len(o.prior) {
			o.prior[m.ID] = int64(RarePrior)
		}
	}
	o.baseLabels = append(o.baseLabels, deviceLabels(opts.Naming, opts.HostLabel)...)
	for _, k := range slices.Sorted(maps.Keys(opts.GlobalTags)) {
		name := sanitizeLabel(k)
		if slices.Contains(o.baseLabels, name) {
			return nil, fmt.Errorf("prometheus: global tag %q clashes with the label %s", k, name)
		}
		o.baseLabels = append(o.baseLabels, name)
		o.tagValues = append(o.tagValues, opts.GlobalTags[k])
	}
	o.reg = prometheus.NewRegistry()
	if err := o.reg.Register(collector{o}); err != nil {
		return nil, fmt.Errorf("prometheus: register collector: %w", err)
	}
	return o, nil
}

// listenError explains a failed bind; a taken address names the likely
// holder.
func listenError(addr string, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("prometheus: listen %s: %w", addr, err)
	}
	holder := "another exporter or a second gpusampler"
	if _, port, perr := net.SplitHostPort(addr); perr == nil && port == dcgmExporterPort {
		holder = "dcgm-exporter listens there by default"
	}
	return fmt.Errorf("prometheus: address %s in use — %s; stop it or set listen = \"...\" in [[outputs.prometheus]]: %w", addr, holder, err)
}

// Addr returns the address the endpoint listens on (useful with port 0).
func (o *Output) Addr() net.Addr {
	if o.ln == nil {
		return nil
	}
	return o.ln.Addr()
}

// Handler returns the metrics handler (the registry behind Path).
func (o *Output) Handler() http.Handler {
	return promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Gatherer returns the registry that holds the output's collector.
func (o *Output) Gatherer() prometheus.Gatherer { return o.reg }

// Write updates the state scrapes read. It copies what it keeps; b is not
// retained.
func (o *Output) Write(_ context.Context, b *record.Batch) error {
	now := o.now().UnixNano()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return record.ErrClosed
	}
	for i := range b.Devices {
		o.identity(&b.Devices[i])
	}
	horizon := max(int64(o.opts.Window), int64(powerAverage))
	for i := range b.Samples {
		s := &b.Samples[i]
		d := o.device(int(s.Device))
		if d == nil || int(s.Metric) >= len(d.metrics) || s.Metric == 0 {
			continue
		}
		d.observe(s.TimeNS, now)
		ms := &d.metrics[s.Metric]
		ms.note(s.TimeNS, now)
		if !ms.has {
			ms.prior = o.prior[s.Metric]
		}
		if !ms.has || s.TimeNS >= ms.lastT {
			ms.last, ms.lastT = s.Value, s.TimeNS
		}
		ms.has, ms.arrive = true, now
		if si := o.byID[s.Metric]; si >= 0 && o.series[si].window {
			ms.win.push(entry{t: s.TimeNS, min: s.Value, max: s.Value, sum: s.Value, n: 1}, horizon)
		}
	}
	for i := range b.Summaries {
		s := &b.Summaries[i]
		d := o.device(int(s.Device))
		if d == nil || int(s.Metric) >= len(d.metrics) || s.Metric == 0 || s.Count == 0 {
			continue
		}
		end := s.StartNS + s.IntervalNS
		d.observe(end, now)
		ms := &d.metrics[s.Metric]
		ms.note(end, now)
		if !ms.has {
			ms.prior = max(o.prior[s.Metric], s.IntervalNS)
		}
		if !ms.has || end >= ms.lastT {
			ms.last, ms.lastT = s.Last, end
		}
		ms.has, ms.arrive = true, now
		if si := o.byID[s.Metric]; si >= 0 && o.series[si].window {
			ms.win.push(entry{t: end, min: s.Min, max: s.Max, sum: s.Mean * float64(s.Count), n: s.Count}, horizon)
		}
	}
	for i := range b.Events {
		o.event(&b.Events[i], now)
	}
	for key, ent := range o.self {
		if ent.expired(now) {
			delete(o.self, key)
		}
	}
	for key, ent := range o.jobs {
		if ent.expired(now) {
			delete(o.jobs, key)
		}
	}
	return nil
}

// observe notes a sample of time t arriving at now.
func (d *deviceState) observe(t, now int64) {
	d.arrive = now
	if t > d.newestT {
		d.newestT = t
	}
	if d.lost && t > d.lostT {
		d.lost = false
	}
}

// device returns the state of device index, creating it on first sight.
func (o *Output) device(index int) *deviceState {
	if index < 0 || index > 1<<16 {
		return nil
	}
	if index >= len(o.devices) {
		o.devices = append(o.devices, make([]*deviceState, index+1-len(o.devices))...)
	}
	d := o.devices[index]
	if d == nil {
		d = &deviceState{id: record.Device{Index: index}, metrics: make([]metricState, o.cat.Len())}
		o.setLabels(d)
		o.devices[index] = d
	}
	return d
}

// identity applies a device's (new or changed) identity.
func (o *Output) identity(id *record.Device) {
	d := o.device(id.Index)
	if d == nil {
		return
	}
	d.id, d.known = *id, true
	o.setLabels(d)
}

// event applies one event: XIDs, lost and recovered devices, self-metrics,
// per-job accounts.
func (o *Output) event(e *record.Event, now int64) {
	switch e.Kind {
	case record.EventXID:
		d := o.device(e.Device)
		if d == nil {
			return
		}
		d.xidCount++
		for _, a := range e.Attrs {
			if a.Key == "xid" {
				if v, err := strconv.ParseFloat(a.Value, 64); err == nil {
					d.lastXID = v
				}
			}
		}
	case record.EventDeviceLost:
		if d := o.device(e.Device); d != nil {
			d.lost, d.lostT = true, e.StartNS
		}
	case record.EventDeviceRecovery:
		if d := o.device(e.Device); d != nil {
			d.lost = false
		}
	case record.EventSelf:
		o.selfEvent(e, now)
	case record.EventJob, record.EventJobEnd:
		o.jobEvent(e, now)
	}
}

// Close stops the server. A second Close returns nil.
func (o *Output) Close() error {
	o.mu.Lock()
	already := o.closed
	o.closed = true
	o.mu.Unlock()
	if already {
		return nil
	}
	o.once.Do(func() {
		if o.srv == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := o.srv.Shutdown(ctx); err != nil {
			o.closeErr = fmt.Errorf("prometheus: shut down %s: %w", o.ln.Addr(), err)
			o.srv.Close()
		}
		<-o.served
	})
	return o.closeErr
}

// fresh reports whether d produced a sample within the staleness limit and
// is not lost.
func (o *Output) fresh(d *deviceState, now int64) bool {
	return d.arrive != 0 && !d.lost && now-d.arrive <= int64(o.opts.Stale)
}

// serveHealth answers 200 when every device produced a sample recently,
// 503 naming the devices that did not otherwise; the outputs that the
// agent's self-metrics report failing are listed after that, and make it
// 503 with HealthFailOnOutputs.
func (o *Output) serveHealth(w http.ResponseWriter, _ *http.Request) {
	now := o.now().UnixNano()
	var stale []string
	n := 0
	o.mu.RLock()
	for _, d := range o.devices {
		if d == nil {
			continue
		}
		n++
		if !o.fresh(d, now) {
			why := "no sample yet"
			switch {
			case d.lost:
				why = "lost"
			case d.arrive != 0:
				why = "last sample " + time.Duration(now-d.arrive).Round(time.Millisecond).String() + " ago"
			}
			stale = append(stale, fmt.Sprintf("gpu %d (%s): %s", d.id.Index, d.id.UUID, why))
		}
	}
	failing := o.failingOutputs(now)
	o.mu.RUnlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case n == 0:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "no device has produced a sample yet")
	case len(stale) > 0:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%d of %d devices without a sample within %v:\n%s\n", len(stale), n, o.opts.Stale, strings.Join(stale, "\n"))
	case len(failing) > 0 && o.opts.HealthFailOnOutputs:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%d devices sampled within %v, but outputs are failing:\n", n, o.opts.Stale)
	default:
		fmt.Fprintf(w, "ok: %d devices sampled within %v\n", n, o.opts.Stale)
	}
	if len(failing) > 0 {
		fmt.Fprintf(w, "%s\n", strings.Join(failing, "\n"))
	}
}

// sanitizeLabel makes s a valid Prometheus label name.
func sanitizeLabel(s string) string {
	if model.LabelName(s).IsValidLegacy() {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= '0' && c <= '9' && i > 0) {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}
