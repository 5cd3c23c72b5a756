package attribution

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// JobMappingKey is the file name dcgm-exporter's job-mapping directory uses
// for a device: the GPU index, or "index.gi" for a MIG instance (GPU
// instance id on the physical GPU at index).
func JobMappingKey(index int, mig bool, gpuInstanceID int) string {
	if mig {
		return strconv.Itoa(index) + "." + strconv.Itoa(gpuInstanceID)
	}
	return strconv.Itoa(index)
}

// ReadJobMapping reads a job-mapping directory: one file per GPU, named by
// JobMappingKey, holding the IDs of the jobs running on it, one per line
// (what a Slurm prolog writes). It returns the job IDs by file name, sorted;
// empty files and blank lines are skipped, other file names are ignored.
func ReadJobMapping(dir string) (map[string][]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("hpc_job_mapping_dir: %w", err)
	}
	out := map[string][]string{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !validKey(name) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the job ended between listing and reading
		}
		if err != nil {
			return nil, fmt.Errorf("hpc_job_mapping_dir: %w", err)
		}
		var jobs []string
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(jobs, l) {
				jobs = append(jobs, l)
			}
		}
		if len(jobs) > 0 {
			slices.Sort(jobs)
			out[name] = jobs
		}
	}
	return out, nil
}

// validKey reports whether name is "N" or "N.M" with decimal N and M.
func validKey(name string) bool {
	a, b, dot := strings.Cut(name, ".")
	digits := func(s string) bool {
		if s == "" {
			return false
		}
		for _, c := range s {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	return digits(a) && (!dot || digits(b))
}

// slurmJobRE matches the job component of a Slurm cgroup path, v1
// (/slurm/uid_N/job_M/step_S) and v2 (/system.slice/slurmstepd.scope/job_M/...).
var slurmJobRE = regexp.MustCompile(`/job_([0-9]+)(/|$)`)

// SlurmJob returns the Slurm job ID of process pid from procRoot/PID/cgroup
// ("" when the process runs in no Slurm job's cgroup).
func SlurmJob(procRoot string, pid uint32) (string, error) {
	f, err := os.Open(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "cgroup"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], "slurm") {
			continue
		}
		if m := slurmJobRE.FindStringSubmatch(parts[2]); m != nil {
			return m[1], nil
		}
	}
	return "", sc.Err()
}
