package otelcol_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusremotewriteexporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"

	"github.com/gpusampler/gpusampler/internal/appconfig"
	"github.com/gpusampler/gpusampler/internal/registry"
)

// readmeFile is the opentelemetry output's README, whose collector
// section these tests run.
const readmeFile = "../../outputs/opentelemetry/README.md"

// readmeBlock returns the fenced block of language lang that follows the
// heading in the README (the first after it).
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	data, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, heading)
	if i < 0 {
		t.Fatalf("%s has no heading %q", readmeFile, heading)
	}
	text = text[i:]
	start := strings.Index(text, "```"+lang+"\n")
	if start < 0 {
		t.Fatalf("%s: no ```%s block after %q", readmeFile, lang, heading)
	}
	text = text[start+len("```"+lang+"\n"):]
	end := strings.Index(text, "```")
	if end < 0 {
		t.Fatalf("%s: unterminated ```%s block after %q", readmeFile, lang, heading)
	}
	return text[:end]
}

// readmeFactories are the components the README's collector config names:
// the OTLP receiver, the batch processor, the Prometheus remote write and
// OTLP/HTTP exporters (a contrib and a core module of the same release).
func readmeFactories(s *sink) func() (otelcol.Factories, error) {
	return func() (otelcol.Factories, error) {
		f, err := factories(s, prometheusremotewriteexporter.NewFactory(), otlphttpexporter.NewFactory())()
		if err != nil {
			return f, err
		}
		f.Processors, err = otelcol.MakeFactoryMap[processor.Factory](batchprocessor.NewFactory())
		return f, err
	}
}

// The README's collector config is a valid config of a real collector
// with the components it names (the collector's own `validate`: parsed,
// every component's config validated, the pipelines checked), its ${env:}
// reference resolved; and the gpusampler block beside it is a valid
// gpusampler config.
func TestReadmeCollectorConfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(file, []byte(readmeBlock(t, "## Receiving with an OpenTelemetry Collector", "yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BACKEND_TOKEN", "secret")
	col, err := otelcol.NewCollector(settings(file, readmeFactories(&sink{})))
	if err != nil {
		t.Fatal(err)
	}
	if err := col.DryRun(context.Background()); err != nil {
		t.Fatalf("the README's collector config: %v", err)
	}
	toml := readmeBlock(t, "## Receiving with an OpenTelemetry Collector", "toml")
	if _, err := appconfig.Parse("README.md", []byte(toml), appconfig.Options{Registry: registry.Builtin()}); err != nil {
		t.Fatalf("the README's gpusampler block: %v", err)
	}
}
