package deploy

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
)

const root = "../.."

// decodeStrict decodes a manifest into v the way the API server's strict
// field validation does: unknown and duplicate fields are errors, and field
// names are case-sensitive (encoding/json alone would take "hostPid" for
// hostPID; Kubernetes drops it).
func decodeStrict(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := strictYAML(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func strictYAML(b []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func TestKubernetesManifestsDecodeStrictly(t *testing.T) {
	var ns corev1.Namespace
	decodeStrict(t, "namespace.yaml", &ns)
	var cm corev1.ConfigMap
	decodeStrict(t, "configmap.yaml", &cm)
	var ds appsv1.DaemonSet
	decodeStrict(t, "daemonset.yaml", &ds)
	var svc corev1.Service
	decodeStrict(t, "service.yaml", &svc)
	var sm monitoringv1.ServiceMonitor
	decodeStrict(t, "servicemonitor.yaml", &sm)

	for kind, got := range map[string]string{"Namespace": ns.Kind, "ConfigMap": cm.Kind, "DaemonSet": ds.Kind,
		"Service": svc.Kind, "ServiceMonitor": sm.Kind} {
		if got != kind {
			t.Errorf("kind %q, want %q", got, kind)
		}
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostPID {
		t.Error("DaemonSet: hostPID must be true (process attribution reads /proc/<pid>/cgroup)")
	}
	if spec.NodeSelector["nvidia.com/gpu.present"] != "true" {
		t.Errorf("DaemonSet: GPU node selector %v", spec.NodeSelector)
	}
	tolerated := false
	for _, tol := range spec.Tolerations {
		tolerated = tolerated || tol.Key == "nvidia.com/gpu"
	}
	if !tolerated {
		t.Error("DaemonSet: no toleration for nvidia.com/gpu taints")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("DaemonSet: %d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	if m, ok := mounts["/var/lib/kubelet/pod-resources"]; !ok || !m.ReadOnly {
		t.Errorf("DaemonSet: the pod-resources socket must be mounted read-only: %+v", m)
	}
	if m, ok := mounts["/var/log/containers"]; !ok || !m.ReadOnly {
		t.Errorf("DaemonSet: the container log links (per-process pod labels) must be mounted read-only: %+v", m)
	}
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("DaemonSet: container security context %+v", c.SecurityContext)
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("DaemonSet: must run as non-root")
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9400 {
		t.Errorf("DaemonSet: ports %+v", c.Ports)
	}
	if svc.Spec.Ports[0].Port != 9400 || svc.Spec.Selector["app.kubernetes.io/name"] != ds.Spec.Selector.MatchLabels["app.kubernetes.io/name"] {
		t.Errorf("Service does not select the DaemonSet's pods on 9400: %+v", svc.Spec)
	}
	if sm.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != svc.Labels["app.kubernetes.io/name"] ||
		sm.Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("ServiceMonitor does not select the Service's metrics port: %+v", sm.Spec)
	}
	// The config the DaemonSet mounts passes gpusampler's own check.
	checkConfig(t, "configmap.yaml", cm.Data["gpusampler.toml"])
	found := false
	for _, v := range spec.Volumes {
		found = found || v.ConfigMap != nil && v.ConfigMap.Name == cm.Name
	}
	if !found {
		t.Errorf("DaemonSet does not mount ConfigMap %q", cm.Name)
	}
}

// A misspelt key is refused (the strict decoding is not a formality).
func TestStrictDecodingRefusesUnknownFields(t *testing.T) {
	var ds appsv1.DaemonSet
	err := strictYAML([]byte("apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  template:\n    spec:\n      hostPid: true\n"), &ds)
	if err == nil || !strings.Contains(err.Error(), "hostPid") {
		t.Fatalf("err %v", err)
	}
}

func checkConfig(t *testing.T, where, text string) {
	t.Helper()
	if text == "" {
		t.Fatalf("%s: no gpusampler.toml", where)
	}
	if _, err := appconfig.Parse(where, []byte(text), appconfig.Options{Registry: registry.Builtin()}); err != nil {
		t.Fatalf("%s: gpusampler.toml: %v", where, err)
	}
}

func TestContainerConfigChecks(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "container", "gpusampler.toml"))
	if err != nil {
		t.Fatal(err)
	}
	checkConfig(t, "deploy/container/gpusampler.toml", string(b))
	df, err := os.ReadFile(filepath.Join(root, "deploy", "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Multi-stage, and the runtime stage runs as a non-root user with no Go.
	stages := strings.Split(string(df), "\nFROM ")
	runtime := stages[len(stages)-1]
	if len(stages) < 2 || strings.Contains(runtime, "golang") || !strings.Contains(runtime, "\nUSER 10001") {
		t.Fatalf("Dockerfile: want a multi-stage build whose last stage has no Go toolchain and runs as USER 10001")
	}
}

// The systemd unit passes systemd-analyze verify (where systemd is
// installed), with ExecStart pointed at a real binary.
func TestSystemdUnitVerifies(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian: systemd)")
	}
	unit, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "gpusampler.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DynamicUser=yes", "StateDirectory=gpusampler", "ProtectSystem=strict", "NoNewPrivileges=yes",
		"Restart=on-failure", "ExecReload=/bin/kill -HUP $MAINPID"} {
		if !bytes.Contains(unit, []byte("\n"+want+"\n")) {
			t.Errorf("unit lacks %s", want)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "gpusampler")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gpusampler.service")
	os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/gpusampler"), []byte(bin)), 0o644)
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	// verify prints problems and exits non-zero; on a machine that is not
	// booted with systemd it may also note that, which is not the unit's.
	var problems []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "gpusampler.service") {
			problems = append(problems, l)
		}
	}
	if len(problems) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	t.Logf("systemd-analyze verify: ok (%s)", strings.TrimSpace(string(out)))
}
