package plugins

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	_ "embed"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/record"
)

//go:embed sample.conf
var sampleConf string

// KindOptions are a [[outputs.plugin]] block's own settings.
type KindOptions struct {
	// Path is the plugin executable (absolute).
	Path string
	// SHA256 is the executable's expected checksum (hex), checked at every
	// start and restart against the very file that is executed.
	SHA256 string
	// AllowUnverified runs a plugin that has no SHA256 (it is refused
	// otherwise).
	AllowUnverified bool
	// Config is the [outputs.plugin.config] table, handed to Configure.
	Config map[string]any
	// CallTimeout, HealthInterval and HealthTimeout tune supervision;
	// RestartDelayMax caps the delay between restarts (default 5 s).
	CallTimeout, HealthInterval, HealthTimeout, RestartDelayMax time.Duration
	// MemoryMax is memory_max_bytes as Options.MemoryMax takes it: 0 when
	// not set (the default limit), -1 for memory_max_bytes = 0 (no limit).
	MemoryMax int64
}

// Kind returns the "plugin" output kind: a custom plugin by path.
//
//	[[outputs.plugin]]
//	  name = "my-sink"
//	  path = "/usr/local/lib/gpusampler/my-sink"
//	  sha256 = "…"
//	  [outputs.plugin.config]
//	    url = "…"
func Kind() outputs.Kind {
	return outputs.Typed(outputs.TypedKind[KindOptions]{Kind: "plugin", SampleConfig: sampleConf, Parse: parseKind, Build: buildKind, Check: checkKind,
		Timeouts: func(_ *outputs.Block, ko KindOptions) outputs.KindTimeouts {
			return outputs.KindTimeouts{Call: outputs.Timeout{Key: "call_timeout", D: ko.CallTimeout}}
		}})
}

// checkKind checks, for config --check, what starting the plugin would:
// the path is an executable file and, with sha256, its checksum matches.
func checkKind(o *outputs.Block, ko KindOptions) (problems, _ config.Errors) {
	if ko.Path == "" {
		return nil, nil
	}
	fi, err := os.Stat(ko.Path)
	switch {
	case err != nil:
		return config.Errors{o.ErrorAt("path", fmt.Sprintf("%q: %v", ko.Path, errors.Unwrap(err)))}, nil
	case !fi.Mode().IsRegular():
		return config.Errors{o.ErrorAt("path", fmt.Sprintf("%q: not a regular file", ko.Path))}, nil
	case fi.Mode().Perm()&0o111 == 0:
		return config.Errors{o.ErrorAt("path", fmt.Sprintf("%q: not executable (mode %v)", ko.Path, fi.Mode().Perm()))}, nil
	}
	if ko.SHA256 == "" {
		return nil, nil
	}
	if err := VerifyChecksum(ko.Path, ko.SHA256); err != nil {
		key := "path"
		if errors.Is(err, ErrChecksum) {
			key = "sha256"
		}
		return config.Errors{o.ErrorAt(key, err.Error())}, nil
	}
	return nil, nil
}

// fileSHA256 returns the hex sha256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open plugin: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read plugin: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func parseKind(t *config.Table) KindOptions {
	var o KindOptions
	t.String("path", &o.Path)
	switch {
	case !t.Has("path"):
		t.Errorf("", "path is required (the plugin executable)")
	case !filepath.IsAbs(o.Path):
		t.Errorf("path", "%q: want an absolute path", o.Path)
	}
	t.String("sha256", &o.SHA256)
	t.Bool("allow_unverified", &o.AllowUnverified)
	if !t.Has("sha256") && !o.AllowUnverified {
		t.Errorf("", "sha256 is required (sha256sum PATH): the plugin binary is verified at every start; set allow_unverified = true to run it unverified")
	}
	if o.SHA256 != "" {
		if b, err := hex.DecodeString(o.SHA256); err != nil || len(b) != sha256.Size {
			t.Errorf("sha256", "%q: want 64 hex digits (sha256sum PATH)", o.SHA256)
		}
		o.SHA256 = strings.ToLower(o.SHA256)
	}
	t.Duration("call_timeout", &o.CallTimeout)
	t.Duration("health_interval", &o.HealthInterval)
	t.Duration("health_timeout", &o.HealthTimeout)
	t.Duration("restart_delay_max", &o.RestartDelayMax)
	if t.Has("memory_max_bytes") {
		var n int
		t.Int("memory_max_bytes", &n, 0, 1<<50)
		switch {
		case n == 0:
			o.MemoryMax = -1
		case n < minMemoryMax:
			t.Errorf("memory_max_bytes", "%d: want at least %d (1 MiB), or 0 for no limit", n, minMemoryMax)
		default:
			o.MemoryMax = int64(n)
		}
	}
	// The config table belongs to the plugin: it validates it in Configure.
	o.Config = t.Sub("config").Raw()
	return o
}

// minMemoryMax is the smallest memory_max_bytes (1 MiB): no process runs
// in less.
const minMemoryMax = 1 << 20

// ErrChecksum is wrapped by the error of a plugin whose executable does
// not match its configured sha256.
var ErrChecksum = errors.New("plugins: checksum mismatch")

// VerifyChecksum checks that the file at path has the sha256 want (hex).
func VerifyChecksum(path, want string) error {
	got, err := fileSHA256(path)
	if err != nil {
		return err
	}
	if got != strings.ToLower(want) {
		return checksumError(path, got, want)
	}
	return nil
}

func checksumError(path, got, want string) error {
	return fmt.Errorf("%w: %s has sha256 %s, config says %s; refusing to run it (update sha256 if the binary was replaced on purpose)",
		ErrChecksum, path, got, strings.ToLower(want))
}

func buildKind(o *outputs.Block, ko KindOptions, env outputs.BuildEnv) (record.Output, error) {
	if ko.SHA256 == "" && env.Logger != nil {
		env.Logger.Warn("plugin runs unverified (allow_unverified = true): its binary is not checked", "path", ko.Path)
	}
	path := ko.Path
	c, err := Start(Options{Name: o.Name, Kind: o.Kind, Config: ko.Config, Host: env.Host, GlobalTags: env.GlobalTags,
		Catalog: env.Catalog, Logger: env.Logger, Command: func() *exec.Cmd { return exec.Command(path) },
		SHA256: ko.SHA256, Env: o.EnvRefs(),
		CallTimeout: callTimeout(o, ko.CallTimeout), HealthInterval: ko.HealthInterval, HealthTimeout: ko.HealthTimeout,
		BackoffMax: ko.RestartDelayMax, MemoryMax: ko.MemoryMax})
	if err != nil {
		return nil, placeKeyErrors(o, "config.", err)
	}
	return c, nil
}

// callTimeout is the call timeout of o's plugin client: set (the plugin
// kind's call_timeout), else its step of the deadline budget, the block's
// write_timeout less its margin; without a write_timeout (a block built in
// code), DefaultCallTimeout.
func callTimeout(o *outputs.Block, set time.Duration) time.Duration {
	if set > 0 {
		return set
	}
	if o.WriteTimeout > 0 {
		return outputs.BudgetOf(o.WriteTimeout, 0, true).Call
	}
	return DefaultCallTimeout
}

// placeKeyErrors turns a plugin's key errors into config errors at the
// keys' lines (prefix locates the block handed to the plugin inside the
// output's block); other errors pass through.
func placeKeyErrors(o *outputs.Block, prefix string, err error) error {
	kerrs := KeyErrors(err)
	if kerrs == nil {
		return err
	}
	var errs config.Errors
	for _, k := range kerrs {
		key := strings.TrimSuffix(prefix, ".")
		if k.Key != "" {
			key = prefix + k.Key
		}
		errs = append(errs, o.ErrorAt(key, k.Msg))
	}
	slices.SortStableFunc(errs, func(a, b *config.Error) int { return a.Line - b.Line })
	return fmt.Errorf("plugin refused its config:\n%w", errs)
}

// HostOptions configure HostRegistry.
type HostOptions struct {
	// Executable is the gpusampler binary to re-execute. When empty: on
	// Linux /proc/self/exe, the very binary the host runs even if the file
	// was replaced since (a package upgrade); elsewhere os.Executable().
	Executable string
	// Args returns the arguments that make Executable serve kind
	// (default: plugin serve KIND), or, with Shared, every out-of-process
	// kind (kind is "" then; default: plugin serve).
	Args func(kind string) []string
	// Env are NAME=value variables handed to every re-executed process,
	// beside the minimal environment and, for a process of one output, its
	// block's ${VAR}s (see Options.Env).
	Env []string
	// Shared runs the outputs of every out-of-process kind as instances in
	// one process (a SharedProcess, started with the first of them) instead
	// of a process each: one process's memory instead of one per output,
	// the same isolation of the sampler from its outputs (see
	// SharedProcess for what the outputs then share). Their blocks reach the
	// process with ${VAR}s already expanded, so it gets only Env.
	Shared bool
	// SharedMemoryMax is the shared process's memory limit
	// (SharedProcess.MemoryMax; 0: DefaultSharedMemoryMax).
	SharedMemoryMax int64
	// Logger receives the shared process's own log lines (Shared only);
	// its outputs' lines name their output.
	Logger *slog.Logger
}

// HostRegistry returns a copy of r in which every kind marked OutOfProcess
// is built as a plugin client that re-executes the gpusampler binary as
// `gpusampler plugin serve KIND`; that process builds the real output with
// r's own Build (see sdk.ServeKind). With h.Shared, the outputs of all
// those kinds run in one `gpusampler plugin serve` process instead (see
// sdk.ServeKinds). The other kinds are unchanged. The fan-out cannot tell
// the difference: both are sampler.Outputs.
func HostRegistry(r *outputs.Registry, h HostOptions) *outputs.Registry {
	if h.Args == nil {
		h.Args = func(kind string) []string {
			if kind == "" {
				return []string{"plugin", "serve"}
			}
			return []string{"plugin", "serve", kind}
		}
	}
	var shared *SharedProcess
	if h.Shared {
		args := h.Args("")
		shared = NewSharedProcess(func() *exec.Cmd {
			exe, argv0, err := h.executable()
			if err != nil {
				// a command that fails to start, with the reason
				return &exec.Cmd{Path: exe, Args: []string{argv0}, Err: err}
			}
			cmd := exec.Command(exe, args...)
			cmd.Args[0] = argv0
			return cmd
		}, h.Env, h.Logger)
		shared.MemoryMax = h.SharedMemoryMax
	}
	var kinds []outputs.Kind
	for _, name := range r.Kinds() {
		k, _ := r.Lookup(name)
		if k.OutOfProcess {
			if shared != nil {
				k.Build = sharedBuild(k.Kind, shared)
			} else {
				k.Build = hostBuild(k.Kind, h)
			}
		}
		kinds = append(kinds, k)
	}
	return outputs.NewRegistry(kinds...)
}

// executable returns the binary to re-execute and its argv[0].
func (h HostOptions) executable() (exe, argv0 string, err error) {
	if h.Executable != "" {
		return h.Executable, h.Executable, nil
	}
	if argv0, err = os.Executable(); err != nil {
		return "", "", fmt.Errorf("find gpusampler executable: %w", err)
	}
	return cmp.Or(selfExe, argv0), argv0, nil
}

// outputBlock is o's block without the keys the config package takes:
// what the output's own Parse reads in the plugin process.
func outputBlock(o *outputs.Block) map[string]any {
	block := maps.Clone(o.Raw)
	for _, k := range outputs.CommonKeys() {
		delete(block, k)
	}
	return block
}

func sharedBuild(kind string, sp *SharedProcess) func(o *outputs.Block, env outputs.BuildEnv) (record.Output, error) {
	return func(o *outputs.Block, env outputs.BuildEnv) (record.Output, error) {
		c, err := Start(Options{Name: o.Name, Kind: kind, Config: outputBlock(o), Host: env.Host, GlobalTags: env.GlobalTags,
			Catalog: env.Catalog, Logger: env.Logger, Shared: sp, CallTimeout: callTimeout(o, 0)})
		if err != nil {
			return nil, placeKeyErrors(o, "", err)
		}
		return c, nil
	}
}

func hostBuild(kind string, h HostOptions) func(o *outputs.Block, env outputs.BuildEnv) (record.Output, error) {
	return func(o *outputs.Block, env outputs.BuildEnv) (record.Output, error) {
		exe, argv0, err := h.executable()
		if err != nil {
			return nil, err
		}
		args := h.Args(kind)
		c, err := Start(Options{Name: o.Name, Kind: kind, Config: outputBlock(o), Host: env.Host, GlobalTags: env.GlobalTags,
			Catalog: env.Catalog, Logger: env.Logger, CallTimeout: callTimeout(o, 0),
			Env: append(slices.Clone(h.Env), o.EnvRefs()...), Command: func() *exec.Cmd {
				cmd := exec.Command(exe, args...)
				cmd.Args[0] = argv0
				return cmd
			}})
		if err != nil {
			return nil, placeKeyErrors(o, "", err)
		}
		return c, nil
	}
}
