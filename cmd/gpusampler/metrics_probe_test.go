package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/sampler/sim"
)

func TestPrintSupportProbesEachDevice(t *testing.T) {
	src, err := sim.New(sim.Options{GPUs: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := printSupport(&buf, src, catalog.Default()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, re := range []string{`(?m)^power_draw\s.*\syes\s+yes$`, `(?m)^module_power_draw\s.*\sno\s+no$`, `(?m)^gpu 1: .* SIMULATED$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %s:\n%s", re, out)
		}
	}
}

func TestConfigCommandPrintsExample(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"config"}, nil, &out, &errb); code != 0 || !bytes.Contains(out.Bytes(), []byte("[[outputs.stdout]]")) {
		t.Errorf("gpusampler config: code %d, stderr %s", code, errb.String())
	}
}

func TestDoctorCommandOnSimulator(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(t.Context(), []string{"doctor", "--backend", "sim", "--gpus", "1", "--latency-calls", "20"}, nil, &out, &errb)
	if code != 0 {
		t.Fatalf("gpusampler doctor: code %d, stderr %s", code, errb.String())
	}
	for _, re := range []string{`SIMULATED`, `(?m)^\s+total_power\s+depth 120, period 50ms`, `(?m)^\s+drain interval\s+1s$`, `timestamp clock:\s+realtime`} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("doctor output lacks %s:\n%s", re, out.String())
		}
	}
	out.Reset()
	if code := Main(t.Context(), []string{"doctor", "--backend", "sim", "--json", "--latency-calls", "5"}, nil, &out, &errb); code != 0 ||
		!bytes.Contains(out.Bytes(), []byte(`"simulated": true`)) {
		t.Errorf("doctor --json: code %d, output %s", code, out.String())
	}
}
