package deploy

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	// The config the DaemonSet mounts passes gpusampler's own check, with
	// the environment the DaemonSet gives the container, and takes its host
	// name from the node's (NODE_NAME from spec.nodeName), not the pod's.
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = "gpu-node-7"
		}
	}
	if env["NODE_NAME"] != "gpu-node-7" {
		t.Errorf("DaemonSet: NODE_NAME must come from spec.nodeName: %+v", c.Env)
	}
	cfg := checkConfig(t, "configmap.yaml", cm.Data["gpusampler.toml"], env)
	if cfg.Agent.Hostname != "gpu-node-7" {
		t.Errorf("configmap.yaml: [agent] hostname = %q with NODE_NAME=gpu-node-7, want the node name", cfg.Agent.Hostname)
	}
	checkNoStdout(t, "configmap.yaml", cfg)
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

// checkConfig parses a shipped config as gpusampler's config check does,
// with env the only environment variables defined, and returns it.
func checkConfig(t *testing.T, where, text string, env map[string]string) *appconfig.Config {
	t.Helper()
	if text == "" {
		t.Fatalf("%s: no gpusampler.toml", where)
	}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	cfg, err := appconfig.Parse(where, []byte(text), appconfig.Options{Registry: registry.Builtin(), LookupEnv: lookup})
	if err != nil {
		t.Fatalf("%s: gpusampler.toml: %v", where, err)
	}
	return cfg
}

// A service's stdout is its log (the journal, the container log): a
// shipped config writes samples to a network sink, none to stdout.
func checkNoStdout(t *testing.T, where string, cfg *appconfig.Config) {
	t.Helper()
	if len(cfg.Outputs) == 0 {
		t.Errorf("%s: no outputs", where)
	}
	for _, o := range cfg.Outputs {
		if o.Kind == "stdout" || o.Kind == "execd" {
			t.Errorf("%s:%d: [[outputs.%s]] writes every sample to stdout, the service's log", where, o.Line, o.Kind)
		}
	}
}

func TestContainerConfigChecks(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "container", "gpusampler.toml"))
	if err != nil {
		t.Fatal(err)
	}
	checkNoStdout(t, "deploy/container/gpusampler.toml", checkConfig(t, "deploy/container/gpusampler.toml", string(b), nil))
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
	// https sinks with public CAs verify only with a CA bundle; Debian slim
	// has none until ca-certificates is installed.
	if !regexp.MustCompile(`(?m)^RUN .*apt-get install [^\n]*ca-certificates`).MatchString(strings.ReplaceAll(runtime, "\\\n", " ")) {
		t.Errorf("Dockerfile: the runtime stage must install ca-certificates:\n%s", runtime)
	}
}

// The systemd steps install deploy/systemd/gpusampler.toml, a config a
// service should run (a Prometheus endpoint), not config.example.toml, whose
// only output writes every sample to stdout, the journal.
func TestSystemdConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "gpusampler.toml"))
	if err != nil {
		t.Fatal(err)
	}
	checkNoStdout(t, "deploy/systemd/gpusampler.toml", checkConfig(t, "deploy/systemd/gpusampler.toml", string(b), nil))
	readme, err := os.ReadFile(filepath.Join(root, "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "install -D -m 0644 deploy/systemd/gpusampler.toml /etc/gpusampler/gpusampler.toml") ||
		strings.Contains(string(readme), "install -D -m 0644 config.example.toml") {
		t.Error("deploy/README.md: the systemd steps must install deploy/systemd/gpusampler.toml as /etc/gpusampler/gpusampler.toml")
	}
}

// The systemd unit passes systemd-analyze verify (where systemd is
// installed) through deploy/systemd/verify.sh, the check deploy/README.md
// documents before installing: its copy of the unit names the binary given
// (here a stand-in) as ExecStart. A unit with a mistake fails it.
func TestSystemdUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
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
	bin := filepath.Join(t.TempDir(), "gpusampler")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join(root, "deploy", "systemd", "verify.sh"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(script, bin).CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/systemd/verify.sh: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))

	// The check is not a formality: a unit with an unknown directive in a
	// copy of the script's directory fails it.
	dir := t.TempDir()
	for _, f := range []string{"verify.sh", "gpusampler.service"} {
		b, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "gpusampler.service" {
			b = bytes.Replace(b, []byte("Restart=on-failure"), []byte("Restart=sometimes"), 1)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(filepath.Join(dir, "verify.sh"), bin).CombinedOutput(); err == nil {
		t.Errorf("verify.sh passed a unit with Restart=sometimes:\n%s", out)
	}
}
