package appconfig_test

import (
	"strings"
	"testing"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
)

// Two outputs that would share a disk buffer's directory or a listening
// address are refused at the later block's key, naming the earlier block
// with its file and line.
func TestSharedBufferDirAndListenRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, doc string
		want      []string // each a line of the error
	}{
		{"buffer_dir", `[[outputs.influxdb]]
url = "http://127.0.0.1:8086"
database = "gpu"
buffer = "disk"
buffer_dir = "` + dir + `/q"

[[outputs.nats]]
servers = ["nats://127.0.0.1:4222"]
buffer = "disk"
buffer_dir = "` + dir + `/q/"
`, []string{`c.toml:10: outputs.nats[0].buffer_dir: "` + dir + `/q/" is also the buffer_dir of outputs.influxdb[0] (c.toml:5): each disk buffer needs a directory of its own`}},
		{"listen", `[[outputs.prometheus]]
listen = ":9400"

[[outputs.prometheus]]
name = "second"
listen = "127.0.0.1:9400"

[[outputs.prometheus]]
name = "third"
`, []string{
			`c.toml:6: outputs.prometheus[1].listen: "127.0.0.1:9400" takes the address that outputs.prometheus[0] (c.toml:2) listens on, ":9400": two outputs cannot listen on one address`,
			`c.toml:8: outputs.prometheus[2].listen: ":9400" (the default) takes the address that outputs.prometheus[0] (c.toml:2) listens on, ":9400": two outputs cannot listen on one address`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := appconfig.Parse("c.toml", []byte(tc.doc), appconfig.Options{Registry: registry.Builtin()})
			if err == nil {
				t.Fatal("parsed without error")
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", err, strings.Join(tc.want, "\n"))
			}
		})
	}
	for _, doc := range []string{
		"[[outputs.prometheus]]\nlisten = \"127.0.0.1:9400\"\n[[outputs.prometheus]]\nname = \"b\"\nlisten = \"127.0.0.2:9400\"\n",
		"[[outputs.prometheus]]\nlisten = \":0\"\n[[outputs.prometheus]]\nname = \"b\"\nlisten = \":0\"\n",
		"[[outputs.prometheus]]\n[[outputs.prometheus]]\nname = \"b\"\nlisten = \":9401\"\n",
	} {
		if _, err := appconfig.Parse("c.toml", []byte(doc), appconfig.Options{Registry: registry.Builtin()}); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}
