//go:build cgo

package nvml

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler"
)

// Source is the NVML backend: one initialized NVML library and its devices.
// Open returns it; Close shuts NVML down. A process can hold one Source per
// library: the library's symbols bind once per process.
type Source struct {
	lib     nvml.Interface
	log     *slog.Logger
	opts    Options
	version NVMLVersion
	driver  string
	cuda    string // the CUDA version the driver supports ("12.8"); "" unknown
	has     map[string]bool
	plans   []metricPlan // indexed by catalog.MetricID (catalog.Default())
	// direct is the one-call GetSamples path; nil means go-nvml's.
	direct *direct

	devOnce sync.Once
	devs    []sampler.DeviceSource
	devErr  error

	closeOnce sync.Once
	closeErr  error

	// warned holds the metrics (by catalog.MetricID) and the buffer types
	// (by -1 - type) already named at WARN: each once per process,
	// whichever device finds it first.
	warnMu sync.Mutex
	warned map[int]bool
}

// warnOnce reports whether key is named for the first time.
func (s *Source) warnOnce(key int) bool {
	s.warnMu.Lock()
	defer s.warnMu.Unlock()
	if s.warned[key] {
		return false
	}
	if s.warned == nil {
		s.warned = make(map[int]bool)
	}
	s.warned[key] = true
	return true
}

// warnUnreadable names metric id at WARN, once per process, when it cannot
// be read on device dev: err says why, reasonOf sorts it (device, driver
// version, missing symbol). doctor lists the same per device.
func (s *Source) warnUnreadable(id catalog.MetricID, dev int, err error) {
	if !s.warnOnce(int(id)) {
		return
	}
	cat := catalog.Default()
	m, _ := cat.Get(id)
	reason, why := reasonOf(err), err.Error()
	if m.Src.Kind == catalog.FromBuffer {
		reason = "device"
		why = "sample buffer " + m.Src.Buffer.String() + " not supported by the device, and no point read: " + why
	}
	s.log.Warn("metric cannot be read here; not sampled", "metric", m.Name, "device", dev, "reason", reason, "why", why)
}

// warnBuffer names a sample buffer type the device does not support at
// WARN, once per process, when its metric comes from point reads instead
// (one that cannot is named by warnUnreadable).
func (s *Source) warnBuffer(t catalog.BufferType, dev int) {
	cat := catalog.Default()
	id := cat.BufferMetric(t)
	if int(id) >= len(s.plans) || s.plans[id].kind != planQuery {
		return
	}
	if !s.warnOnce(-1 - int(t)) {
		return
	}
	s.log.Warn("sample buffer not supported; its metric comes from point reads instead, at the interval the engine logs",
		"buffer", t.String(), "metric", cat.Name(id), "device", dev)
}

// reasonOf sorts why a metric cannot be read: "missing symbol" (a function
// absent from this driver library), "driver version" (a field this NVML
// version does not define) or "device".
func reasonOf(err error) string {
	var both *bothAbsentError
	var getterNS *getterNSError
	var absent *absentError
	switch {
	case errors.As(err, &both):
		return "missing symbol"
	case errors.As(err, &getterNS):
		return "driver version"
	case errors.As(err, &absent) && absent.sym != "":
		return "missing symbol"
	case errors.Is(err, sampler.ErrOldDriver):
		return "driver version"
	}
	return "device"
}

var _ sampler.Source = (*Source)(nil)

// Open loads the NVML library, initializes it and reads the driver and NVML
// versions. Errors: a missing library wraps sampler.ErrLibraryNotFound and
// says how to fix it; a library whose kernel driver is not loaded or of
// another version wraps sampler.ErrDriverNotLoaded.
func Open(opts Options) (sampler.Source, error) {
	path := opts.LibraryPath
	if path == "" {
		path = DefaultLibrary
	}
	s, err := open(nvml.New(nvml.WithLibraryPath(path)), path, opts)
	if err != nil {
		return nil, err
	}
	if !opts.TwoCallSamples && s.has["nvmlDeviceGetSamples"] {
		s.direct = newDirect(path)
	}
	return s, nil
}

// open initializes lib (the real library or a go-nvml mock). No NVML
// function but Init is called unless Init succeeded.
func open(lib nvml.Interface, path string, opts Options) (*Source, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		msg := loaderMessage(path)
		if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && msg != "" && strings.ContainsRune(path, '/') {
			// The file is there: "not found" would send the user looking
			// for it. The loader says what is wrong with it.
			return nil, &unloadableError{path: path, loader: msg}
		}
		why := ""
		if msg != "" {
			why = " (loader: " + msg + ")"
		}
		return nil, fmt.Errorf("nvml: cannot load %s%s: %w: install the NVIDIA driver, run on a host with an NVIDIA GPU, or set the NVML library path to libnvidia-ml.so.1",
			path, why, sampler.ErrLibraryNotFound)
	case nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return nil, fmt.Errorf("nvml: init %s: %w: %s; load the nvidia kernel module (or reboot after a driver upgrade)",
			path, sampler.ErrDriverNotLoaded, returnText(ret))
	default:
		return nil, fmt.Errorf("nvml: init %s: %w", path, newError("init", ret))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Source{lib: lib, log: log, opts: opts, has: make(map[string]bool, len(symbolSince))}
	var missing []string
	for name := range symbolSince {
		if err := lib.Extensions().LookupSymbol(name); err == nil {
			s.has[name] = true
		} else {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if s.has["nvmlSystemGetDriverVersion"] {
		if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
			s.driver = v
		}
	}
	if s.has["nvmlSystemGetCudaDriverVersion_v2"] {
		if v, ret := lib.SystemGetCudaDriverVersion_v2(); ret == nvml.SUCCESS {
			s.cuda = cudaVersion(v)
		}
	}
	raw := ""
	if s.has["nvmlSystemGetNVMLVersion"] {
		raw, _ = lib.SystemGetNVMLVersion()
	}
	v, err := ParseNVMLVersion(raw)
	if err != nil {
		// Unknown version: assume the oldest supported, which asks only for
		// fields whose ids never moved.
		log.Warn("cannot parse the NVML version; using the oldest supported field table", "version", raw, "assumed", MinSupported.String())
		v = NVMLVersion{Raw: raw, API: MinSupported}
	}
	s.version = v
	if v.API.Less(MinSupported) {
		log.Warn("driver older than R535 is not supported; sampling what it offers", "driver", s.driver, "nvml", raw)
	}
	s.plans = buildPlans(catalog.Default(), v.API, s.has)
	log.Info("nvml opened", "library", path, "driver", s.driver, "nvml", raw, "api", v.API.String(),
		"missing_symbols", len(missing))
	if len(missing) > 0 {
		log.Debug("nvml symbols absent from this driver; their metrics are reported unsupported", "symbols", missing)
	}
	return s, nil
}

// cudaVersion spells NVML's CUDA driver version (1000×major + 10×minor,
// 12080) as nvidia-smi prints it ("12.8"); "" for a value that is none.
func cudaVersion(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// Name returns "nvml".
func (s *Source) Name() string { return "nvml" }

// Versions returns the driver version ("550.54.15") and the NVML version
// ("12.550.54.15") as the library reports them.
func (s *Source) Versions() (driver, nvmlVersion string) { return s.driver, s.version.Raw }

// NVMLVersion returns the parsed NVML version that chose the field table.
func (s *Source) NVMLVersion() NVMLVersion { return s.version }

// Notices returns what doctor should say about the driver as a whole: a
// driver older than R535 (the oldest supported) is named, with what that
// means.
func (s *Source) Notices() []string {
	if !s.version.API.Less(MinSupported) {
		return nil
	}
	return []string{fmt.Sprintf("driver %s (NVML %s) is older than R%d (NVML %s), the oldest gpusampler supports: metrics whose functions it lacks are listed as absent from this driver; update the driver to R%d or newer",
		orUnknown(s.driver), orUnknown(s.version.Raw), branchOf(MinSupported), MinSupported, branchOf(MinSupported))}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// HasSymbol reports whether the loaded library exports an NVML function the
// backend may call (see the symbol table); doctor reports the absent ones.
func (s *Source) HasSymbol(name string) bool { return s.has[name] }

// Devices returns one DeviceSource per GPU, in NVML index order. Each also
// implements sampler.CallCounter. Later calls return the same devices.
func (s *Source) Devices() ([]sampler.DeviceSource, error) {
	s.devOnce.Do(func() { s.devs, s.devErr = s.openDevices() })
	return s.devs, s.devErr
}

func (s *Source) openDevices() ([]sampler.DeviceSource, error) {
	if !s.has["nvmlDeviceGetCount_v2"] || !s.has["nvmlDeviceGetHandleByIndex_v2"] {
		return nil, fmt.Errorf("nvml: count devices: %w", sampler.ErrNotSupported)
	}
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: count devices: %w", newError("get device count", ret))
	}
	var out []sampler.DeviceSource
	for i := 0; i < n; i++ {
		d := newDevice(s, i)
		if err := d.openByIndex(); err != nil {
			// Kept: the engine probes it (Reopen by index) until it answers.
			s.log.Warn("device does not answer at start; it is sampled once it does", "index", i, "err", err)
		}
		out = append(out, d)
	}
	// MIG instances follow the physical GPUs, numbered after them.
	next := n
	for _, p := range slices.Clone(out) {
		if p.(*device).dev == nil {
			continue
		}
		for _, m := range s.migDevices(p.(*device), next) {
			out = append(out, m)
			next++
		}
	}
	return out, nil
}

// Close shuts NVML down. Call it after every device is done; a second call
// returns the first's result.
func (s *Source) Close() error {
	s.closeOnce.Do(func() {
		for _, ds := range s.devs {
			if d, ok := ds.(*device); ok {
				d.freeGPM()
			}
		}
		s.direct.close()
		if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
			s.closeErr = fmt.Errorf("nvml: shutdown: %w", newError("shutdown", ret))
		}
	})
	return s.closeErr
}
