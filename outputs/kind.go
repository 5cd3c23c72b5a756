package outputs

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/record"
)

// Kind describes one kind of output: its sample fragment, how to decode its
// own keys, and how to build it.
type Kind struct {
	// Kind is the name in [[outputs.KIND]].
	Kind string
	// SampleConfig is the kind's commented fragment of the example config
	// (its sample.conf).
	SampleConfig string
	// Parse decodes the kind's own keys from a block (the common keys are
	// already taken) into its typed options, reporting problems with
	// t.Errorf. It must do no I/O. Nil means the kind has no keys of its
	// own.
	Parse func(t *config.Table) any
	// Build makes the runtime output from a parsed block.
	Build func(b *Block, env BuildEnv) (record.Output, error)
	// Check, when set, checks what a parsed block needs from this machine
	// without touching its sink (gpusampler config --check): that the
	// files it names exist and are usable, that a plugin binary matches
	// its sha256. It may read files; it must not open a network
	// connection. Problems are what run would fail on, warnings what run
	// accepts but probably is not meant (a default silently assumed); both
	// are located at keys with b.ErrorAt.
	Check func(b *Block) (problems, warnings config.Errors)
	// Exclusive kinds hold a resource their replacement needs too (a
	// listening address): on reload the running output is closed before the
	// new one is built, instead of after.
	Exclusive bool
	// Timeouts, when set, reports the kind's own steps of the deadline
	// budget in a parsed block (see Deadlines): the call timeout of a plugin
	// client the block sets, and the bound of one request to its sink.
	// The application refuses a block whose steps do not nest.
	Timeouts func(b *Block) KindTimeouts
	// OutOfProcess marks a network output that the host runs in its own
	// process: plugins.HostRegistry replaces Build with a plugin client
	// that re-executes this binary as `gpusampler plugin serve KIND`,
	// whose side calls the original Build. Outputs that write the
	// process's own stdout must stay in process.
	OutOfProcess bool
	// ExampleActive keeps the kind's block active in the example config
	// (config.example.toml). The other kinds' blocks are commented out
	// there, so that the example runs as is — their placeholders (a
	// server, a plugin path) need editing first.
	ExampleActive bool
	// SinkKeys are the block's keys that name where its records go (a URL,
	// a subject, a database, a listen address): what decides whether two
	// blocks of the kind deliver to the same place. The drain cursors are
	// kept per set of outputs named by kind, name and these keys' values,
	// so that changing any other key (a credential, a timeout, a tag)
	// keeps them. Nil: the whole block as written counts (${NAME} as the
	// reference, not its value); a kind whose sink has no settings
	// (stdout) gives an empty, non-nil list.
	SinkKeys []string
	// SummaryHistograms, when set, asks the aggregate wrapper (the block's
	// aggregate key) for the distribution of each window's samples as an
	// exponential histogram (record.Summary.Hist) for the metrics it
	// selects, their values multiplied by the scale it returns (the
	// output's unit) before binning.
	SummaryHistograms func(m catalog.Metric) (scale float64, ok bool)
}

// Block is one parsed [[outputs.KIND]] block, as a kind's Build sees it.
// The application's config model holds it together with the settings it
// applies around the output (pump, filter, buffer).
type Block struct {
	// Kind is the output's kind ("stdout").
	Kind string
	// Name identifies the output in the engine, logs and self-metrics: the
	// block's name key, else the kind for the first block of a kind and
	// "kind.N" for the N-th.
	Name string
	// Line is the line of the block's header.
	Line int
	// Aggregate is the summary window; 0 means raw samples.
	Aggregate time.Duration
	// WriteTimeout is the block's write_timeout: the deadline the pump
	// gives each Write, the top of the output's deadline budget (see
	// Deadlines).
	WriteTimeout time.Duration
	// Options is what the kind's Parse returned: its own typed, validated
	// settings.
	Options any
	// Raw is the block as written, ${ENV} expanded, for plugins and for
	// telling changed blocks from unchanged ones. Do not modify it.
	Raw map[string]any
	// Table is the block's table in its config file, which places errors
	// at their lines; nil for a block built in code.
	Table *config.Table
}

// Listener is implemented by the parsed options (Block.Options) of a kind
// that listens on an address, such as the prometheus output: config
// validation refuses two blocks that would listen on the same one.
type Listener interface {
	// ListenAddress returns the host:port the output listens on.
	ListenAddress() string
}

// ErrorAt returns a problem with key, a dotted path relative to the block
// ("config.url"), placed at the key's line in the config file (else the
// nearest enclosing key's, else the block's header). Plugins' configure
// errors reach the user through it.
func (b *Block) ErrorAt(key, msg string) *config.Error {
	if b.Table == nil {
		full := "outputs." + b.Kind
		if key != "" {
			full += "." + key
		}
		return &config.Error{File: "(config)", Line: b.Line, Key: full, Msg: msg}
	}
	e := b.Table.ErrorAt(key, msg)
	if e.Line <= 1 && b.Line > 0 {
		e.Line = b.Line
	}
	return e
}

// EnvRefs returns NAME=value for every ${NAME} the block references,
// sorted by name: what a plugin running the block is handed as its
// environment (beside a minimal base), and nothing else of the host's.
func (b *Block) EnvRefs() []string {
	if b.Table == nil {
		return nil
	}
	return b.Table.EnvRefs()
}

// KindTimeouts are a block's own steps of its deadline budget. A zero
// Timeout is not set by the block (a default that fits the budget applies).
type KindTimeouts struct {
	// Call is the host's bound on one plugin call (call_timeout).
	Call Timeout
	// Request is the bound on one request to the sink (an HTTP request's
	// timeout, a JetStream ack's).
	Request Timeout
}

// Timeout is one configured timeout and the key that sets it.
type Timeout struct {
	Key string
	D   time.Duration
}

// RequestTimeout is the deadline-budget step of a block whose request
// timeout (d) is the value of key: that step when the block sets key, none
// otherwise (a kind's default is cut short by the deadline each Write gets,
// so only a value the user wrote can break the budget's nesting).
func RequestTimeout(b *Block, key string, d time.Duration) KindTimeouts {
	if _, set := b.Raw[key]; !set {
		return KindTimeouts{}
	}
	return KindTimeouts{Request: Timeout{Key: key, D: d}}
}

// Deadlines is one output's deadline budget: each step is shorter than the
// one before, so that a slow sink returns an error before any caller gives
// up on it (see record.HopMargin).
type Deadlines struct {
	// Write is the pump's bound on one Write (write_timeout).
	Write time.Duration
	// Call is the plugin client's bound on one call to its process (out
	// of process outputs only; 0 otherwise).
	Call time.Duration
	// Output is the deadline the output itself receives.
	Output time.Duration
}

// BudgetOf returns the deadline budget of an output whose pump gives each
// Write write; outOfProcess adds the plugin call's step, call (0: write
// less its margin).
func BudgetOf(write, call time.Duration, outOfProcess bool) Deadlines {
	d := Deadlines{Write: write, Output: write}
	if outOfProcess {
		if call <= 0 {
			call = record.WithinBudget(write)
		}
		d.Call = call
		d.Output = record.WithinBudget(call)
	}
	return d
}

// CommonKeys are the keys the application takes from every output block
// (pump, filter, aggregation and buffer settings); the rest belongs to the
// kind, whose Parse never sees these.
func CommonKeys() []string { return slices.Clone(commonKeys) }

var commonKeys = []string{"name", "include", "exclude", "aggregate", "flush_interval", "max_batch", "write_timeout",
	"buffer", "buffer_max_bytes", "buffer_max_records", "buffer_dir", "buffer_fsync_interval", "retry_initial", "retry_max",
	"buffer_close_timeout", "dead_letter_dir", "dead_letter_max_bytes"}

// BuildEnv is what outputs may use when they are built.
type BuildEnv struct {
	// Stdout is the process's standard output (in-process outputs only).
	Stdout io.Writer
	// Host is the host name for records ([agent] hostname or the machine's).
	Host string
	// GlobalTags are added to every record.
	GlobalTags map[string]string
	// Logger is the output's logger (output name attached).
	Logger *slog.Logger
	// Catalog is the metric catalog.
	Catalog *catalog.Catalog
	// Version is the program's version, as `gpusampler version` prints
	// it ("" when unknown). Outputs that describe their source (the
	// OpenTelemetry resource's service.version) use it.
	Version string
}

// Registry maps output kinds to their descriptions. Build one per program
// (the gpusampler command's registry of built-in kinds); it is read-only
// once built and holds no global state, so two configs — or two blocks of
// one kind — never share anything.
type Registry struct {
	kinds map[string]Kind
}

// NewRegistry returns a registry of kinds.
func NewRegistry(kinds ...Kind) *Registry {
	r := &Registry{kinds: make(map[string]Kind, len(kinds))}
	for _, k := range kinds {
		r.kinds[k.Kind] = k
	}
	return r
}

// Lookup returns the kind named kind.
func (r *Registry) Lookup(kind string) (Kind, bool) {
	k, ok := r.kinds[kind]
	return k, ok
}

// Kinds returns every kind's name, sorted.
func (r *Registry) Kinds() []string { return slices.Sorted(maps.Keys(r.kinds)) }

// DefaultWarning returns the warning for a block that sets none of keys
// and so runs with value, the kind's default (nil when one is set):
// config --check names defaults that a missing key silently assumes.
func DefaultWarning(b *Block, value string, keys ...string) config.Errors {
	for _, k := range keys {
		if _, ok := b.Raw[k]; ok {
			return nil
		}
	}
	return config.Errors{b.ErrorAt("", fmt.Sprintf("no %s: uses the default %s; set %s to say so", keys[0], value, keys[0]))}
}
