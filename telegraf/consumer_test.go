package telegraf

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The module's packages import only gpusampler's public packages: an
// internal/ package of the main module is its private API, which this
// module, built by consumers against a released version, must not depend on.
func TestNoMainModuleInternalImports(t *testing.T) {
	const internal = "github.com/gpusampler/gpusampler/internal/"
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		n++
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, internal) {
				t.Errorf("%s imports %s", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("only %d Go files found", n)
	}
}

// A module outside this repository builds against the Telegraf module the
// way plugins/inputs/gpusampler/README.md says: it requires
// github.com/gpusampler/gpusampler/telegraf and points both it and
// github.com/gpusampler/gpusampler at a checkout with replace directives
// (the main module's v0.0.0 exists only through a replace). The consumer
// compiles the plugin in, as a custom Telegraf build's plugin list does.
// It runs offline: the consumer's go.mod pins this module's requirements
// (what go mod tidy would write) and its go.sum is this module's.
func TestConsumerModuleBuildsIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a consumer module")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not found: %v", err)
	}
	mod, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Dir(mod)
	own, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	// This module's requirements, without its module line and its replace.
	var reqs []string
	for _, l := range strings.Split(string(own), "\n") {
		if strings.HasPrefix(l, "module ") || strings.HasPrefix(l, "replace ") {
			continue
		}
		reqs = append(reqs, l)
	}
	goMod := "module example.com/mytelegraf\n" + strings.Join(reqs, "\n") + `
require github.com/gpusampler/gpusampler/telegraf v0.0.0

replace github.com/gpusampler/gpusampler/telegraf => ` + mod + `

replace github.com/gpusampler/gpusampler => ` + repo + `
`
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": goMod,
		"go.sum": string(sum),
		"plugins.go": `// Package mytelegraf is a custom Telegraf build's list of plugins.
package mytelegraf

import (
	_ "github.com/gpusampler/gpusampler/telegraf/plugins/inputs/gpusampler"
	"github.com/influxdata/telegraf/plugins/inputs"
)

// HasGPUSampler reports whether inputs.gpusampler is registered.
func HasGPUSampler() bool { _, ok := inputs.Inputs["gpusampler"]; return ok }
`,
		"plugins_test.go": `package mytelegraf

import "testing"

func TestRegistered(t *testing.T) {
	if !HasGPUSampler() {
		t.Fatal("inputs.gpusampler is not registered")
	}
}
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(gobin, "test", "-count=1", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("consumer module (go.mod:\n%s): go test: %v\n%s", goMod, err, out)
	}
	t.Logf("consumer module: %s", strings.TrimSpace(string(out)))
}
