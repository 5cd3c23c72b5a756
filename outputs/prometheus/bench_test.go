package prometheus

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpusampler/gpusampler/catalog"
	"github.com/gpusampler/gpusampler/record"
)

// rateHz is a plausible sample rate per origin: driver buffers fast,
// fields at a few Hz, slow queries at 1 Hz.
func rateHz(m *catalog.Metric) int {
	switch m.Src.Kind {
	case catalog.FromBuffer:
		return 50
	case catalog.FromField:
		return 5
	}
	return 1
}

// loaded returns an output holding gpus devices × every catalog metric with
// a full window of samples.
func loaded(b *testing.B, gpus int) *Output {
	o, err := newOutput(Options{Host: "node7", Now: func() time.Time { return t0.Add(15 * time.Second) }})
	if err != nil {
		b.Fatal(err)
	}
	batch := &record.Batch{Devices: devices(gpus)}
	for _, m := range catalog.Default().All() {
		hz := rateHz(&m)
		for i := 0; i < 15*hz; i++ {
			ts := t0.UnixNano() + int64(i)*int64(time.Second)/int64(hz)
			for d := 0; d < gpus; d++ {
				batch.Samples = append(batch.Samples, record.Sample{TimeNS: ts, Value: value(d, m.ID) + float64(i%10), Device: uint16(d), Metric: m.ID})
			}
		}
	}
	o.now = func() time.Time { return t0.Add(15 * time.Second) }
	if err := o.Write(context.Background(), batch); err != nil {
		b.Fatal(err)
	}
	return o
}

func countSeries(b *testing.B, g prometheus.Gatherer) int {
	fams, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		n += len(f.Metric)
	}
	return n
}

// BenchmarkScrape measures a scrape of 8 GPUs × every metric (with full
// windows) against a baseline in the same run: a plain GaugeVec registry
// holding the same number of series, as a polling exporter serves them.
func BenchmarkScrape(b *testing.B) {
	const gpus = 8
	o := loaded(b, gpus)
	n := countSeries(b, o.reg)
	base := prometheus.NewRegistry()
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "baseline_value", Help: "h"}, append([]string{"series"}, o.baseLabels...))
	base.MustRegister(vec)
	for i := 0; i < n; i++ {
		vec.WithLabelValues(append([]string{strconv.Itoa(i)}, o.devices[i%gpus].labels...)...).Set(float64(i))
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(n), "series/op")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/series")
	}
	for _, c := range []struct {
		name string
		g    prometheus.Gatherer
	}{{"gather", o.reg}, {"gather-baseline-gaugevec", base}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.g.Gather(); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"http", o.Handler()}, {"http-baseline-gaugevec", promhttp.HandlerFor(base, promhttp.HandlerOpts{})}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			req := httptest.NewRequest("GET", "/metrics", nil)
			for b.Loop() {
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
			report(b)
		})
	}
}

// BenchmarkWrite measures Write in steady state (windows full): 8 GPUs,
// a batch of 100 ms of samples at the rates above.
func BenchmarkWrite(b *testing.B) {
	const gpus = 8
	o := loaded(b, gpus)
	batch := &record.Batch{}
	for _, m := range catalog.Default().All() {
		for d := 0; d < gpus; d++ {
			for i := 0; i < max(1, rateHz(&m)/10); i++ {
				batch.Samples = append(batch.Samples, record.Sample{Value: value(d, m.ID), Device: uint16(d), Metric: m.ID})
			}
		}
	}
	ts := t0.Add(15 * time.Second).UnixNano()
	b.ReportAllocs()
	for b.Loop() {
		ts += int64(100 * time.Millisecond)
		for i := range batch.Samples {
			batch.Samples[i].TimeNS = ts + int64(i%5)*int64(20*time.Millisecond)
		}
		if err := o.Write(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(batch.Samples)), "ns/sample")
	b.ReportMetric(float64(len(batch.Samples)), "samples/op")
}
