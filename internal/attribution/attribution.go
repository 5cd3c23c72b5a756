// Package attribution finds whose work runs on each GPU — the Kubernetes
// pod (from the kubelet's pod-resources API) or the HPC job (from a
// dcgm-exporter job-mapping directory, or from the Slurm cgroups of the
// GPU's processes) — and sets it on the engine's device identities, from
// where every output carries it (see record.Attribution).
package attribution

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gpusampler/gpusampler/internal/attribution/podresources"
	"github.com/gpusampler/gpusampler/record"
)

// DefaultRefresh is how often attribution is looked up again.
const DefaultRefresh = 10 * time.Second

// callTimeout bounds one pod-resources call.
const callTimeout = 5 * time.Second

// Config selects the attribution sources. Each is off when empty or false.
type Config struct {
	// PodResourcesSocket is the kubelet's pod-resources Unix socket
	// (DefaultPodResourcesSocket); "" turns Kubernetes attribution off.
	PodResourcesSocket string
	// HPCJobMappingDir is dcgm-exporter's job-mapping directory (see
	// ReadJobMapping); "" turns it off.
	HPCJobMappingDir string
	// SlurmCgroups detects the HPC job from the Slurm cgroups of each GPU's
	// processes (needs per-process sampling and the host's /proc).
	SlurmCgroups bool
	// ContainerLogDir is the kubelet's container log link directory
	// (DefaultContainerLogDir), from which each GPU process is attributed
	// to its own pod and container (see ReadContainerLogDir); "" turns
	// per-process Kubernetes attribution off.
	ContainerLogDir string
	// ProcRoot is where /proc is ("/proc" when empty).
	ProcRoot string
	// Refresh is the lookup interval (DefaultRefresh when 0).
	Refresh time.Duration
	// Log receives the problem reports (slog.Default when nil).
	Log *slog.Logger
	// Now is the clock of Stats' times (time.Now when nil).
	Now func() time.Time
}

// Enabled reports whether any source is on.
func (c Config) Enabled() bool {
	return c.PodResourcesSocket != "" || c.HPCJobMappingDir != "" || c.SlurmCgroups || c.ContainerLogDir != ""
}

// Target is what a Resolver reads devices from and sets attribution on
// (*sampler.Engine).
type Target interface {
	Devices() []record.Device
	SetAttribution(index int, a record.Attribution) bool
	ProcessPIDs(index int) []uint32
}

// ProcessTarget is a Target that also carries per-process attribution
// (*sampler.Engine): SetProcessAttribution sets, for device index, the
// attribution of each of its processes by host PID, replacing the last
// map; a process absent from it has none of its own.
type ProcessTarget interface {
	Target
	SetProcessAttribution(index int, byPID map[uint32]record.Attribution)
}

// Stats count a Resolver's work.
type Stats struct {
	// Refreshes counts lookups; Changes the device attributions they changed.
	Refreshes, Changes uint64
	// KubeErrors counts failed pod-resources lookups (the socket missing or
	// down); UnknownDevices GPU device IDs naming no sampled device;
	// SharedDevices lookups that found a GPU held by several containers
	// (then left without pod labels); MappingErrors failed reads of the
	// job-mapping directory; ContainerLogErrors failed reads of the
	// container log directory.
	KubeErrors, UnknownDevices, SharedDevices, MappingErrors, ContainerLogErrors uint64
	// Successes counts refreshes in which every source on answered (the
	// kubelet, the job-mapping directory); LastSuccess is when the newest
	// of them ended, zero before the first. Since is when the resolver was
	// made, from which a resolver that never succeeded is overdue.
	Successes   uint64
	LastSuccess time.Time
	Since       time.Time
}

// Resolver looks attribution up and applies it to a Target.
type Resolver struct {
	cfg Config
	log *slog.Logger

	// The kubelet connection, made at the first lookup and after every
	// failed one: a fresh connection dials at once, where one that has
	// failed would wait out gRPC's reconnect backoff (up to two minutes,
	// past several refreshes) before noticing that a restarted kubelet
	// answers again.
	connMu sync.Mutex
	conn   *grpc.ClientConn

	// Owned by Refresh's caller (one at a time).
	kubeDown    bool // the last lookup failed (logged once per outage)
	mappingDown bool
	logDirDown  bool
	logged      map[string]bool // unknown device IDs already logged

	refreshes, changes, kubeErrors, unknown, shared, mappingErrors, logDirErrors, successes atomic.Uint64
	lastSuccessNS                                                                           atomic.Int64
	since                                                                                   time.Time
}

// New returns a resolver. Connecting to the socket is lazy: a missing
// kubelet is reported by Refresh, not here.
func New(cfg Config) (*Resolver, error) {
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Resolver{cfg: cfg, log: cfg.Log, logged: map[string]bool{}, since: cfg.Now()}
	if r.log == nil {
		r.log = slog.Default()
	}
	if cfg.PodResourcesSocket != "" {
		conn, err := r.dial()
		if err != nil {
			return nil, err
		}
		r.conn = conn
	}
	return r, nil
}

func (r *Resolver) dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix:"+r.cfg.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("pod_resources_socket %q: %w", r.cfg.PodResourcesSocket, err)
	}
	return conn, nil
}

// kubeClient returns a client on the current connection, dialling a new
// one when the last lookup failed.
func (r *Resolver) kubeClient() (*podresources.Client, error) {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.conn == nil {
		conn, err := r.dial()
		if err != nil {
			return nil, err
		}
		r.conn = conn
	}
	return podresources.NewClient(r.conn), nil
}

// dropConn closes the connection after a failed lookup.
func (r *Resolver) dropConn() {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}

// Close releases the kubelet connection.
func (r *Resolver) Close() error {
	r.connMu.Lock()
	defer r.connMu.Unlock()
	if r.conn != nil {
		err := r.conn.Close()
		r.conn = nil
		return err
	}
	return nil
}

// Stats returns the counters.
func (r *Resolver) Stats() Stats {
	st := Stats{Refreshes: r.refreshes.Load(), Changes: r.changes.Load(), KubeErrors: r.kubeErrors.Load(),
		UnknownDevices: r.unknown.Load(), SharedDevices: r.shared.Load(), MappingErrors: r.mappingErrors.Load(),
		ContainerLogErrors: r.logDirErrors.Load(), Successes: r.successes.Load(), Since: r.since}
	if ns := r.lastSuccessNS.Load(); ns != 0 {
		st.LastSuccess = time.Unix(0, ns)
	}
	return st
}

// LastSuccessAge is how long ago the newest successful refresh ended, at
// now; before the first, how long the resolver has existed.
func (s Stats) LastSuccessAge(now time.Time) time.Duration {
	if s.LastSuccess.IsZero() {
		return now.Sub(s.Since)
	}
	return now.Sub(s.LastSuccess)
}

// Run refreshes now and then every Refresh interval until ctx ends.
func (r *Resolver) Run(ctx context.Context, t Target) {
	tick := time.NewTicker(r.cfg.Refresh)
	defer tick.Stop()
	for {
		r.Refresh(ctx, t)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Refresh looks every source up once and sets each device's attribution;
// a device no source attributes gets none (so labels of an ended pod or
// job go). A failing source attributes nothing and is logged once until it
// works again.
func (r *Resolver) Refresh(ctx context.Context, t Target) {
	r.refreshes.Add(1)
	devs := t.Devices()
	want := make(map[int]record.Attribution, len(devs))
	ok := true
	if r.cfg.PodResourcesSocket != "" {
		ok = r.kubeAttribution(ctx, devs, want) && ok
	}
	if r.cfg.HPCJobMappingDir != "" {
		ok = r.mappingAttribution(devs, want) && ok
	}
	if r.cfg.SlurmCgroups {
		for _, d := range devs {
			if a := want[d.Index]; a.HPCJob == "" {
				a.HPCJob = r.cgroupJobs(t.ProcessPIDs(d.Index))
				want[d.Index] = a
			}
		}
	}
	for _, d := range devs {
		if t.SetAttribution(d.Index, want[d.Index]) {
			r.changes.Add(1)
		}
	}
	if pt, isPT := t.(ProcessTarget); isPT && (r.cfg.ContainerLogDir != "" || r.cfg.SlurmCgroups) {
		ok = r.processAttribution(devs, pt) && ok
	}
	if ok {
		r.successes.Add(1)
		r.lastSuccessNS.Store(r.cfg.Now().UnixNano())
	}
}

// kubeAttribution reports whether the kubelet answered.
func (r *Resolver) kubeAttribution(ctx context.Context, devs []record.Device, want map[int]record.Attribution) bool {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var err error
	if _, serr := os.Stat(r.cfg.PodResourcesSocket); serr != nil {
		err = serr
	}
	var held map[int][]holder
	var unknown []string
	var kube *podresources.Client
	if err == nil {
		kube, err = r.kubeClient()
	}
	if err == nil {
		held, _, unknown, err = kubeHolders(ctx, kube, devs)
	}
	if err != nil {
		r.dropConn()
		r.kubeErrors.Add(1)
		if !r.kubeDown && !errors.Is(ctx.Err(), context.Canceled) {
			r.log.Warn("kubelet pod-resources unavailable: no pod labels until it answers",
				"pod_resources_socket", r.cfg.PodResourcesSocket, "err", err)
		}
		r.kubeDown = true
		return false
	}
	if r.kubeDown {
		r.log.Info("kubelet pod-resources answers again", "pod_resources_socket", r.cfg.PodResourcesSocket)
		r.kubeDown = false
	}
	for _, u := range unknown {
		r.unknown.Add(1)
		if !r.logged[u] {
			r.logged[u] = true
			r.log.Info("pod-resources names a GPU gpusampler does not sample; ignored", "device", u)
		}
	}
	for idx, hs := range held {
		if len(hs) != 1 {
			r.shared.Add(1)
			continue
		}
		a := want[idx]
		a.Pod, a.Namespace, a.Container = hs[0].pod, hs[0].namespace, hs[0].container
		want[idx] = a
	}
	return true
}

// mappingAttribution reports whether the job-mapping directory was read.
func (r *Resolver) mappingAttribution(devs []record.Device, want map[int]record.Attribution) bool {
	jobs, err := ReadJobMapping(r.cfg.HPCJobMappingDir)
	if err != nil {
		r.mappingErrors.Add(1)
		if !r.mappingDown {
			r.log.Warn("HPC job mapping unreadable: no hpc_job labels from it until it is", "err", err)
		}
		r.mappingDown = true
		return false
	}
	r.mappingDown = false
	for _, d := range devs {
		idx := d.Index
		if d.MIG {
			idx = d.Parent
		}
		if j := jobs[JobMappingKey(idx, d.MIG, d.GPUInstanceID)]; len(j) > 0 {
			a := want[d.Index]
			a.HPCJob = strings.Join(j, ",")
			want[d.Index] = a
		}
	}
	return true
}

// cgroupJobs returns the Slurm jobs of pids, sorted and comma-joined.
func (r *Resolver) cgroupJobs(pids []uint32) string {
	var jobs []string
	for _, pid := range pids {
		j, err := SlurmJob(r.cfg.ProcRoot, pid)
		if err != nil || j == "" || slices.Contains(jobs, j) {
			continue // the process ended, or runs outside Slurm
		}
		jobs = append(jobs, j)
	}
	slices.Sort(jobs)
	return strings.Join(jobs, ",")
}

// processAttribution sets each GPU process's own attribution: its pod,
// namespace and container from its cgroup's container ID and the kubelet's
// container log links, and its Slurm job from its cgroup. This is what
// attributes a GPU that several pods share (time-slicing, MPS), whose
// device records carry no pod labels. It reports whether the container
// log directory was read.
func (r *Resolver) processAttribution(devs []record.Device, t ProcessTarget) bool {
	ok := true
	var containers map[string]record.Attribution
	if r.cfg.ContainerLogDir != "" {
		var err error
		containers, err = ReadContainerLogDir(r.cfg.ContainerLogDir)
		if err != nil {
			ok = false
			r.logDirErrors.Add(1)
			if !r.logDirDown {
				r.log.Warn("container log directory unreadable: no per-process pod labels until it is",
					"container_log_dir", r.cfg.ContainerLogDir, "err", err)
			}
			r.logDirDown = true
		} else {
			r.logDirDown = false
		}
	}
	for _, d := range devs {
		byPID := map[uint32]record.Attribution{}
		for _, pid := range t.ProcessPIDs(d.Index) {
			var a record.Attribution
			if containers != nil {
				// An error is a process that ended since the poll.
				if _, id, err := KubeContainer(r.cfg.ProcRoot, pid); err == nil && id != "" {
					a = containers[id]
				}
			}
			if r.cfg.SlurmCgroups {
				if j, err := SlurmJob(r.cfg.ProcRoot, pid); err == nil {
					a.HPCJob = j
				}
			}
			if !a.IsZero() {
				byPID[pid] = a
			}
		}
		t.SetProcessAttribution(d.Index, byPID)
	}
	return ok
}
