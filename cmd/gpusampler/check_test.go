package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// config --check finds, without contacting a sink, what run would fail on
// when it starts the outputs (a plugin binary missing, not executable or
// not matching its sha256; a listen address that cannot be bound; an
// invalid web config; a disk buffer directory that cannot be made) and warns about what run accepts but probably is not
// meant (no outputs, a default server silently assumed, two blocks writing
// every line to stdout). Each case prints exactly its lines.
func TestConfigCheckWithoutSinks(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "plugin")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("#!/bin/sh\nexit 0\n"))
	good := hex.EncodeToString(sum[:])
	bad := strings.Repeat("0", 64)
	noExec := filepath.Join(dir, "plain")
	os.WriteFile(noExec, []byte("x"), 0o644)
	web := filepath.Join(dir, "web.yml")
	os.WriteFile(web, []byte("basic_auth_users:\n  prom: not-a-bcrypt-hash\n"), 0o600)
	const path = "c.toml"
	for _, tc := range []struct {
		name, doc string
		stdout    string // the whole of stdout ({{path}} for the file)
		stderr    string // the whole of stderr
	}{
		{"plugin ok", "[[outputs.plugin]]\npath = \"" + exe + "\"\nsha256 = \"" + good + "\"\n", "{{path}}: ok\n", ""},
		{"plugin missing", "[[outputs.plugin]]\npath = \"" + dir + "/nope\"\nsha256 = \"" + good + "\"\n", "",
			"gpusampler config: {{path}}:2: outputs.plugin[0].path: \"" + dir + "/nope\": no such file or directory\n"},
		{"plugin not executable", "[[outputs.plugin]]\npath = \"" + noExec + "\"\nallow_unverified = true\n", "",
			"gpusampler config: {{path}}:2: outputs.plugin[0].path: \"" + noExec + "\": not executable (mode -rw-r--r--)\n"},
		{"plugin hash", "[[outputs.plugin]]\npath = \"" + exe + "\"\nsha256 = \"" + bad + "\"\n", "",
			"gpusampler config: {{path}}:3: outputs.plugin[0].sha256: plugins: checksum mismatch: " + exe + " has sha256 " + good +
				", config says " + bad + "; refusing to run it (update sha256 if the binary was replaced on purpose)\n"},
		{"listen host", "[[outputs.prometheus]]\nlisten = \"999.1.1.1:9400\"\n", "",
			"gpusampler config: {{path}}:2: outputs.prometheus[0].listen: \"999.1.1.1:9400\": 999.1.1.1 is not an IP address\n"},
		{"listen port", "[[outputs.prometheus]]\nlisten = \"127.0.0.1:99999\"\n", "",
			"gpusampler config: {{path}}:2: outputs.prometheus[0].listen: \"127.0.0.1:99999\": port \"99999\": want a number 0-65535\n"},
		{"listen shape", "[[outputs.prometheus]]\nlisten = \"9400\"\n", "",
			"gpusampler config: {{path}}:2: outputs.prometheus[0].listen: \"9400\": want host:port (\":9400\", \"127.0.0.1:9400\", \"[::1]:9400\")\n"},
		{"listen ok", "[[outputs.prometheus]]\nlisten = \"[::1]:0\"\n", "{{path}}: ok\n", ""},
		{"web config", "[[outputs.prometheus]]\nweb_config = \"" + web + "\"\n", "",
			"gpusampler config: {{path}}:2: outputs.prometheus[0].web_config: " + web + ": crypto/bcrypt: hashedSecret too short to be a bcrypted password\n"},
		{"buffer dir under a file", "[[outputs.stdout]]\nbuffer = \"disk\"\nbuffer_dir = \"" + noExec + "/queue\"\n", "",
			"gpusampler config: {{path}}:3: outputs.stdout[0].buffer_dir: " + noExec + "/queue: not a directory\n"},
		{"buffer dir to create", "[[outputs.stdout]]\nbuffer = \"disk\"\nbuffer_dir = \"" + dir + "/new/queue\"\n", "{{path}}: ok\n", ""},
		{"no outputs", "[agent]\nhostname = \"n1\"\n",
			"warning: {{path}}:1: no [[outputs.KIND]] block: samples are taken and go nowhere (gpusampler config prints every kind)\n{{path}}: ok, 1 warnings\n", ""},
		{"default servers", "[[outputs.influxdb]]\ndatabase = \"gpu\"\n[[outputs.nats]]\n[[outputs.telegraf]]\n[[outputs.influxdb]]\nurl = \"http://db:8086\"\ndatabase = \"gpu\"\n",
			"warning: {{path}}:1: outputs.influxdb[0]: no url: uses the default http://127.0.0.1:8086; set url to say so\n" +
				"warning: {{path}}:3: outputs.nats[0]: no servers: uses the default nats://127.0.0.1:4222; set servers to say so\n" +
				"warning: {{path}}:4: outputs.telegraf[0]: no url: uses the default http://127.0.0.1:8186; set url to say so\n" +
				"{{path}}: ok, 3 warnings\n", ""},
		{"execd beside stdout", "[[outputs.stdout]]\n[[outputs.execd]]\n",
			"warning: {{path}}:2: outputs.execd[0]: writes to stdout, as outputs.stdout \"stdout\" (line 1) does: every record would be written there twice; keep one\n" +
				"{{path}}: ok, 1 warnings\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), path)
			if err := os.WriteFile(file, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := runCLI(t, "config", "--check", file)
			wantOut, wantErr := strings.ReplaceAll(tc.stdout, "{{path}}", file), strings.ReplaceAll(tc.stderr, "{{path}}", file)
			wantCode := 0
			if wantErr != "" {
				wantCode = 1
			}
			if code != wantCode || stdout != wantOut || stderr != wantErr {
				t.Errorf("exit %d, want %d\nstdout %q\nwant   %q\nstderr %q\nwant   %q", code, wantCode, stdout, wantOut, stderr, wantErr)
			}
		})
	}
}
