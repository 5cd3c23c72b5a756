package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	pluginproto "github.com/gpusampler/gpusampler/plugins/proto"
	"github.com/gpusampler/gpusampler/record/recordpb"
)

// pythonPlugin returns the Python example plugin's path, or skips when the
// Debian Python it runs on lacks its modules (scripts/test-deps.sh installs them).
func pythonPlugin(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("/usr/bin/python3", "-c", "import grpc, google.protobuf, cryptography").CombinedOutput(); err != nil {
		t.Skipf("/usr/bin/python3 with grpcio, protobuf and cryptography is needed (Debian: python3-grpcio python3-protobuf python3-cryptography): %v %s", err, out)
	}
	p, err := filepath.Abs("../../plugins/examples/python/file_output.py")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The Python example passes `gpusampler plugin test`.
func TestPythonPluginPassesPluginTest(t *testing.T) {
	t.Parallel()
	plugin := pythonPlugin(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "records.jsonl")
	cfg := filepath.Join(dir, "plugin.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("path = %q\n", out)), 0o644)
	code, stdout, stderr := runCLI(t, "plugin", "test", plugin, "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "PASS") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	lines := readJSONLines(t, out)
	// 1 device, 100 + 1000 + 4096 samples and 1 event in three batches.
	count := map[string]int{}
	for _, l := range lines {
		count[l["record"].(string)]++
	}
	if count["device"] != 1 || count["sample"] != 5196 || count["event"] != 1 {
		t.Fatalf("records %v", count)
	}
	// A bad key is reported with its name.
	os.WriteFile(cfg, []byte(fmt.Sprintf("path = %q\npaht = 1\n", out)), 0o644)
	code, stdout, _ = runCLI(t, "plugin", "test", plugin, "--config", cfg)
	if code == 0 || !strings.Contains(stdout, "paht: unknown key") {
		t.Fatalf("unknown key: exit %d\n%s", code, stdout)
	}
}

// In a real run, the Python plugin receives every sample that a stdout twin
// of the same run printed: the same (time, GPU, metric, value) set.
func TestPythonPluginReceivesEverySample(t *testing.T) {
	t.Parallel()
	plugin := pythonPlugin(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "records.jsonl")
	bin, err := os.ReadFile(plugin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	cfg := filepath.Join(dir, "gpusampler.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`[sampler]
backend = "sim"
gpus = 2
[[outputs.stdout]]
format = "json"
[[outputs.plugin]]
name = "python"
path = %q
sha256 = %q
[outputs.plugin.config]
path = %q
`, plugin, hex.EncodeToString(sum[:]), out)), 0o644)
	code, stdout, stderr := runCLI(t, "run", "--config", cfg, "--duration", "3s")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	type key struct {
		t           int64
		gpu, metric string
		value       float64
	}
	twin := map[key]int{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r struct {
			Type, UUID, Metric string
			Time               int64
			Value              float64
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("stdout: %v: %s", err, sc.Text())
		}
		if r.Type == "sample" {
			twin[key{r.Time, r.UUID, r.Metric, r.Value}]++
		}
	}
	got := map[key]int{}
	for _, l := range readJSONLines(t, out) {
		if l["record"] == "sample" {
			tns, _ := l["time_ns"].(json.Number).Int64()
			v, _ := l["value"].(json.Number).Float64()
			got[key{tns, l["gpu"].(string), l["metric"].(string), v}]++
		}
	}
	if len(twin) < 500 {
		t.Fatalf("only %d samples on stdout", len(twin))
	}
	missing, extra := 0, 0
	for k, n := range twin {
		if got[k] != n {
			missing++
		}
	}
	for k := range got {
		if _, ok := twin[k]; !ok {
			extra++
		}
	}
	if missing != 0 || extra != 0 {
		t.Fatalf("python plugin: %d of %d stdout samples missing or duplicated, %d extra", missing, len(twin), extra)
	}
	t.Logf("python plugin received all %d samples the stdout twin printed", len(twin))
}

func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // Unix nanoseconds do not fit a float64
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
	return out
}

// The Python classes are generated from the same .proto files as the Go
// code: a changed .proto without ./generate.sh fails here.
func TestPythonStubsMatchProto(t *testing.T) {
	t.Parallel()
	pythonPlugin(t)
	for _, tc := range []struct {
		module string
		want   proto.Message
	}{
		{"output_pb2", protodesc.ToFileDescriptorProto(pluginproto.File_output_proto)},
		{"recordpb.records_pb2", protodesc.ToFileDescriptorProto(recordpb.File_recordpb_records_proto)},
	} {
		cmd := exec.Command("/usr/bin/python3", "-B", "-c", "import sys; sys.path.insert(0, 'gen'); import "+tc.module+" as m; sys.stdout.write(m.DESCRIPTOR.serialized_pb.hex())")
		cmd.Dir = "../../plugins/examples/python"
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", tc.module, err)
		}
		raw, err := hex.DecodeString(string(out))
		if err != nil {
			t.Fatal(err)
		}
		var got descriptorpb.FileDescriptorProto
		if err := proto.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		want := tc.want.(*descriptorpb.FileDescriptorProto)
		want.SourceCodeInfo, got.SourceCodeInfo = nil, nil
		// protoc leaves json_name out of what it embeds; Go fills it in.
		clearJSONNames(want.MessageType)
		clearJSONNames(got.MessageType)
		if !proto.Equal(&got, want) {
			t.Errorf("plugins/examples/python/gen/%s.py is stale: run plugins/examples/python/generate.sh", strings.ReplaceAll(tc.module, ".", "/"))
		}
	}
}

func clearJSONNames(ms []*descriptorpb.DescriptorProto) {
	for _, m := range ms {
		for _, f := range m.Field {
			f.JsonName = nil
		}
		clearJSONNames(m.NestedType)
	}
}
