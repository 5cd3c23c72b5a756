package appconfig_test

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/config"
	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/pipeline/deadletter"
	"github.com/gpusampler/gpusampler/outputs"
	"github.com/gpusampler/gpusampler/outputs/influxdb"
	"github.com/gpusampler/gpusampler/outputs/nats"
	"github.com/gpusampler/gpusampler/outputs/opentelemetry"
	"github.com/gpusampler/gpusampler/outputs/telegraf"
	"github.com/gpusampler/gpusampler/plugins"
	"github.com/gpusampler/gpusampler/record"
	"github.com/gpusampler/gpusampler/sampler"
)

// testKind is a fake output kind with one key of its own.
type testOpts struct {
	URL   string
	Token string
}

func testRegistry() *outputs.Registry {
	return outputs.NewRegistry(outputs.Kind{
		Kind: "fake",
		Parse: func(t *config.Table) any {
			o := testOpts{URL: "http://localhost"}
			t.String("url", &o.URL)
			t.String("token", &o.Token)
			return o
		},
	}, outputs.Kind{Kind: "other"})
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func parse(t *testing.T, doc string) (*appconfig.Config, error) {
	t.Helper()
	return appconfig.Parse("test.toml", []byte(doc), appconfig.Options{Registry: testRegistry(),
		LookupEnv: env(map[string]string{"TOKEN": "s3cret", "HOST": "node7", "EMPTY": ""})})
}

const fullDoc = `
[agent]
  hostname = "${HOST}"
  flush_interval = "50ms"
  stats_interval = "5s"
  self_metrics = false

[global_tags]
  cluster = "train-a"
  rack = "r12"

[sampler]
  backend = "sim"
  profile = "thermal"
  gpus = 4
  seed = 7
  devices = ["0", "GPU-abc"]
  drain_interval = "500ms"
  secondary_drain_interval = "4s"
  primary_buffers = ["total_power", "gpu_util", "encoder_util", "gpu_util"]
  field_interval = "100ms"
  slow_interval = "2s"
rare_interval = "1m"
gpm_interval = "500ms"
  ring_size = 1024
  include = ["power", "utilization_*"]
  exclude = ["module_power_draw"]

[[outputs.fake]]
  url = "http://a"
  token = "${TOKEN}"
  include = ["temperature"]
  aggregate = "10s"

[[outputs.fake]]
  name = "second"
  url = "http://b"
  flush_interval = "1s"
  max_batch = 100
  write_timeout = "2s"
  aggregate = "raw"

[[outputs.other]]
`

func TestParseFull(t *testing.T) {
	c, err := parse(t, fullDoc)
	if err != nil {
		t.Fatal(err)
	}
	wantAgent := appconfig.Agent{Hostname: "node7", FlushInterval: 50 * time.Millisecond, StatsInterval: 5 * time.Second,
		ShutdownTimeout: sampler.DefaultShutdownTimeout}
	if c.Agent != wantAgent {
		t.Errorf("agent = %+v, want %+v", c.Agent, wantAgent)
	}
	if want := map[string]string{"cluster": "train-a", "rack": "r12"}; !reflect.DeepEqual(c.GlobalTags, want) {
		t.Errorf("global tags = %v", c.GlobalTags)
	}
	wantSampler := appconfig.Sampler{Backend: "sim", Profile: "thermal", GPUs: 4, Seed: 7, Devices: []string{"0", "GPU-abc"},
		DrainInterval: 500 * time.Millisecond, SecondaryDrainInterval: 4 * time.Second,
		FieldInterval: 100 * time.Millisecond, SlowInterval: 2 * time.Second,
		PrimaryBuffers: []catalog.BufferType{catalog.BufferTotalPower, catalog.BufferGPUUtil, catalog.BufferEncoderUtil},
		RareInterval:   time.Minute, GPMInterval: 500 * time.Millisecond,
		RingSize: 1024, Processes: true, ProcessInterval: sampler.DefaultProcessInterval, ProcessCmdlineMax: 128,
		Include: []string{"power", "utilization_*"}, Exclude: []string{"module_power_draw"}}
	if !reflect.DeepEqual(c.Sampler, wantSampler) {
		t.Errorf("sampler = %+v\nwant %+v", c.Sampler, wantSampler)
	}
	if len(c.Outputs) != 3 {
		t.Fatalf("%d outputs, want 3", len(c.Outputs))
	}
	a, b, o := c.Outputs[0], c.Outputs[1], c.Outputs[2]
	if a.Name != "fake" || a.Kind != "fake" || a.Aggregate != 10*time.Second || a.FlushInterval != 50*time.Millisecond ||
		a.Options != (testOpts{URL: "http://a", Token: "s3cret"}) || a.Line != 29 {
		t.Errorf("first output = %+v", a)
	}
	if b.Name != "second" || b.Aggregate != 0 || b.FlushInterval != time.Second || b.MaxBatch != 100 ||
		b.WriteTimeout != 2*time.Second || b.Options != (testOpts{URL: "http://b"}) {
		t.Errorf("second output = %+v", b)
	}
	if o.Name != "other" || o.Kind != "other" {
		t.Errorf("third output = %+v", o)
	}
	if a.Raw["token"] != "s3cret" {
		t.Errorf("raw token = %v, want expanded", a.Raw["token"])
	}
	// The two blocks of one kind coexist with their own settings.
	sel := a.PumpOptions().Select
	cat := catalog.Default()
	temp, _ := cat.Get(catalog.MetricTempGPU)
	power, _ := cat.Get(catalog.MetricPowerDraw)
	if !sel(&temp) || sel(&power) {
		t.Error("first output's selector: want temperature only")
	}
	if b.PumpOptions().Select != nil {
		t.Error("second output selects everything")
	}
	// Parsing again gives the same data (round trip).
	c2, err := parse(t, fullDoc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range c.Outputs {
		if !c.Outputs[i].Same(c2.Outputs[i]) {
			t.Errorf("output %d differs between two parses", i)
		}
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := parse(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.StatsInterval != appconfig.DefaultStatsInterval || !c.Agent.SelfMetrics ||
		c.Agent.FlushInterval != sampler.DefaultFlushInterval {
		t.Errorf("agent defaults = %+v", c.Agent)
	}
	if c.Sampler.Backend != "auto" || c.Sampler.DrainInterval != sampler.DefaultDrainInterval || c.Sampler.GPUs != 2 {
		t.Errorf("sampler defaults = %+v", c.Sampler)
	}
	if len(c.Outputs) != 0 {
		t.Errorf("outputs = %v", c.Outputs)
	}
}

func TestShutdownTimeout(t *testing.T) {
	c, err := parse(t, "[agent]\nshutdown_timeout = \"3s\"\n")
	if err != nil || c.Agent.ShutdownTimeout != 3*time.Second {
		t.Fatalf("shutdown_timeout: %v, %v; want 3s", c, err)
	}
	if _, err := parse(t, "[agent]\nshutdown_timeout = \"0s\"\n"); err == nil || !strings.Contains(err.Error(), "test.toml:2: agent.shutdown_timeout:") {
		t.Fatalf("zero shutdown_timeout: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string // the whole error text
	}{
		{"malformed", "[agent]\nhostname = \n", "test.toml:2: "},
		{"unterminated table", "[agent\n", "test.toml:1: "},
		{"duplicate key", "[agent]\nhostname = \"a\"\nhostname = \"b\"\n", "test.toml:3: "},
		{"unknown top-level key", "\n\nfoo = 1\n", "test.toml:3: foo: unknown key (known: agent, global_tags, sampler, attribution, outputs)"},
		{"unknown agent key", "[agent]\n  hostnme = \"x\"\n",
			"test.toml:2: agent.hostnme: unknown key (known: hostname, flush_interval, stats_interval, self_metrics, state_dir, shutdown_timeout)"},
		{"unknown sampler key", "[sampler]\ngpus = 2\ndrain = \"1s\"\n", "test.toml:3: sampler.drain: unknown key"},
		{"unknown output key", "[[outputs.fake]]\nurl = \"x\"\n[[outputs.fake]]\nurll = \"y\"\n",
			"test.toml:4: outputs.fake[1].urll: unknown key (known: name, include, exclude, aggregate, flush_interval, max_batch, write_timeout, buffer, buffer_max_bytes, buffer_max_records, buffer_dir, buffer_fsync_interval, retry_initial, retry_max, buffer_close_timeout, dead_letter_dir, dead_letter_max_bytes, url, token)"},
		{"wrong type string", "[agent]\nhostname = 3\n", "test.toml:2: agent.hostname: want a string, got an integer"},
		{"wrong type int", "[sampler]\ngpus = \"two\"\n", "test.toml:2: sampler.gpus: want an integer, got a string"},
		{"wrong type bool", "[agent]\nself_metrics = \"yes\"\n", "test.toml:2: agent.self_metrics: want a boolean, got a string"},
		{"wrong type array elem", "[sampler]\ninclude = [\"power\", 3]\n", "test.toml:2: sampler.include[1]: want a string, got an integer"},
		{"wrong type duration", "[sampler]\ndrain_interval = 10\n", `test.toml:2: sampler.drain_interval: want a duration string such as "500ms", got an integer`},
		{"bad duration", "[agent]\nflush_interval = \"10 ms\"\n", `test.toml:2: agent.flush_interval: "10 ms" is not a duration (want e.g. "500us", "10ms", "1s")`},
		{"zero interval", "[sampler]\nfield_interval = \"0s\"\n", `test.toml:2: sampler.field_interval: "0s": must be positive`},
		{"negative interval", "[[outputs.fake]]\nflush_interval = \"-1s\"\n", `test.toml:2: outputs.fake[0].flush_interval: "-1s": must be positive`},
		{"negative aggregate", "[[outputs.fake]]\naggregate = \"-10s\"\n", `test.toml:2: outputs.fake[0].aggregate: "-10s": must be positive`},
		{"bad aggregate", "[[outputs.fake]]\naggregate = \"mean\"\n", `test.toml:2: outputs.fake[0].aggregate: "mean": want "raw" or an interval such as "10s"`},
		{"slow interval too short", "[sampler]\nslow_interval = \"100ms\"\n", "test.toml:2: sampler.slow_interval: 100ms: must be at least 1s (slow queries cost milliseconds)"},
		{"gpm interval too short", "[sampler]\ngpm_interval = \"50ms\"\n", "test.toml:2: sampler.gpm_interval: 50ms: must be at least 100ms (GPM snapshots need that much apart)"},
		{"secondary drain below drain", "[sampler]\ndrain_interval = \"2s\"\nsecondary_drain_interval = \"1s\"\n",
			"test.toml:3: sampler.secondary_drain_interval: 1s: must be at least drain_interval (2s)"},
		{"unknown primary buffer", "[sampler]\nprimary_buffers = [\"total_power\", \"power\"]\n",
			`test.toml:2: sampler.primary_buffers[1]: "power" is not a sample buffer (want one of: total_power, gpu_util, memory_util, encoder_util, decoder_util, sm_clock, memory_clock, module_power, jpeg_util, ofa_util)`},
		{"primary buffers not strings", "[sampler]\nprimary_buffers = \"gpu_util\"\n",
			`test.toml:2: sampler.primary_buffers: want an array of strings, got a string`},
		{"rare below slow", "[sampler]\nslow_interval = \"5s\"\nrare_interval = \"2s\"\n", "test.toml:3: sampler.rare_interval: 2s: must be at least slow_interval (5s)"},
		{"out of range", "[sampler]\ngpus = 0\n", "test.toml:2: sampler.gpus: 0 is out of range (want 1 to 64)"},
		{"unknown backend", "[sampler]\nbackend = \"dcgm\"\n", `test.toml:2: sampler.backend: unknown value "dcgm" (want one of: auto, nvml, sim)`},
		{"bad device", "[sampler]\ndevices = [\"first\"]\n", `test.toml:2: sampler.devices[0]: "first" is neither an index nor a UUID (GPU-...)`},
		{"unknown output kind", "\n[[outputs.influxdb]]\nurl = \"x\"\n", `test.toml:2: outputs.influxdb: unknown output kind "influxdb" (known: fake, other)`},
		{"output not array", "[outputs.fake]\nurl = \"x\"\n", "test.toml:1: outputs.fake: want one or more [[outputs.fake]] blocks, got a table"},
		{"unknown metric", "[[outputs.fake]]\n\ninclude = [\"power\", \"powr_draw\"]\n",
			`test.toml:3: outputs.fake[0].include[1]: "powr_draw" matches no metric or group (see gpusampler metrics)`},
		{"unknown group", "[sampler]\nexclude = [\"gpm\"]\n", `test.toml:2: sampler.exclude[0]: "gpm" matches no metric or group (see gpusampler metrics)`},
		{"bad glob", "[sampler]\ninclude = [\"power[\"]\n", `test.toml:2: sampler.include[0]: "power[" is not a valid pattern: syntax error in pattern`},
		{"undefined env", "[[outputs.fake]]\nurl = \"x\"\ntoken = \"${NOPE}\"\n", "test.toml:3: outputs.fake[0].token: environment variable NOPE is not defined"},
		{"undefined env in tags", "[global_tags]\nrack = \"r-${RACK}\"\n", "test.toml:2: global_tags.rack: environment variable RACK is not defined"},
		{"duplicate name", "[[outputs.fake]]\nname = \"x\"\n[[outputs.other]]\nname = \"x\"\n", `test.toml:4: outputs.other[0].name: output name "x" already used by outputs.fake[0]`},
		{"global tag not string", "[global_tags]\nrack = 12\n", "test.toml:2: global_tags.rack: want a string, got an integer"},
		{"empty global tag", "[global_tags]\ncluster = \"a\"\nrack = \"\"\n",
			`test.toml:3: global_tags.rack: tag value "": empty (line protocol has no empty tags: remove the key or give it a value)`},
		{"newline in global tag", "[global_tags]\nrack = \"r1\\nr2\"\n",
			`test.toml:2: global_tags.rack: tag value "r1\nr2": control character '\n' at byte 2 (newlines, tabs and other control characters cannot be written in line protocol)`},
		{"tab in global tag", "[global_tags]\nrack = \"r\\t1\"\n", `test.toml:2: global_tags.rack: tag value "r\t1": control character '\t' at byte 1`},
		{"env expands to empty tag", "[global_tags]\nrack = \"${EMPTY}\"\n", `test.toml:2: global_tags.rack: tag value "": empty`},
		{"trailing backslash in tag", "[global_tags]\nrack = 'r1\\'\n", `test.toml:2: global_tags.rack: tag value "r1\\": ends in a backslash, which line protocol cannot carry`},
		{"control char in tag key", "[global_tags]\n\"ra\\u0001ck\" = \"x\"\n", `test.toml:2: global_tags."ra\x01ck": tag key "ra\x01ck": control character '\x01' at byte 2`},
		{"newline in hostname", "[agent]\nhostname = \"node\\n1\"\n", `test.toml:2: agent.hostname: "node\n1": control character '\n' at byte 4`},
		{"inline table key", "agent = { hostname = 1 }\n", "test.toml:1: agent.hostname: want a string, got an integer"},
		{"dotted key", "[sampler]\nfoo.bar = 1\n", "test.toml:2: sampler.foo: unknown key"},
		{"unknown buffer kind", "[[outputs.fake]]\nbuffer = \"tape\"\n", `test.toml:2: outputs.fake[0].buffer: unknown value "tape" (want one of: none, memory, disk)`},
		{"disk buffer without dir", "[[outputs.fake]]\nbuffer = \"disk\"\n", "test.toml:2: outputs.fake[0].buffer: a disk buffer needs buffer_dir (a directory of its own per output)"},
		{"buffer key without buffer", "[[outputs.fake]]\n\nbuffer_dir = \"/tmp/x\"\n", `test.toml:3: outputs.fake[0].buffer_dir: set, but buffer is "none": set buffer = "memory" or "disk"`},
		{"dead-letter cap without dir", "[[outputs.fake]]\ndead_letter_max_bytes = 4096\n", "test.toml:2: outputs.fake[0].dead_letter_max_bytes: set, but dead_letter_dir is not: set dead_letter_dir to keep refused batches"},
		{"dead-letter cap too small", "[[outputs.fake]]\ndead_letter_dir = \"/tmp/x\"\ndead_letter_max_bytes = 10\n", "test.toml:3: outputs.fake[0].dead_letter_max_bytes: 10 is out of range (want 1024 to 1125899906842624)"},
		{"buffer too small", "[[outputs.fake]]\nbuffer = \"memory\"\nbuffer_max_bytes = 10\n", "test.toml:3: outputs.fake[0].buffer_max_bytes: 10 is out of range (want 1024 to 1125899906842624)"},
		{"disk buffer too small", "[[outputs.fake]]\nbuffer = \"disk\"\nbuffer_dir = \"/tmp/x\"\nbuffer_max_bytes = 4096\n", "test.toml:4: outputs.fake[0].buffer_max_bytes: 4096 is too small for a disk buffer (want at least 65536: its files are counted in whole 4 KiB blocks, with room for the cursor and a segment)"},
		{"retry max below initial", "[[outputs.fake]]\nbuffer = \"memory\"\nretry_initial = \"1s\"\nretry_max = \"10ms\"\n", "test.toml:4: outputs.fake[0].retry_max: 10ms is less than retry_initial 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.doc)
			if err == nil {
				t.Fatal("no error")
			}
			got := err.Error()
			if strings.Contains(got, "\n") {
				t.Errorf("error spans several lines:\n%s", got)
			}
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("error\n got %s\nwant %s", got, tt.want)
			}
			var ce *config.Error
			var ces config.Errors
			if !errors.As(err, &ce) && !errors.As(err, &ces) {
				t.Errorf("error %T is neither *config.Error nor config.Errors", err)
			}
		})
	}
}

// dead_letter_dir and its cap reach the output's settings; the cap has a
// default.
func TestParseDeadLetter(t *testing.T) {
	cfg, err := parse(t, "[[outputs.fake]]\ndead_letter_dir = \"/var/dl\"\n[[outputs.fake]]\ndead_letter_dir = \"/var/dl\"\ndead_letter_max_bytes = 4096\n[[outputs.fake]]\n")
	if err != nil {
		t.Fatal(err)
	}
	type dl struct {
		dir string
		max int64
	}
	var got []dl
	for _, o := range cfg.Outputs {
		got = append(got, dl{o.DeadLetterDir, o.DeadLetterMaxBytes})
	}
	want := []dl{{"/var/dl", deadletter.DefaultMaxBytes}, {"/var/dl", 4096}, {"", deadletter.DefaultMaxBytes}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := parse(t, "[agent]\nhostname = 1\n[sampler]\ngpus = 99\n[[outputs.nope]]\n")
	var es config.Errors
	if !errors.As(err, &es) || len(es) != 3 {
		t.Fatalf("err = %v, want 3 problems", err)
	}
	for i, want := range []int{2, 4, 5} {
		if es[i].Line != want {
			t.Errorf("problem %d on line %d, want %d", i, es[i].Line, want)
		}
	}
}

func TestEnvEscape(t *testing.T) {
	c, err := parse(t, "[[outputs.fake]]\nurl = \"a$${b}c-${HOST}\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Outputs[0].Options.(testOpts).URL; got != "a${b}c-node7" {
		t.Errorf("url = %q", got)
	}
}

func TestSelector(t *testing.T) {
	cat := catalog.Default()
	sel := appconfig.Selector([]string{"power", "clocks_current_*"}, []string{"power_limit"})
	var got []string
	for _, m := range cat.All() {
		if sel(&m) {
			got = append(got, m.Name)
		}
	}
	want := []string{"power_draw", "power_draw_instant", "module_power_draw", "energy_consumption",
		"clocks_current_sm", "clocks_current_memory", "clocks_current_graphics", "clocks_current_video"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("selected %v\nwant %v", got, want)
	}
}

func TestDeviceFilter(t *testing.T) {
	s := appconfig.Sampler{Devices: []string{"1", "GPU-x"}}
	f := s.DeviceFilter()
	for _, tc := range []struct {
		d    record.Device
		want bool
	}{{record.Device{Index: 1}, true}, {record.Device{Index: 0, UUID: "GPU-x"}, true}, {record.Device{Index: 2, UUID: "GPU-y"}, false}} {
		if f(tc.d) != tc.want {
			t.Errorf("filter(%+v) = %v", tc.d, !tc.want)
		}
	}
}

func TestProcessSettings(t *testing.T) {
	for _, tc := range []struct {
		name, toml string
		want       appconfig.Sampler
		err        string
	}{
		{"defaults", "", appconfig.Sampler{Processes: true, ProcessInterval: sampler.DefaultProcessInterval, ProcessCmdlineMax: sampler.DefaultCmdlineMax}, ""},
		{"off", "[sampler]\nprocesses = false\n", appconfig.Sampler{Processes: false, ProcessInterval: sampler.DefaultProcessInterval, ProcessCmdlineMax: sampler.DefaultCmdlineMax}, ""},
		{"cmdline", "[sampler]\nprocess_interval = \"10s\"\nprocess_cmdline = true\nprocess_cmdline_max = 64\n", appconfig.Sampler{Processes: true, ProcessInterval: 10 * time.Second, ProcessCmdline: true, ProcessCmdlineMax: 64}, ""},
		{"too fast", "[sampler]\nprocess_interval = \"100ms\"\n", appconfig.Sampler{}, "sampler.process_interval: 100ms: must be at least 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, tc.toml)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := cfg.Sampler
			if s.Processes != tc.want.Processes || s.ProcessInterval != tc.want.ProcessInterval || s.ProcessCmdline != tc.want.ProcessCmdline || s.ProcessCmdlineMax != tc.want.ProcessCmdlineMax {
				t.Fatalf("got %v %v %v %v, want %+v", s.Processes, s.ProcessInterval, s.ProcessCmdline, s.ProcessCmdlineMax, tc.want)
			}
		})
	}
}

func TestDefaultStateDir(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "/run/state/gpusampler:/other")
	if d, err := appconfig.DefaultStateDir(); err != nil || d != "/run/state/gpusampler" {
		t.Errorf("with STATE_DIRECTORY: %q, %v", d, err)
	}
	t.Setenv("STATE_DIRECTORY", "")
	t.Setenv("XDG_STATE_HOME", "/home/u/.state")
	want := "/home/u/.state/gpusampler"
	if os.Geteuid() == 0 {
		want = "/var/lib/gpusampler"
	}
	if d, err := appconfig.DefaultStateDir(); err != nil || d != want {
		t.Errorf("without STATE_DIRECTORY: %q, %v; want %q", d, err, want)
	}
}

// A problem with a value that came from ${VAR} names the variable, never
// its value: a secret in the environment is not printed.
func TestErrorsNeverPrintExpandedValues(t *testing.T) {
	doc := "[agent]\n  flush_interval = \"${TOKEN}\"\n[[outputs.fake]]\n  url = \"x\"\n  flush_interval = \"x${TOKEN}y\"\n"
	_, err := parse(t, doc)
	want := "test.toml:2: agent.flush_interval: \"${TOKEN}\" is not a duration (want e.g. \"500us\", \"10ms\", \"1s\")\n" +
		"test.toml:5: outputs.fake[0].flush_interval: \"x${TOKEN}y\" is not a duration (want e.g. \"500us\", \"10ms\", \"1s\")"
	if err == nil || err.Error() != want {
		t.Fatalf("err:\n%v\nwant:\n%s", err, want)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatal("the secret value is printed")
	}
}

func TestAttributionSettings(t *testing.T) {
	def := appconfig.Attribution{PodResourcesSocket: appconfig.DefaultPodResourcesSocket, ContainerLogDir: "/var/log/containers", RefreshInterval: appconfig.DefaultAttributionRefresh, ProcRoot: "/proc",
		AccountingInterval: appconfig.DefaultAccountingInterval}
	for _, tc := range []struct {
		name, toml string
		want       appconfig.Attribution
		err        string
	}{
		{"defaults", "", def, ""},
		{"all", "[attribution]\nkubernetes = true\npod_resources_socket = \"/k.sock\"\ncontainer_log_dir = \"/host/log/containers\"\nhpc_job_mapping_dir = \"/run/jobs\"\nslurm_cgroups = true\nrefresh_interval = \"2s\"\nproc_root = \"/host/proc\"\naccounting = true\naccounting_interval = \"30s\"\n",
			appconfig.Attribution{Kubernetes: true, PodResourcesSocket: "/k.sock", ContainerLogDir: "/host/log/containers", HPCJobMappingDir: "/run/jobs", SlurmCgroups: true, RefreshInterval: 2 * time.Second, ProcRoot: "/host/proc",
				Accounting: true, AccountingInterval: 30 * time.Second}, ""},
		{"accounting too often", "[attribution]\naccounting_interval = \"100ms\"\n", appconfig.Attribution{}, "attribution.accounting_interval: 100ms: must be at least 1s"},
		{"too fast", "[attribution]\nrefresh_interval = \"10ms\"\n", appconfig.Attribution{}, "attribution.refresh_interval: 10ms: must be at least 1s"},
		{"no socket", "[attribution]\nkubernetes = true\npod_resources_socket = \"\"\n", appconfig.Attribution{}, "attribution.pod_resources_socket: empty"},
		{"unknown key", "[attribution]\nhpc_job_dir = \"/x\"\n", appconfig.Attribution{}, "hpc_job_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(t, tc.toml)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Attribution != tc.want {
				t.Fatalf("got %+v, want %+v", cfg.Attribution, tc.want)
			}
		})
	}
}

// A UTF-8 byte-order mark is skipped; a duration too large for Go says
// "out of range", one that does not parse says "not a duration".
func TestBOMAndDurationRange(t *testing.T) {
	c, err := appconfig.Parse("test.toml", []byte("\xEF\xBB\xBF[agent]\n  hostname = \"n1\"\n"), appconfig.Options{Registry: testRegistry()})
	if err != nil || c.Agent.Hostname != "n1" {
		t.Fatalf("with a BOM: %v, hostname %q", err, c.Agent.Hostname)
	}
	for v, want := range map[string]string{
		"99999999999h": `test.toml:2: agent.flush_interval: "99999999999h" is out of range (at most 2562047h47m16.854775807s)`,
		"10 parsecs":   `test.toml:2: agent.flush_interval: "10 parsecs" is not a duration (want e.g. "500us", "10ms", "1s")`,
	} {
		_, err := parse(t, "[agent]\n  flush_interval = \""+v+"\"\n")
		if err == nil || err.Error() != want {
			t.Errorf("%s: got %v\nwant %s", v, err, want)
		}
	}
}

// A document that does not parse still names its section and key: a
// repeated key, an integer too large.
func TestDecodeErrorsNameSectionAndKey(t *testing.T) {
	for doc, want := range map[string]string{
		"[agent]\n  flush_interval = \"1s\"\n  flush_interval = \"2s\"\n":                                           "test.toml:3: agent.flush_interval: key flush_interval is already defined",
		"[[outputs.fake]]\n  url = \"x\"\n[[outputs.fake]]\n  url = \"y\"\n  max_batch = 99999999999999999999999\n": "test.toml:5: outputs.fake[1].max_batch: decimal number is too large to fit in a 64-bit signed integer",
	} {
		_, err := parse(t, doc)
		if err == nil || err.Error() != want {
			t.Errorf("%q:\n got %v\nwant %s", doc, err, want)
		}
	}
}

// TestCommonKeysAreTheBlockKeys: outputs.CommonKeys (what the plugin host
// strips from a block before handing it to an out-of-process kind) are
// exactly the keys Parse takes from every block, in order.
func TestCommonKeysAreTheBlockKeys(t *testing.T) {
	_, err := appconfig.Parse("t.toml", []byte("[[outputs.other]]\nbogus = 1\n"), appconfig.Options{Registry: testRegistry()})
	want := "t.toml:2: outputs.other[0].bogus: unknown key (known: " + strings.Join(outputs.CommonKeys(), ", ") + ")"
	if err == nil || err.Error() != want {
		t.Errorf("Parse: %v\nwant %s", err, want)
	}
}

// The deadline budget nests (write_timeout > call_timeout > the output's
// deadline >= the sink's request timeout): a block that inverts it is
// refused at the key that breaks the order, with its file and line.
func TestDeadlineBudget(t *testing.T) {
	reg := outputs.NewRegistry(influxdb.Kind(), nats.Kind(), plugins.Kind(), opentelemetry.Kind(), telegraf.Kind())
	parseReal := func(doc string) error {
		_, err := appconfig.Parse("budget.toml", []byte(doc), appconfig.Options{Registry: reg})
		return err
	}
	const plugin = "[[outputs.plugin]]\n  path = \"/bin/true\"\n  allow_unverified = true\n"
	for _, tc := range []struct {
		name, doc string
		want      string // "" for a valid budget
	}{
		{"defaults", "[[outputs.influxdb]]\n  url = \"http://x:8086\"\n  database = \"gpu\"\n", ""},
		{"influx timeout within", "[[outputs.influxdb]]\n  url = \"http://x:8086\"\n  database = \"gpu\"\n  timeout = \"8s\"\n", ""},
		{"influx timeout past the output deadline", "[[outputs.influxdb]]\n  url = \"http://x:8086\"\n  database = \"gpu\"\n  timeout = \"9s\"\n",
			`budget.toml:4: outputs.influxdb[0].timeout: 9s: longer than the 8s this output's writes get (write_timeout 10s less the plugin call's margins: call timeout 9s)`},
		{"influx timeout past a short write_timeout", "[[outputs.influxdb]]\n  url = \"http://x:8086\"\n  database = \"gpu\"\n  write_timeout = \"2s\"\n  timeout = \"2s\"\n",
			`budget.toml:5: outputs.influxdb[0].timeout: 2s: longer than the 1.28s`},
		{"default timeout cut by a short write_timeout", "[[outputs.influxdb]]\n  url = \"http://x:8086\"\n  database = \"gpu\"\n  write_timeout = \"2s\"\n", ""},
		{"nats ack_timeout", "[[outputs.nats]]\n  jetstream = true\n  write_timeout = \"5s\"\n  ack_timeout = \"5s\"\n",
			`budget.toml:4: outputs.nats[0].ack_timeout: 5s: longer than the 3.2s`},
		{"nats ack_timeout unset", "[[outputs.nats]]\n  jetstream = true\n  write_timeout = \"5s\"\n", ""},
		{"otel timeout past the output deadline", "[[outputs.opentelemetry]]\n  endpoint = \"http://x:4317\"\n  timeout = \"9s\"\n",
			`budget.toml:3: outputs.opentelemetry[0].timeout: 9s: longer than the 8s`},
		{"otel default timeout cut by a short write_timeout", "[[outputs.opentelemetry]]\n  endpoint = \"http://x:4317\"\n  write_timeout = \"2s\"\n", ""},
		{"telegraf timeout past the output deadline", "[[outputs.telegraf]]\n  url = \"http://x:8186\"\n  timeout = \"9s\"\n",
			`budget.toml:3: outputs.telegraf[0].timeout: 9s: longer than the 8s`},
		{"plugin call_timeout within", plugin + "  call_timeout = \"9s\"\n", ""},
		{"plugin call_timeout past write_timeout", plugin + "  call_timeout = \"10s\"\n",
			`budget.toml:4: outputs.plugin[0].call_timeout: 10s: must be at most 9s, write_timeout 10s less its margin 1s`},
		{"plugin call_timeout past a raised write_timeout", plugin + "  write_timeout = \"20s\"\n  call_timeout = \"30s\"\n",
			`budget.toml:5: outputs.plugin[0].call_timeout: 30s: must be at most 19s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parseReal(tc.doc)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused a budget that nests: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v\nwant one containing %q", err, tc.want)
			}
		})
	}
}
