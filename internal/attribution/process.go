package attribution

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpusampler/gpusampler/record"
)

// DefaultContainerLogDir is where the kubelet links every container's log
// under the name <pod>_<namespace>_<container>-<container ID>.log.
const DefaultContainerLogDir = "/var/log/containers"

// kubeContainerRE matches the container of a process's cgroup path under
// the kubelet's kubepods hierarchy, with either cgroup driver and any CRI
// runtime: cgroupfs (/kubepods/burstable/pod<UID>/<ID>) and systemd
// (/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice/
// cri-containerd-<ID>.scope, crio-<ID>.scope, docker-<ID>.scope). The
// pod UID is group 1 (with "_" for "-" under systemd), the container ID
// (64 hex digits) group 2.
var kubeContainerRE = regexp.MustCompile(`kubepods.*[/-]pod([0-9a-f_-]{36})(?:\.slice)?/(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$`)

// KubeContainer returns the pod UID and container ID of process pid from
// procRoot/PID/cgroup; both are "" for a process in no Kubernetes
// container (a host process, or one of another runtime).
func KubeContainer(procRoot string, pid uint32) (podUID, containerID string, err error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path; under cgroup v1 every hierarchy
		// names the same container.
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if m := kubeContainerRE.FindStringSubmatch(parts[2]); m != nil {
			return strings.ReplaceAll(m[1], "_", "-"), m[2], nil
		}
	}
	return "", "", sc.Err()
}

// containerLogRE parses a kubelet container log link's name. Pod,
// namespace and container names are DNS labels or subdomains, which have
// no "_", so the fields split unambiguously.
var containerLogRE = regexp.MustCompile(`^([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log$`)

// ReadContainerLogDir maps container IDs to their pod, namespace and
// container names from the kubelet's container log links in dir
// (DefaultContainerLogDir). This needs no access to the container runtime
// (CRI): the kubelet makes a link for every container it starts and
// removes it with the container. Names that are not such links are
// skipped.
func ReadContainerLogDir(dir string) (map[string]record.Attribution, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]record.Attribution, len(ents))
	for _, e := range ents {
		if m := containerLogRE.FindStringSubmatch(e.Name()); m != nil {
			out[m[4]] = record.Attribution{Pod: m[1], Namespace: m[2], Container: m[3]}
		}
	}
	return out, nil
}
