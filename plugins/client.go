package plugins

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/internal/backoff"
	"github.com/gpusampler/gpusampler/plugins/internal/rpc"
	"github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record"
)

var _ hclog.Logger = (*slogHCLog)(nil)

// Supervision defaults.
const (
	DefaultCallTimeout    = 5 * time.Second
	DefaultStartTimeout   = 10 * time.Second
	DefaultHealthInterval = time.Second
	DefaultHealthTimeout  = time.Second
	DefaultBackoffMin     = 100 * time.Millisecond
	DefaultBackoffMax     = 5 * time.Second
	DefaultResetAfter     = 30 * time.Second
	DefaultStormRestarts  = 5
	DefaultStormWindow    = time.Minute
	// DefaultMemoryMax is the resident memory above which a plugin
	// process is restarted (Options.MemoryMax): far above what an output
	// needs (tens of MiB), low enough that a leak ends long before it
	// hurts the machine.
	DefaultMemoryMax = 512 << 20
	// healthFailures in a row mark a plugin that is alive but not
	// answering as wedged.
	healthFailures = 2
)

// Options configure a plugin Client.
type Options struct {
	// Name is the output's name (logs, errors, the plugin's Configure).
	Name string
	// Kind is the config kind handed to Configure ("plugin", or the
	// built-in kind the gpusampler binary serves).
	Kind string
	// Shared, when set, runs the output as an instance in a process shared
	// with the other Clients of that SharedProcess, which starts it;
	// Command, SHA256, Env and InheritEnv are then not used.
	Shared *SharedProcess
	// Command returns a new, unstarted command for the plugin process; it
	// is called for every start. Its Stdout, Stderr and Stdin are set by
	// the client (stdout carries the handshake, stderr the plugin's logs).
	// Variables in its Env are handed to the plugin as well.
	Command func() *exec.Cmd
	// SHA256, when set, pins the executable the command names to this
	// checksum (hex). Every start, the first and each restart, opens the
	// file, hashes the open file and executes that same open file (on
	// Linux, /proc/self/fd/N), so the bytes verified are the bytes run: a
	// binary replaced on disk is refused (ErrChecksum) and never executed.
	SHA256 string
	// Env are NAME=value variables handed to the plugin. Its environment is
	// otherwise minimal: go-plugin's handshake variables, PATH, TZ and the
	// locale (LANG, LANGUAGE, LC_*). Nothing else of the host's
	// environment reaches a plugin unless InheritEnv is set.
	Env []string
	// InheritEnv hands the plugin the host's whole environment (for
	// `gpusampler plugin test`, a developer's tool).
	InheritEnv bool
	// Config is the block handed to Configure.
	Config map[string]any
	// Host and GlobalTags are handed to Configure.
	Host       string
	GlobalTags map[string]string
	// Catalog is sent to the plugin so it can name metric ids
	// (catalog.Default() when nil).
	Catalog *catalog.Catalog
	// Logger receives the supervisor's logs and the plugin's stderr lines.
	// Attach the output's name before handing it in.
	Logger *slog.Logger

	// CallTimeout bounds Configure, Close, and each Write (Write also
	// honours its context's deadline, whichever is first).
	CallTimeout time.Duration
	// StartTimeout bounds the process start and handshake.
	StartTimeout time.Duration
	// HealthInterval is how often the plugin is probed; HealthTimeout
	// bounds each probe. Two failed probes in a row mark a plugin that is
	// still alive as wedged: it is killed and restarted.
	HealthInterval, HealthTimeout time.Duration
	// BackoffMin and BackoffMax bound the delay before a restart; it
	// doubles after each restart and returns to BackoffMin once a plugin
	// has run for ResetAfter. BackoffMax caps it (default 5 s): a plugin
	// in a crash storm is retried at that pace, not ever more slowly.
	BackoffMin, BackoffMax, ResetAfter time.Duration
	// StormRestarts restarts (crashes and wedges) within StormWindow mark
	// the plugin failing (Stats.Failing, plugin_failing in self-metrics)
	// until the window holds fewer again. Defaults: 5 within 1 minute.
	StormRestarts int
	StormWindow   time.Duration
	// MemoryMax is the resident memory (bytes) above which the plugin's
	// process is killed (with its process group) and restarted, counted in
	// Stats.MemoryRestarts; it is read from /proc at every health probe
	// (Linux only: elsewhere there is no limit). 0 means
	// DefaultMemoryMax, a negative value no limit. It applies to a process
	// of the Client's own; a SharedProcess has a limit of its own
	// (SharedProcess.MemoryMax).
	MemoryMax int64
	// Now is the clock of the crash-storm window and of the log rate
	// limit (time.Now when nil).
	Now func() time.Time

	// afterPin, set by tests, runs between the checksum check and the exec.
	afterPin func()
}

func (o *Options) withDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.CallTimeout, DefaultCallTimeout)
	def(&o.StartTimeout, DefaultStartTimeout)
	def(&o.HealthInterval, DefaultHealthInterval)
	def(&o.HealthTimeout, DefaultHealthTimeout)
	def(&o.BackoffMin, DefaultBackoffMin)
	def(&o.BackoffMax, DefaultBackoffMax)
	def(&o.ResetAfter, DefaultResetAfter)
	def(&o.StormWindow, DefaultStormWindow)
	if o.StormRestarts <= 0 {
		o.StormRestarts = DefaultStormRestarts
	}
	if o.MemoryMax == 0 {
		o.MemoryMax = DefaultMemoryMax
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Catalog == nil {
		o.Catalog = catalog.Default()
	}
}

// Stats are a client's supervision counters.
type Stats struct {
	// Starts counts plugin processes started and configured (the first
	// one included).
	Starts uint64
	// Crashes counts processes found dead; Wedges counts processes found
	// alive but not answering (killed by pid); MemoryRestarts counts
	// processes killed over Options.MemoryMax.
	Crashes, Wedges, MemoryRestarts uint64
	// PID is the current process's pid; 0 while restarting.
	PID int
	// LastRestart is how long the most recent restart took, from
	// detection to a configured plugin.
	LastRestart time.Duration
	// StartFailures counts restarts that failed (refused checksum, failed
	// handshake or Configure); each is retried after the backoff.
	StartFailures uint64
	// Failing is set while the plugin is in a crash storm: at least
	// StormRestarts restarts within StormWindow.
	Failing bool
	// Isolated is set once an output that shared a process wedged and was
	// moved to a process of its own.
	Isolated bool
	// LogDropped counts the plugin's log lines dropped over the log rate
	// limit (LogRate, LogBurst), across restarts; for an output in a
	// shared process, the lines that name it.
	LogDropped uint64
}

// Client is an output that runs in a plugin process. It implements
// record.Output, so the engine's pump drives it like any other output.
//
// While the plugin is down (crashed, wedged, restarting) Write returns at
// once with an error wrapping record.ErrUnavailable: the pump keeps the
// batch and offers it again (same Seq) on its next flush, so nothing is
// lost while the ring covers the gap.
//
// Concurrency: Write and Close are called by one goroutine (the pump);
// Stats may be called from any goroutine. A supervisor goroutine per
// Client probes and restarts the plugin.
type Client struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	cur     *conn // nil while down
	closed  bool
	devices []record.Device // identities known to the last connection
	remote  []record.Field  // the plugin output's counters, from its newest Health answer
	// probes numbers the health probes as they start (watch, Finish);
	// remoteProbe is the probe whose answer remote holds, so that an
	// answer to an older probe that arrives late does not replace it.
	probes, remoteProbe uint64
	// base sums the counters (Int fields) of the output's earlier
	// processes, so that what ReportStats reports is cumulative across
	// restarts; baseKeys keeps their order.
	base     map[string]float64
	baseKeys []string
	storm    crashWindow // restarts within the storm window

	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	starts  atomic.Uint64
	crashes atomic.Uint64
	wedges  atomic.Uint64
	memory  atomic.Uint64 // restarts over MemoryMax
	lastRst atomic.Int64
	failed  atomic.Uint64 // restarts that failed
	// logs is the log rate limit of this Client's own processes.
	logs *logLimit
	// instance names this Client's output in its SharedProcess (fixed:
	// a restart configures the same instance in the new process).
	instance string
	// isolated is set once the output wedged in a shared process and was
	// moved to a process of its own (opts.Shared is then that process's).
	// The supervisor goroutine swaps opts.Shared under mu, which Stats
	// reads it under; logBase (under mu) keeps the log lines the processes
	// given up had dropped for this output.
	isolated atomic.Bool
	logBase  uint64
}

// conn is one running plugin process.
type conn struct {
	pc      *plugin.Client
	rc      *rpc.Client
	pid     int
	started time.Time
	// hung is closed when a Write ran past CallTimeout: the process is
	// treated as wedged (killed by pid and restarted) even if it still
	// answers health probes.
	hung     chan struct{}
	hungOnce sync.Once
	// rss is the resident memory over MemoryMax that ended the process
	// (0: none); set and read by the supervisor goroutine.
	rss uint64
	// shared is the SharedProcess's process that pc runs, nil for a
	// process of this Client's own.
	shared *sharedProc
}

func (cn *conn) markHung() { cn.hungOnce.Do(func() { close(cn.hung) }) }

// Start starts the plugin, performs the handshake and configures it. The
// error is a *rpc.ConfigError (see ConfigErrors) when the plugin refused
// keys of its block. After Start, the client supervises the plugin until
// Close.
func Start(opts Options) (*Client, error) {
	opts.withDefaults()
	if opts.Command == nil && opts.Shared == nil {
		return nil, errors.New("plugins: no command")
	}
	c := &Client{opts: opts, log: opts.Logger, kick: make(chan struct{}, 1), stop: make(chan struct{}),
		done: make(chan struct{}), storm: crashWindow{window: opts.StormWindow, limit: opts.StormRestarts},
		logs: newLogLimit(opts.Now)}
	if opts.Shared != nil {
		c.instance = opts.Shared.instance()
	}
	cn, err := c.start()
	if err != nil {
		return nil, err
	}
	c.cur = cn
	go c.supervise(cn)
	return c, nil
}

// KeyErrors returns the key problems of a Start error from a plugin that
// refused its config block (keys relative to the block), or nil.
func KeyErrors(err error) []rpc.KeyError {
	var ce *rpc.ConfigError
	if errors.As(err, &ce) {
		return ce.Errors
	}
	return nil
}

// baseEnv returns the variables every plugin gets from the host's
// environment: PATH, TZ and the locale.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "PATH" || name == "TZ" || name == "LANG" || name == "LANGUAGE" || strings.HasPrefix(name, "LC_") {
			env = append(env, kv)
		}
	}
	return env
}

func (c *Client) start() (*conn, error) {
	if c.opts.Shared != nil {
		return c.startShared()
	}
	cmd := c.opts.Command()
	path := cmd.Path
	var pin *pinned
	if c.opts.SHA256 != "" {
		var err error
		if pin, err = pinExecutable(cmd, c.opts.SHA256); err != nil {
			return nil, fmt.Errorf("start plugin %s: %w", path, err)
		}
		defer pin.close()
		if c.opts.afterPin != nil {
			c.opts.afterPin()
		}
	}
	env := cmd.Env
	if !c.opts.InheritEnv {
		env = append(baseEnv(), env...)
	} else {
		env = append(os.Environ(), env...)
	}
	cmd.Env = withParentPID(append(env, c.opts.Env...))
	pc := newPluginProcess(cmd, c.opts.StartTimeout, newHCLog(c.log, path), c.logs, c.log)
	fail := func(err error) (*conn, error) {
		c.killProcess(pc, cmd)
		return nil, err
	}
	cp, err := pc.Client()
	if err != nil {
		return fail(fmt.Errorf("start plugin %s: %w", path, err))
	}
	if pin != nil {
		if err := pin.unchanged(path); err != nil {
			return fail(fmt.Errorf("start plugin %s: %w", path, err))
		}
	}
	oc, err := dispenseOutput(cp)
	if err != nil {
		return fail(fmt.Errorf("start plugin %s: %w", path, err))
	}
	rc, err := c.configure(oc)
	if err != nil {
		if pc.Exited() {
			err = fmt.Errorf("%w (plugin exited)", err)
		}
		return fail(err)
	}
	c.starts.Add(1)
	return &conn{pc: pc, rc: rc, pid: cmd.Process.Pid, started: time.Now(), hung: make(chan struct{})}, nil
}

// startShared configures the output as an instance in the SharedProcess's
// process, started if none runs.
func (c *Client) startShared() (*conn, error) {
	sp := c.opts.Shared
	p, err := sp.acquire(c.opts.StartTimeout, c.opts.CallTimeout)
	if err != nil {
		return nil, err
	}
	rc, err := c.configure(rpc.Instance(p.oc, c.instance))
	if err != nil {
		if p.pc.Exited() {
			err = fmt.Errorf("%w (shared plugin process exited)", err)
		}
		sp.release(p, c.opts.CallTimeout)
		return nil, err
	}
	c.starts.Add(1)
	return &conn{pc: p.pc, rc: rc, pid: p.pid, started: time.Now(), hung: make(chan struct{}), shared: p}, nil
}

// configure hands the output its block over oc; the device identities
// known so far are sent again with the first batch.
func (c *Client) configure(oc proto.OutputClient) (*rpc.Client, error) {
	c.mu.Lock()
	devs := c.devices
	c.mu.Unlock()
	rc := rpc.NewClient(oc, devs)
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.CallTimeout)
	defer cancel()
	err := rc.Configure(ctx, rpc.ConfigureInput{Name: c.opts.Name, Kind: c.opts.Kind, Config: c.opts.Config,
		Host: c.opts.Host, GlobalTags: c.opts.GlobalTags, Catalog: c.opts.Catalog})
	if err != nil {
		return nil, err
	}
	return rc, nil
}

// discard ends cn after it was found dead or wedged: its own process is
// killed with its process group; a shared process is killed too (every
// Client on it restarts: it crashed, does not answer, or served only this
// output) and this Client's reference to it dropped.
func (c *Client) discard(cn *conn) {
	if cn.shared != nil {
		c.opts.Shared.kill(cn.shared)
		go c.opts.Shared.release(cn.shared, c.opts.CallTimeout)
		return
	}
	killGroup(cn.pid)
	go endProcess(cn.pc, cn.pid, c.opts.CallTimeout)
}

// abandon gives up cn's instance alone, for a Client whose output wedged
// in a process that serves other outputs and still answers: the process is
// asked to forget the instance (its blocked call ends whenever it ends),
// this Client's reference to it is dropped, and the output's next start is
// in a process of its own, which no other output joins.
func (c *Client) abandon(cn *conn) {
	c.mu.Lock()
	sp := c.opts.Shared
	c.logBase += sp.logs.droppedFor(c.opts.Name)
	c.opts.Shared = sp.isolated()
	c.mu.Unlock()
	c.isolated.Store(true)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.CallTimeout)
		_ = cn.rc.Close(ctx)
		cancel()
		sp.release(cn.shared, c.opts.CallTimeout)
	}()
}

// end ends cn's process once its output is closed: a process of its own
// is asked to exit (killed by pid when it lingers); a shared process loses
// this Client's reference and ends with the last one.
func (c *Client) end(cn *conn) {
	if cn.shared != nil {
		c.opts.Shared.release(cn.shared, c.opts.CallTimeout)
		return
	}
	if !endProcess(cn.pc, cn.pid, c.opts.CallTimeout) {
		c.log.Warn(leftPipesHeld, "pid", cn.pid)
	}
}

// leftPipesHeld is logged when endProcess gave up on a plugin's cleanup.
const leftPipesHeld = "plugin killed with its process group, but a process it started outside the group still holds its output; not waiting for it"

// killProcess ends a plugin process at once (killPluginProcess), waiting
// up to CallTimeout for go-plugin's cleanup.
func (c *Client) killProcess(pc *plugin.Client, cmd *exec.Cmd) {
	killPluginProcess(pc, cmd, c.opts.CallTimeout)
}

// Write sends b to the plugin.
func (c *Client) Write(ctx context.Context, b *record.Batch) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return record.ErrClosed
	}
	cn := c.cur
	c.mu.Unlock()
	if cn == nil {
		return fmt.Errorf("plugin %s: restarting: %w", c.opts.Name, record.ErrUnavailable)
	}
	wctx, cancel := context.WithTimeout(ctx, c.opts.CallTimeout)
	defer cancel()
	err := cn.rc.Write(wctx, b)
	if err != nil {
		if c.pastCallTimeout(ctx, wctx) {
			// Past CallTimeout: a plugin whose Write blocks can still pass
			// health probes, so the Write itself marks it wedged. The
			// batch is kept (ErrUnavailable) for the restarted plugin.
			cn.markHung()
			c.mu.Lock()
			if c.cur == cn {
				c.cur = nil // no more Writes to it while the supervisor replaces it
			}
			c.mu.Unlock()
			return fmt.Errorf("plugin %s: write ran past call_timeout %v: restarting the plugin: %w",
				c.opts.Name, c.opts.CallTimeout, record.ErrUnavailable)
		}
		if rpc.IsTransport(err) {
			c.check()
		}
		return fmt.Errorf("plugin %s: %w", c.opts.Name, err)
	}
	return nil
}

// pastCallTimeout reports whether a Write ended because wctx's own
// deadline (CallTimeout) passed, not the caller's. (gRPC's deadline timer
// can answer before wctx.Err is set: the clock decides.)
func (c *Client) pastCallTimeout(ctx, wctx context.Context) bool {
	dl, _ := wctx.Deadline()
	if pdl, ok := ctx.Deadline(); ok && !pdl.After(dl) {
		return false // the caller's deadline came first
	}
	return ctx.Err() == nil && !time.Now().Before(dl)
}

// check asks the supervisor to probe the plugin now.
func (c *Client) check() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Close closes the plugin's output (bounded by CallTimeout), ends the
// process and the supervision. A second Close returns nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	c.mu.Lock()
	cn := c.cur
	c.cur = nil
	c.mu.Unlock()
	if cn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.CallTimeout)
	err := cn.rc.Close(ctx)
	cancel()
	if err == nil {
		// the output's final counters, its last flush included
		hctx, cancel := context.WithTimeout(context.Background(), c.opts.HealthTimeout)
		if stats, herr := cn.rc.HealthStats(hctx); herr == nil || errors.Is(herr, rpc.ErrNotHealthy) {
			c.mu.Lock()
			c.remote = stats
			c.mu.Unlock()
		}
		cancel()
	}
	c.end(cn)
	if err != nil {
		return fmt.Errorf("plugin %s: %w", c.opts.Name, err)
	}
	return nil
}

// Finish implements record.Finisher: it reads the plugin output's own
// counters now (a health probe, bounded by HealthTimeout and ctx), so that
// ReportStats counts every batch the plugin took, the final flush's
// included, instead of as of the last periodic probe (up to one
// health_interval old). A plugin that is not running keeps the counters of
// its last answer.
func (c *Client) Finish(ctx context.Context) error {
	c.mu.Lock()
	cn := c.cur
	if c.closed || cn == nil {
		c.mu.Unlock()
		return fmt.Errorf("plugin %s: not running: its counters are as of its last health answer", c.opts.Name)
	}
	c.mu.Unlock()
	probe := c.startProbe()
	hctx, cancel := context.WithTimeout(ctx, c.opts.HealthTimeout)
	defer cancel()
	stats, err := cn.rc.HealthStats(hctx)
	if err != nil && !errors.Is(err, rpc.ErrNotHealthy) {
		return fmt.Errorf("plugin %s: read its counters: %w", c.opts.Name, err)
	}
	c.mu.Lock()
	if c.cur == cn { // not replaced meanwhile (its counters folded into base)
		c.setRemote(probe, stats)
	}
	c.mu.Unlock()
	return nil
}

// startProbe numbers a health probe about to be sent.
func (c *Client) startProbe() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes++
	return c.probes
}

// setRemote keeps the counters of probe's answer unless a later probe's
// answer is kept already. The caller holds c.mu.
func (c *Client) setRemote(probe uint64, stats []record.Field) {
	if probe > c.remoteProbe {
		c.remote, c.remoteProbe = stats, probe
	}
}

// Stats returns the supervision counters.
func (c *Client) Stats() Stats {
	s := Stats{Starts: c.starts.Load(), Crashes: c.crashes.Load(), Wedges: c.wedges.Load(), MemoryRestarts: c.memory.Load(),
		LastRestart: time.Duration(c.lastRst.Load()), StartFailures: c.failed.Load(), Isolated: c.isolated.Load(),
		LogDropped: c.logs.total()}
	c.mu.Lock()
	if sp := c.opts.Shared; sp != nil {
		s.LogDropped = c.logBase + sp.logs.droppedFor(c.opts.Name)
	}
	if c.cur != nil {
		s.PID = c.cur.pid
	}
	s.Failing = c.storm.failing(c.opts.Now())
	c.mu.Unlock()
	return s
}

// ReportStats implements record.StatsReporter: the supervision counters
// (plugin_starts, plugin_restarts, plugin_crashes, plugin_wedges,
// plugin_memory_restarts, plugin_last_restart_ns, plugin_start_failures, plugin_failing: 1
// during a crash storm, and plugin_log_dropped) followed by the counters the plugin's output
// reported with its newest Health answer (at most one health interval
// old; after Finish, read after the final flush; after Close, the final
// ones, read once the output has closed).
// Those counters are cumulative across restarts: each process's last
// reported counters are added to what the new one reports (what a crashed
// process counted after its last answer is not known); a gauge
// (record.Field.Gauge, such as the NATS output's held) is the newest
// process's alone.
func (c *Client) ReportStats(dst []record.Field) []record.Field {
	s := c.Stats()
	dst = append(dst, record.IntField("plugin_starts", s.Starts), record.IntField("plugin_restarts", s.Crashes+s.Wedges+s.MemoryRestarts),
		record.IntField("plugin_crashes", s.Crashes), record.IntField("plugin_wedges", s.Wedges),
		record.IntField("plugin_memory_restarts", s.MemoryRestarts),
		record.IntField("plugin_last_restart_ns", uint64(s.LastRestart)),
		record.IntField("plugin_start_failures", s.StartFailures), record.GaugeField("plugin_failing", b2u(s.Failing)),
		record.IntField("plugin_log_dropped", s.LogDropped))
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[string]bool, len(c.remote))
	for _, f := range c.remote {
		seen[f.Key] = true
		if f.Int && !f.Gauge {
			f.Value += c.base[f.Key]
		}
		dst = append(dst, f)
	}
	for _, k := range c.baseKeys {
		if !seen[k] { // the new process has not answered a probe yet
			dst = append(dst, record.Field{Key: k, Value: c.base[k], Int: true})
		}
	}
	return dst
}

// foldRemote adds the counters of a process that is gone to the base; its
// gauges are not added (what it held went with it). The caller holds c.mu.
func (c *Client) foldRemote() {
	for _, f := range c.remote {
		if !f.Int || f.Gauge {
			continue
		}
		if c.base == nil {
			c.base = map[string]float64{}
		}
		if _, ok := c.base[f.Key]; !ok {
			c.baseKeys = append(c.baseKeys, f.Key)
		}
		c.base[f.Key] += f.Value
	}
	c.remote = nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// supervise probes the current plugin and restarts it when it dies or
// wedges, until Close.
func (c *Client) supervise(cn *conn) {
	defer close(c.done)
	bo := backoff.Backoff{Initial: c.opts.BackoffMin, Max: c.opts.BackoffMax}
	for {
		if !c.watch(cn) {
			return // closing: Close ends the process
		}
		detected := time.Now()
		if cn.rss == 0 && cn.shared != nil {
			cn.rss = cn.shared.overMemory.Load() // killed for another Client's finding
		}
		c.mu.Lock()
		c.cur = nil
		c.devices = cn.rc.Devices()
		c.foldRemote()
		c.mu.Unlock()
		// a process that just died may not be reaped yet: give it a moment
		// before calling it wedged
		crashed := cn.rss == 0 && cn.pc.Exited()
		for wait := time.Now().Add(200 * time.Millisecond); cn.rss == 0 && !crashed && time.Now().Before(wait); crashed = cn.pc.Exited() {
			time.Sleep(5 * time.Millisecond)
		}
		switch {
		case cn.rss > 0:
			c.memory.Add(1)
		case crashed:
			c.crashes.Add(1)
		default:
			c.wedges.Add(1)
		}
		// A wedged output in a process that serves others and still
		// answers is given up alone; otherwise the process goes (a
		// process over its memory limit goes whoever shares it).
		alone := cn.rss == 0 && !crashed && cn.shared != nil && c.opts.Shared.others(cn.shared) &&
			cn.shared.responsive(c.opts.HealthTimeout)
		c.mu.Lock()
		storm := c.storm.add(c.opts.Now())
		c.mu.Unlock()
		if storm {
			c.log.Error("plugin crash storm: marked failing; restarts continue every restart_delay_max at most",
				"restarts", c.opts.StormRestarts, "within", c.opts.StormWindow, "restart_delay_max", c.opts.BackoffMax)
		}
		if alone {
			c.abandon(cn)
		} else {
			c.discard(cn)
		}
		if time.Since(cn.started) >= c.opts.ResetAfter {
			bo.Reset()
		}
		reason := "wedged (alive, not answering): killed"
		select {
		case <-cn.hung:
			reason = "wedged (a write ran past call_timeout): killed"
		default:
		}
		attrs := []any{"pid", cn.pid, "backoff", bo.Delay()}
		switch {
		case cn.rss > 0:
			reason = "over its memory limit: killed"
			limit := uint64(c.opts.MemoryMax)
			if cn.shared != nil {
				limit = c.opts.Shared.memoryMax()
				reason = "over its memory limit: the process it shares with other outputs killed"
			}
			attrs = append(attrs, "rss_bytes", cn.rss, "memory_max_bytes", limit)
		case crashed:
			reason = "exited"
		}
		if alone {
			reason = strings.TrimSuffix(reason, ": killed") +
				": given up alone (the process it shared serves the other outputs on), restarted in a process of its own"
		}
		c.log.Warn("plugin "+reason+"; restarting", attrs...)
		lastErr := ""
		for {
			select {
			case <-c.stop:
				return
			case <-time.After(bo.Delay()):
			}
			bo.Next()
			next, err := c.start()
			if err == nil {
				cn = next
				break
			}
			// The same failure again (a refused binary stays refused) is
			// logged once; Stats.StartFailures counts every one.
			if c.failed.Add(1); err.Error() != lastErr {
				c.log.Warn("plugin restart failed; retrying", "err", err, "backoff", bo.Delay())
				lastErr = err.Error()
			} else {
				c.log.Debug("plugin restart failed; retrying", "err", err, "backoff", bo.Delay())
			}
		}
		c.lastRst.Store(int64(time.Since(detected)))
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.cur = cn
		}
		c.mu.Unlock()
		if closed {
			if cn.shared != nil {
				c.end(cn)
			} else {
				c.killProcess(cn.pc, &exec.Cmd{Process: &os.Process{Pid: cn.pid}})
			}
			return
		}
		c.log.Info("plugin restarted", "pid", cn.pid, "took", time.Since(detected))
	}
}

// watch probes cn until it is found dead or wedged (true) or the client
// closes (false).
func (c *Client) watch(cn *conn) bool {
	t := time.NewTimer(c.opts.HealthInterval)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-c.stop:
			return false
		case <-cn.hung:
			return true
		case <-t.C:
		case <-c.kick:
		}
		if cn.pc.Exited() {
			return true
		}
		if c.opts.MemoryMax > 0 && cn.shared == nil {
			if rss, ok := processRSS(cn.pid); ok && rss > uint64(c.opts.MemoryMax) {
				cn.rss = rss
				return true
			}
		}
		if cn.shared != nil {
			if rss, over := c.opts.Shared.overLimit(cn.shared); over {
				cn.rss = rss
				return true
			}
		}
		probe := c.startProbe()
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.HealthTimeout)
		stats, err := cn.rc.HealthStats(ctx)
		cancel()
		if err == nil || errors.Is(err, rpc.ErrNotHealthy) {
			c.mu.Lock()
			c.setRemote(probe, stats)
			c.mu.Unlock()
		}
		switch {
		case err == nil:
			fails = 0
		case errors.Is(err, rpc.ErrNotHealthy):
			fails = 0 // alive and answering: its sink is its own business
			c.log.Debug("plugin reports unhealthy", "err", err)
		default:
			if cn.pc.Exited() {
				return true
			}
			fails++
			if fails >= healthFailures {
				return true
			}
		}
		next := c.opts.HealthInterval
		if fails > 0 {
			next = min(next, c.opts.HealthTimeout/2+10*time.Millisecond)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}
