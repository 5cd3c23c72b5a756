package appconfig

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/pipeline/buffer"
	"github.com/gpusampler/gpusampler/internal/pipeline/deadletter"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
	"github.com/gpusampler/gpusampler/sampler/simprofile"
)

// Defaults of the agent section.
const (
	DefaultStatsInterval = 10 * time.Second
)

// Config is a whole config file as plain data. It holds no devices,
// connections or goroutines; the caller builds those from it.
type Config struct {
	// File is the name the config was read from (used in messages).
	File       string
	Agent      Agent
	GlobalTags map[string]string
	Sampler    Sampler
	// Attribution is the [attribution] section.
	Attribution Attribution
	// Outputs in file order.
	Outputs []*Output
}

// Attribution is the [attribution] section: where to find whose work runs
// on each GPU (Kubernetes pod, HPC job). Every source is off by default.
type Attribution struct {
	// Kubernetes reads the kubelet's pod-resources API at PodResourcesSocket.
	Kubernetes         bool
	PodResourcesSocket string
	// ContainerLogDir is the kubelet's container log link directory, from
	// which, with Kubernetes, each GPU process gets its own pod labels
	// ("" off).
	ContainerLogDir string
	// HPCJobMappingDir is dcgm-exporter's job-mapping directory ("" off).
	HPCJobMappingDir string
	// SlurmCgroups detects the job from the GPU processes' Slurm cgroups.
	SlurmCgroups bool
	// RefreshInterval is how often the sources are read again.
	RefreshInterval time.Duration
	// ProcRoot is the host's /proc (a container mounts it elsewhere).
	ProcRoot string
	// Accounting keeps per-job accounts (package internal/accounting):
	// energy, busy and idle-allocated time, peak memory per owner per GPU,
	// emitted every AccountingInterval and when an owner leaves a GPU.
	Accounting         bool
	AccountingInterval time.Duration
}

// Attribution defaults and limits.
const (
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	DefaultContainerLogDir    = "/var/log/containers"
	DefaultAttributionRefresh = 10 * time.Second
	MinAttributionRefresh     = time.Second
	DefaultAccountingInterval = 10 * time.Second
	MinAccountingInterval     = time.Second
)

// Agent is the [agent] section.
type Agent struct {
	// Hostname overrides the machine's host name in every record.
	Hostname string
	// FlushInterval is every output's default flush interval.
	FlushInterval time.Duration
	// StatsInterval is how often self-metrics go to the outputs.
	StatsInterval time.Duration
	// SelfMetrics sends self-metrics through every output.
	SelfMetrics bool
	// StateDir holds what a restart needs (the drain cursors, so that a
	// restart delivers no sample twice); empty means DefaultStateDir.
	StateDir string
	// ShutdownTimeout bounds the outputs' final flush at exit (see
	// sampler.Config.ShutdownTimeout).
	ShutdownTimeout time.Duration
}

// DefaultStateDir is the state directory when [agent] state_dir is not
// set: $STATE_DIRECTORY (set by systemd's StateDirectory=; the first of
// its list), else /var/lib/gpusampler when running as root, else
// $XDG_STATE_HOME/gpusampler, else ~/.local/state/gpusampler.
func DefaultStateDir() (string, error) {
	if d, _, _ := strings.Cut(os.Getenv("STATE_DIRECTORY"), ":"); d != "" {
		return d, nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/gpusampler", nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "gpusampler"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("state dir: %w (set [agent] state_dir)", err)
	}
	return filepath.Join(home, ".local", "state", "gpusampler"), nil
}

// Sampler is the [sampler] section: what is sampled, how often, from which
// backend.
type Sampler struct {
	// Backend is "auto", "nvml" or "sim".
	Backend string
	// Profile, GPUs and Seed configure the simulator.
	Profile string
	GPUs    int
	Seed    uint64
	// Devices limits sampling to these devices, each an index ("0") or a
	// UUID ("GPU-..."); empty means all.
	Devices []string
	// DrainInterval, SecondaryDrainInterval, PrimaryBuffers,
	// FieldInterval, SlowInterval, RareInterval and GPMInterval: see
	// sampler.Config.
	DrainInterval          time.Duration
	SecondaryDrainInterval time.Duration
	PrimaryBuffers         []catalog.BufferType
	FieldInterval          time.Duration
	SlowInterval           time.Duration
	RareInterval           time.Duration
	GPMInterval            time.Duration
	// RingSize is the per-device ring capacity in samples (each output's
	// lane in a ring holds that many): see sampler.DefaultRingSize.
	RingSize int
	// Processes turns per-process sampling on (default) or off;
	// ProcessInterval is its period (≥ sampler.MinProcessInterval);
	// ProcessCmdline adds command lines (opt-in), truncated to
	// ProcessCmdlineMax bytes. See sampler.Config.
	Processes         bool
	ProcessInterval   time.Duration
	ProcessCmdline    bool
	ProcessCmdlineMax int
	// Include and Exclude are glob patterns (path.Match) over metric names
	// and groups: what is sampled at all.
	Include, Exclude []string
}

// Output is one [[outputs.KIND]] block: what the kind's Build sees
// (outputs.Block) and the settings the agent applies around the output.
type Output struct {
	outputs.Block
	// Include and Exclude select metrics by name or group (globs).
	Include, Exclude []string
	// FlushInterval and MaxBatch configure the pump, with the Block's
	// WriteTimeout.
	FlushInterval time.Duration
	MaxBatch      int
	// Buffer configures the optional per-output buffer between the pump and
	// the output (Kind "" or "none": none).
	Buffer buffer.Config
	// DeadLetterDir, when set, keeps every batch the output refuses as
	// permanent in the file NAME.deadletter there, up to
	// DeadLetterMaxBytes (see internal/pipeline/deadletter).
	DeadLetterDir      string
	DeadLetterMaxBytes int64
}

// Buffer defaults.
const (
	DefaultMemoryBufferBytes   = 64 << 20
	DefaultMemoryBufferRecords = 2_000_000
	DefaultDiskBufferBytes     = 1 << 30
)

// parseBuffer reads an output block's buffer keys.
func parseBuffer(bt *config.Table) buffer.Config {
	var c buffer.Config
	bt.OneOf("buffer", &c.Kind, "none", "memory", "disk")
	switch c.Kind {
	case "memory":
		c.MaxBytes, c.MaxRecords = DefaultMemoryBufferBytes, DefaultMemoryBufferRecords
	case "disk":
		c.MaxBytes = DefaultDiskBufferBytes
	}
	maxBytes := int(c.MaxBytes)
	bt.Int("buffer_max_bytes", &maxBytes, 1<<10, 1<<50)
	c.MaxBytes = int64(maxBytes)
	bt.Int("buffer_max_records", &c.MaxRecords, 0, 1<<40)
	bt.String("buffer_dir", &c.Dir)
	bt.Duration("buffer_fsync_interval", &c.FsyncInterval)
	bt.Duration("retry_initial", &c.RetryInitial)
	bt.Duration("retry_max", &c.RetryMax)
	bt.Duration("buffer_close_timeout", &c.CloseTimeout)
	switch c.Kind {
	case "", "none":
		for _, k := range []string{"buffer_max_bytes", "buffer_max_records", "buffer_dir", "buffer_fsync_interval", "retry_initial", "retry_max", "buffer_close_timeout"} {
			if bt.Has(k) {
				bt.Errorf(k, "set, but buffer is %q: set buffer = \"memory\" or \"disk\"", cmp.Or(c.Kind, "none"))
			}
		}
	case "memory":
		if c.MaxRecords == 0 {
			bt.Errorf("buffer_max_records", "must be positive for a memory buffer")
		}
	case "disk":
		if c.Dir == "" {
			bt.Errorf("buffer", "a disk buffer needs buffer_dir (a directory of its own per output)")
		}
		if c.MaxBytes < buffer.MinDiskBytes {
			bt.Errorf("buffer_max_bytes", "%d is too small for a disk buffer (want at least %d: its files are counted in whole 4 KiB blocks, with room for the cursor and a segment)",
				c.MaxBytes, buffer.MinDiskBytes)
		}
	}
	if c.RetryInitial > 0 && c.RetryMax > 0 && c.RetryMax < c.RetryInitial {
		bt.Errorf("retry_max", "%v is less than retry_initial %v", c.RetryMax, c.RetryInitial)
	}
	return c
}

// PumpOptions returns the output's pump settings.
func (o *Output) PumpOptions() sampler.PumpOptions {
	return sampler.PumpOptions{FlushInterval: o.FlushInterval, MaxBatch: o.MaxBatch,
		WriteTimeout: o.WriteTimeout, Select: Selector(o.Include, o.Exclude)}
}

// Same reports whether o and p configure the same output: same kind, name,
// effective pump settings and block content. An unchanged output keeps
// running across a reload.
func (o *Output) Same(p *Output) bool {
	return o.Kind == p.Kind && o.Name == p.Name && o.FlushInterval == p.FlushInterval &&
		o.MaxBatch == p.MaxBatch && o.WriteTimeout == p.WriteTimeout && o.Aggregate == p.Aggregate &&
		reflect.DeepEqual(o.Raw, p.Raw)
}

// Selector returns the metric filter for include/exclude patterns (nil when
// both are empty: everything). A metric is selected when it matches an
// include pattern (or there is none) and no exclude pattern; a pattern
// matches a metric's name or its group.
func Selector(include, exclude []string) func(*catalog.Metric) bool {
	return catalog.Select(include, exclude)
}

// DeviceFilter returns the device filter for Sampler.Devices (nil: all),
// sampler.DevicesNamed's.
func (s *Sampler) DeviceFilter() func(record.Device) bool {
	return sampler.DevicesNamed(s.Devices)
}

// Options configure parsing.
type Options struct {
	// Registry knows the output kinds; blocks of other kinds are errors.
	Registry *outputs.Registry
	// LookupEnv resolves ${NAME}; nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Catalog checks include/exclude patterns; nil means
	// catalog.Default().
	Catalog *catalog.Catalog
}

// Load reads (ReadFile: a regular file of at most MaxFileBytes) and parses
// the file at name.
func Load(name string, opts Options) (*Config, error) {
	data, err := ReadFile(name)
	if err != nil {
		return nil, err
	}
	return Parse(name, data, opts)
}

// Parse decodes and validates a config document; file names it in errors.
// The error, if any, is an *Error (syntax) or Errors (one per bad key), each
// line "file:line: key: message". Parse does no I/O beyond reading the
// environment.
func Parse(file string, data []byte, opts Options) (*Config, error) {
	if opts.Catalog == nil {
		opts.Catalog = catalog.Default()
	}
	if opts.Registry == nil {
		opts.Registry = outputs.NewRegistry()
	}
	root, err := config.Decode(file, data, opts.LookupEnv)
	if err != nil {
		return nil, err
	}
	c := &Config{File: file}
	c.Agent = parseAgent(root.Sub("agent"))
	c.GlobalTags = parseGlobalTags(root.Sub("global_tags"))
	c.Sampler = parseSampler(root.Sub("sampler"), opts.Catalog)
	c.Attribution = parseAttribution(root.Sub("attribution"))
	c.Outputs = parseOutputs(root.Sub("outputs"), c.Agent, opts)
	checkShared(c.Outputs)
	root.Finish()
	if err := root.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// parseGlobalTags takes [global_tags]: every key and value goes into
// every record's tags (line protocol, NATS subjects, Prometheus labels), so
// each must be writable as a line-protocol tag (CheckTagText).
func parseGlobalTags(t *config.Table) map[string]string {
	tags := t.StringMap()
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if t.HasErr(k) {
			continue // not a string, or an undefined variable: said already
		}
		if err := CheckTagText(k); err != nil {
			t.Errorf(k, "tag key %q: %v", k, err)
		} else if err := CheckTagText(tags[k]); err != nil {
			t.Errorf(k, "tag value %q: %v", tags[k], err)
		}
	}
	return tags
}

// CheckTagText reports why s cannot be written as a line-protocol tag key
// or value — the host tag, the [global_tags] — and nil when it can. Line
// protocol (InfluxDB, Telegraf, stdout's influx format) has no empty tag
// values and no escape for control characters (a newline ends the line)
// or for a trailing backslash; an encoder would have to skip every line
// carrying such a tag.
func CheckTagText(s string) error {
	switch {
	case s == "":
		return errors.New("empty (line protocol has no empty tags: remove the key or give it a value)")
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.HasSuffix(s, `\`):
		return errors.New("ends in a backslash, which line protocol cannot carry")
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("control character %q at byte %d (newlines, tabs and other control characters cannot be written in line protocol)", rune(c), i)
		}
	}
	return nil
}

func parseAgent(t *config.Table) Agent {
	a := Agent{FlushInterval: sampler.DefaultFlushInterval, StatsInterval: DefaultStatsInterval, SelfMetrics: true,
		ShutdownTimeout: sampler.DefaultShutdownTimeout}
	t.String("hostname", &a.Hostname)
	if a.Hostname != "" { // "" means the machine's host name
		if err := CheckTagText(a.Hostname); err != nil {
			t.Errorf("hostname", "%q: %v", a.Hostname, err)
		}
	}
	t.Duration("flush_interval", &a.FlushInterval)
	t.Duration("stats_interval", &a.StatsInterval)
	t.Bool("self_metrics", &a.SelfMetrics)
	t.String("state_dir", &a.StateDir)
	t.Duration("shutdown_timeout", &a.ShutdownTimeout)
	t.Finish()
	return a
}

func parseAttribution(t *config.Table) Attribution {
	a := Attribution{PodResourcesSocket: DefaultPodResourcesSocket, ContainerLogDir: DefaultContainerLogDir, RefreshInterval: DefaultAttributionRefresh, ProcRoot: "/proc",
		AccountingInterval: DefaultAccountingInterval}
	t.Bool("kubernetes", &a.Kubernetes)
	t.String("pod_resources_socket", &a.PodResourcesSocket)
	if a.Kubernetes && a.PodResourcesSocket == "" {
		t.Errorf("pod_resources_socket", "empty: kubernetes = true needs the kubelet's pod-resources socket")
	}
	t.String("container_log_dir", &a.ContainerLogDir)
	t.String("hpc_job_mapping_dir", &a.HPCJobMappingDir)
	t.Bool("slurm_cgroups", &a.SlurmCgroups)
	t.Duration("refresh_interval", &a.RefreshInterval)
	if a.RefreshInterval < MinAttributionRefresh {
		t.Errorf("refresh_interval", "%v: must be at least %v", a.RefreshInterval, MinAttributionRefresh)
	}
	t.String("proc_root", &a.ProcRoot)
	if a.ProcRoot == "" {
		t.Errorf("proc_root", "empty: must name the host's /proc")
	}
	t.Bool("accounting", &a.Accounting)
	t.Duration("accounting_interval", &a.AccountingInterval)
	if a.AccountingInterval < MinAccountingInterval {
		t.Errorf("accounting_interval", "%v: must be at least %v", a.AccountingInterval, MinAccountingInterval)
	}
	t.Finish()
	return a
}

func parseSampler(t *config.Table, cat *catalog.Catalog) Sampler {
	s := Sampler{Backend: "auto", Profile: simprofile.Default, GPUs: 2, Seed: 1,
		DrainInterval: sampler.DefaultDrainInterval, PrimaryBuffers: sampler.DefaultPrimaryBuffers(),
		FieldInterval: sampler.DefaultFieldInterval, SlowInterval: sampler.DefaultSlowInterval, RareInterval: sampler.DefaultRareInterval,
		GPMInterval: sampler.DefaultGPMInterval, RingSize: sampler.DefaultRingSize,
		Processes: true, ProcessInterval: sampler.DefaultProcessInterval, ProcessCmdlineMax: sampler.DefaultCmdlineMax}
	t.OneOf("backend", &s.Backend, "auto", "nvml", "sim")
	t.OneOf("profile", &s.Profile, simprofile.Names()...)
	t.Int("gpus", &s.GPUs, 1, 64)
	t.Uint64("seed", &s.Seed)
	t.Strings("devices", &s.Devices)
	for i, d := range s.Devices {
		if _, err := strconv.Atoi(d); err != nil && !strings.HasPrefix(d, "GPU-") && !strings.HasPrefix(d, "MIG-") {
			t.Errorf("devices["+strconv.Itoa(i)+"]", "%q is neither an index nor a UUID (GPU-...)", d)
		}
	}
	t.Duration("drain_interval", &s.DrainInterval)
	s.SecondaryDrainInterval = max(sampler.DefaultSecondaryDrainInterval, s.DrainInterval)
	t.Duration("secondary_drain_interval", &s.SecondaryDrainInterval)
	if t.Has("secondary_drain_interval") && s.SecondaryDrainInterval < s.DrainInterval {
		t.Errorf("secondary_drain_interval", "%v: must be at least drain_interval (%v)", s.SecondaryDrainInterval, s.DrainInterval)
	}
	var primary []string
	t.Strings("primary_buffers", &primary)
	if t.Has("primary_buffers") {
		s.PrimaryBuffers = []catalog.BufferType{}
		for i, name := range primary {
			typ, ok := catalog.ParseBufferType(name)
			if !ok {
				t.Errorf("primary_buffers["+strconv.Itoa(i)+"]", "%q is not a sample buffer (want one of: %s)", name, strings.Join(catalog.BufferTypeNames(), ", "))
				continue
			}
			if !slices.Contains(s.PrimaryBuffers, typ) {
				s.PrimaryBuffers = append(s.PrimaryBuffers, typ)
			}
		}
	}
	t.Duration("field_interval", &s.FieldInterval)
	t.Duration("slow_interval", &s.SlowInterval)
	t.Duration("rare_interval", &s.RareInterval)
	t.Duration("gpm_interval", &s.GPMInterval)
	if t.Has("gpm_interval") && s.GPMInterval < sampler.MinGPMInterval {
		t.Errorf("gpm_interval", "%v: must be at least %v (GPM snapshots need that much apart)", s.GPMInterval, sampler.MinGPMInterval)
	}
	if t.Has("rare_interval") && s.RareInterval < s.SlowInterval {
		t.Errorf("rare_interval", "%v: must be at least slow_interval (%v)", s.RareInterval, s.SlowInterval)
	}
	if t.Has("slow_interval") && s.SlowInterval < sampler.MinSlowInterval {
		t.Errorf("slow_interval", "%v: must be at least %v (slow queries cost milliseconds)", s.SlowInterval, sampler.MinSlowInterval)
	}
	t.Int("ring_size", &s.RingSize, 2, 1<<24)
	t.Bool("processes", &s.Processes)
	t.Duration("process_interval", &s.ProcessInterval)
	if t.Has("process_interval") && s.ProcessInterval < sampler.MinProcessInterval {
		t.Errorf("process_interval", "%v: must be at least %v (process queries cost milliseconds)", s.ProcessInterval, sampler.MinProcessInterval)
	}
	t.Bool("process_cmdline", &s.ProcessCmdline)
	t.Int("process_cmdline_max", &s.ProcessCmdlineMax, 1, 4096)
	s.Include, s.Exclude = patterns(t, cat)
	t.Finish()
	return s
}

// patterns reads include/exclude and checks that every pattern is a valid
// glob matching at least one metric or group of the catalog.
func patterns(t *config.Table, cat *catalog.Catalog) (include, exclude []string) {
	t.Strings("include", &include)
	t.Strings("exclude", &exclude)
	check := func(key string, ps []string) {
		for i, p := range ps {
			k := key + "[" + strconv.Itoa(i) + "]"
			if _, err := path.Match(p, ""); err != nil {
				t.Errorf(k, "%q is not a valid pattern: %v", p, err)
				continue
			}
			if !matchesCatalog(p, cat) {
				t.Errorf(k, "%q matches no metric or group (see gpusampler metrics)", p)
			}
		}
	}
	check("include", include)
	check("exclude", exclude)
	return include, exclude
}

func matchesCatalog(p string, cat *catalog.Catalog) bool {
	for _, g := range catalog.Groups() {
		if matchAny([]string{p}, string(g)) {
			return true
		}
	}
	for _, m := range cat.All() {
		if matchAny([]string{p}, m.Name) {
			return true
		}
	}
	return false
}

func parseOutputs(t *config.Table, agent Agent, opts Options) []*Output {
	var outs []*Output
	names := map[string]string{} // name → key of the block that took it
	for _, kind := range slices.Sorted(maps.Keys(t.Raw())) {
		v, _ := t.Take(kind)
		k, known := opts.Registry.Lookup(kind)
		if !known {
			t.Errorf(kind, "unknown output kind %q (known: %s)", kind, strings.Join(opts.Registry.Kinds(), ", "))
			continue
		}
		blocks, ok := v.([]any)
		if !ok {
			t.Errorf(kind, "want one or more [[outputs.%s]] blocks, got %s", kind, config.TypeName(v))
			continue
		}
		for i, b := range blocks {
			key := kind + "[" + strconv.Itoa(i) + "]"
			m, ok := b.(map[string]any)
			if !ok {
				t.Errorf(key, "want a table, got %s", config.TypeName(b))
				continue
			}
			bt := t.Elem(key, m)
			o := &Output{Block: outputs.Block{Kind: kind, Line: bt.Line(""), Raw: m, Table: bt, WriteTimeout: record.DefaultWriteTimeout},
				FlushInterval: agent.FlushInterval, MaxBatch: sampler.DefaultMaxBatch}
			o.Name = kind
			if i > 0 {
				o.Name = kind + "." + strconv.Itoa(i+1)
			}
			bt.String("name", &o.Name)
			if prev, dup := names[o.Name]; dup {
				bt.Errorf("name", "output name %q already used by %s", o.Name, prev)
			}
			names[o.Name] = bt.Path()
			o.Include, o.Exclude = patterns(bt, opts.Catalog)
			var agg string
			bt.String("aggregate", &agg)
			if agg != "" && agg != "raw" {
				d, err := time.ParseDuration(agg)
				switch {
				case err != nil:
					bt.Errorf("aggregate", "%q: want \"raw\" or an interval such as \"10s\"", agg)
				case d <= 0:
					bt.Errorf("aggregate", "%q: must be positive", agg)
				default:
					o.Aggregate = d
				}
			}
			bt.Duration("flush_interval", &o.FlushInterval)
			bt.Int("max_batch", &o.MaxBatch, 1, 1<<20)
			bt.Duration("write_timeout", &o.WriteTimeout)
			o.Buffer = parseBuffer(bt)
			bt.String("dead_letter_dir", &o.DeadLetterDir)
			dlMax := int(deadletter.DefaultMaxBytes)
			bt.Int("dead_letter_max_bytes", &dlMax, 1<<10, 1<<50)
			o.DeadLetterMaxBytes = int64(dlMax)
			if bt.Has("dead_letter_max_bytes") && o.DeadLetterDir == "" {
				bt.Errorf("dead_letter_max_bytes", "set, but dead_letter_dir is not: set dead_letter_dir to keep refused batches")
			}
			if k.Parse != nil {
				o.Options = k.Parse(bt)
			}
			checkDeadlines(bt, &o.Block, k)
			bt.Finish()
			outs = append(outs, o)
		}
	}
	slices.SortStableFunc(outs, func(a, b *Output) int { return a.Line - b.Line })
	return outs
}

// checkDeadlines refuses a block whose deadline budget does not nest (see
// outputs.Deadlines and the README's deadline table): write_timeout >
// the plugin call timeout > the output's own deadline >= the sink's
// request timeout, each error at the key that breaks the order.
func checkDeadlines(bt *config.Table, o *outputs.Block, k outputs.Kind) {
	if o.WriteTimeout <= 0 {
		if bt.Has("write_timeout") && !bt.HasErr("write_timeout") {
			bt.Errorf("write_timeout", "%v: must be positive", o.WriteTimeout)
		}
		return
	}
	var kt outputs.KindTimeouts
	if k.Timeouts != nil {
		kt = k.Timeouts(o)
	}
	plugin := k.OutOfProcess || kt.Call.Key != ""
	d := outputs.BudgetOf(o.WriteTimeout, kt.Call.D, plugin)
	if kt.Call.D > 0 {
		if most := record.WithinBudget(o.WriteTimeout); kt.Call.D > most {
			bt.Errorf(kt.Call.Key, "%v: must be at most %v, write_timeout %v less its margin %v (each hop's deadline ends before its caller's)",
				kt.Call.D, most, o.WriteTimeout, record.HopMargin(o.WriteTimeout))
			return
		}
	}
	if r := kt.Request; r.D > 0 && r.D > d.Output {
		via := ""
		if plugin {
			via = fmt.Sprintf(" less the plugin call's margins: call timeout %v", d.Call)
		}
		bt.Errorf(r.Key, "%v: longer than the %v this output's writes get (write_timeout %v%s); a request must end before its write's deadline: lower %s or raise write_timeout",
			r.D, d.Output, o.WriteTimeout, via, r.Key)
	}
}

// matchAny reports whether any of patterns matches name (path.Match globs).
func matchAny(patterns []string, names ...string) bool { return catalog.MatchAny(patterns, names...) }
