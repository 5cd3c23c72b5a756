package plugins_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/outputtest"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/plugins/sdk"
	"github.com/gpusampler/gpusampler/sampler"
)

// fileKind is a built-in-style kind marked OutOfProcess: it appends the
// sample count of each batch and the build environment to a file.
func fileKind() outputs.Kind {
	return outputs.Kind{Kind: "countfile", SampleConfig: "[[outputs.countfile]]\n  path = \"/tmp/x\"\n",
		OutOfProcess: true,
		Parse: func(t *config.Table) any {
			var p string
			t.String("path", &p)
			if p == "" {
				t.Errorf("path", "required")
			}
			return p
		},
		Build: func(o *outputs.Block, env outputs.BuildEnv) (sampler.Output, error) {
			f, err := os.OpenFile(o.Options.(string), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				return nil, err
			}
			f.WriteString("built in pid " + itoa(os.Getpid()) + " host " + env.Host + " name " + o.Name + "\n")
			return &countFile{f: f}, nil
		}}
}

type countFile struct{ f *os.File }

func (c *countFile) Write(_ context.Context, b *sampler.Batch) error {
	_, err := c.f.WriteString("samples " + itoa(len(b.Samples)) + "\n")
	return err
}
func (c *countFile) Close() error { return c.f.Close() }

// TestHelperServe is the re-executed binary: `gpusampler plugin serve KIND`
// in this test binary.
func TestHelperServe(t *testing.T) {
	if os.Getenv("GPUSAMPLER_HELPER_SERVE") == "" {
		t.Skip("helper process only")
	}
	sdk.ServeKind(fileKind())
	os.Exit(0)
}

// A kind marked OutOfProcess is built by HostRegistry as a plugin client
// that re-executes the binary; the plugin side builds it with the kind's
// own Build. Key errors from that side land at the config's lines.
func TestHostRegistryOutOfProcess(t *testing.T) {
	exe, _ := os.Executable()
	// the plugin's environment is minimal: the helper's variables go in HostOptions.Env
	reg := plugins.HostRegistry(outputs.NewRegistry(fileKind()), plugins.HostOptions{Executable: exe,
		Args: func(string) []string { return []string{"-test.run=^TestHelperServe$"} },
		Env:  []string{"GPUSAMPLER_HELPER_SERVE=1", "GPUSAMPLER_HELPER_PLUGIN=" + testPluginPath}})
	path := filepath.Join(t.TempDir(), "out.txt")
	cfg, err := appconfig.Parse("t.toml", []byte("[[outputs.countfile]]\n  name = \"far\"\n  flush_interval = \"1s\"\n  path = \""+path+"\"\n"),
		appconfig.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	k, _ := reg.Lookup("countfile")
	out, err := k.Build(&cfg.Outputs[0].Block, outputs.BuildEnv{Host: "node7"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := out.(*plugins.Client); !ok {
		t.Fatalf("built %T, want *plugins.Client", out)
	}
	if err := out.Write(context.Background(), &sampler.Batch{Seq: 1, Samples: outputtest.Samples(7)}); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	got := string(data)
	if strings.Contains(got, "pid "+itoa(os.Getpid())+" ") || !strings.Contains(got, "host node7 name far") ||
		!strings.Contains(got, "samples 7") {
		t.Fatalf("plugin side wrote %q", got)
	}
}
